// `specgen plan`'s host expert path (docs/design.md §12.1): --calibrate measures this machine (the
// host's expert throughput; the link's rate where a GPU is present) into the calibration file, and the
// plan says which path each missed expert's bytes take under --moe-host.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "moe/model_bytes.h"
#include "moe/planner.h"
#include "nlohmann/json.hpp"

namespace specgen::cli {

struct PlanHostFlags {
  bool calibrate = false;
  std::string calibration;  // --calibration FILE; empty: moe_host::DefaultCalibrationPath()
  std::string moe_host;     // --moe-host auto|off|only; empty: auto with a calibration, else off
  int host_threads = 0;     // --host-threads; 0: one per physical core
};

void AddPlanHostFlags(CLI::App& app, PlanHostFlags* flags);

// --calibrate: measures and writes the file (progress on stderr), prints what it measured. `model`
// (may be empty: the default shape) gives the expert shape and type.
absl::Status RunCalibrate(const PlanHostFlags& flags, const std::string& model);

// The host path of `plan`'s passes of 1..shown positions: printed as text, or returned as JSON.
absl::Status PrintHostPath(const PlanHostFlags& flags, const moe::Plan& plan, const moe::ModelBytes& target,
                           int shown);
absl::StatusOr<nlohmann::json> HostPathJson(const PlanHostFlags& flags, const moe::Plan& plan,
                                            const moe::ModelBytes& target, int shown);

}  // namespace specgen::cli
