// `specgen version`: build facts (compiled backends), for bug reports.
#include <cstdio>

#include "engine/cli/command.h"

namespace specgen::cli {
namespace {

Registrar kVersion{{"version", "Print the version and the backends compiled in", [](CLI::App&) {
                      return []() -> absl::Status {
#ifdef SPECGEN_WITH_CUDA
                        std::printf("specgen %s (backends: cpu, cuda)\n", kSpecgenVersion);
#else
                        std::printf("specgen %s (backends: cpu)\n", kSpecgenVersion);
#endif
                        return absl::OkStatus();
                      };
                    }}};

}  // namespace
}  // namespace specgen::cli
