// What specgen_bench writes into its results' context (Google Benchmark's "context" object:
// specgen_device, specgen_models, specgen_sampling) so that `specgen report` can name, in its chart's
// heading, the device, the models and the sampling that the figures were measured with.
#pragma once

#include <string>
#include <vector>

#include "bench/runner/pairing_run.h"

namespace specgen::bench {

struct RunContext {
  std::string device;    // "NVIDIA H200", "CPU", or both ("NVIDIA H200, CPU") in config order
  std::string models;    // "tiny-target + tiny-draft, tiny-target alone": each pair once
  std::string sampling;  // "greedy; temp=0.8 ... (accept rejection)": each setting once
};

// A model as a reader knows it: a file's or folder's name without its directories, a synth preset
// as written.
std::string ModelLabel(const std::string& source);

// The GPU's name for "cuda" (the CUDA device the backend opens), "CPU" for "cpu".
std::string DeviceLabel(const std::string& resolved_device);

RunContext DescribeRuns(const std::vector<RunSpec>& specs);

}  // namespace specgen::bench
