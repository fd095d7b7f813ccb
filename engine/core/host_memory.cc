#include "engine/core/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace specgen {
namespace {

// A number from a /proc or /sys file that holds "KEY value kB" lines (key given) or one number.
double ReadNumber(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    if (key.empty()) {
      double v = 0;
      return (ss >> v) ? v : 0.0;  // "max" (no limit) reads as 0
    }
    std::string k;
    double v = 0;
    if (ss >> k >> v && k == key) return v * 1024.0;  // meminfo is in kB
  }
  return 0.0;
}

}  // namespace

double HostMemoryAvailable() {
  double avail = ReadNumber("/proc/meminfo", "MemAvailable:");
  if (avail <= 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) avail = static_cast<double>(pages) * static_cast<double>(page);
  }
  const double cgroup = ReadNumber("/sys/fs/cgroup/memory.max", "");
  if (cgroup > 0) {
    const double used = ReadNumber("/sys/fs/cgroup/memory.current", "");
    const double room = std::max(0.0, cgroup - used);
    avail = avail > 0 ? std::min(avail, room) : room;
  }
  return avail;
}

}  // namespace specgen
