#include "bench/runner/run_context.h"

#include <algorithm>

#include "engine/core/status_macros.h"
#include "engine/sampling/distribution.h"
#if defined(SPECGEN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace specgen::bench {
namespace {

// `value` appended to the `sep`-joined `list` unless already in it.
void AddOnce(std::vector<std::string>* seen, std::string* list, const std::string& value, const char* sep) {
  if (std::find(seen->begin(), seen->end(), value) != seen->end()) return;
  seen->push_back(value);
  *list += (list->empty() ? "" : sep) + value;
}

}  // namespace

std::string ModelLabel(const std::string& source) {
  if (source.rfind("synth:", 0) == 0) return source;
  std::string s = source;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

std::string DeviceLabel(const std::string& resolved_device) {
#if defined(SPECGEN_WITH_CUDA)
  if (resolved_device == "cuda") {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      return prop.name;
    }
    return "a CUDA GPU";
  }
#endif
  return resolved_device == "cpu" ? "CPU" : resolved_device;
}

RunContext DescribeRuns(const std::vector<RunSpec>& specs) {
  RunContext c;
  std::vector<std::string> devices, models, samplings;
  for (const RunSpec& spec : specs) {
    const Pairing& p = *spec.pairing;
    AddOnce(&devices, &c.device, DeviceLabel(spec.backend.device), ", ");
    const bool drafted = !p.draft.empty();
    AddOnce(&models, &c.models,
            drafted ? Cat(ModelLabel(p.target), " + ", ModelLabel(p.draft)) : Cat(ModelLabel(p.target), " alone"), ", ");
    // The acceptance rule matters only where a draft is verified; greedy accepts the same either way.
    const std::string sampling = ToString(p.sampling);
    AddOnce(&samplings, &c.sampling,
            drafted && !p.sampling.greedy() ? Cat(sampling, " (accept ", AcceptModeName(p.accept), ")") : sampling,
            "; ");
  }
  return c;
}

}  // namespace specgen::bench
