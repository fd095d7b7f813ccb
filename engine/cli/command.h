// Subcommands of the `specgen` CLI register themselves here: each cmd_*.cc defines a Command and a
// static Registrar, so adding a subcommand touches no shared file. Sources are compiled straight into
// the executable (not a static library) so that the registrars are never dropped by the linker.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace specgen::cli {

// What `specgen --version`, `specgen version` and the stats JSON report.
inline constexpr const char* kSpecgenVersion = "0.1";

struct Command {
  std::string name;
  std::string summary;
  // Adds the subcommand's flags to `app` and returns the function to run once parsing succeeded.
  std::function<std::function<absl::Status()>(CLI::App& app)> setup;
};

std::vector<Command>& Registry();

struct Registrar {
  explicit Registrar(Command c) { Registry().push_back(std::move(c)); }
};

}  // namespace specgen::cli
