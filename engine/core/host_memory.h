// How much memory this process may still allocate on the host, for the checks that must fail before a
// large allocation rather than have the kernel kill the process during it.
#pragma once

namespace specgen {

// MemAvailable (or, where /proc/meminfo lacks it, physical memory), lowered to the room the cgroup's
// memory.max leaves; bytes.
double HostMemoryAvailable();

}  // namespace specgen
