#include "kernels/scripted_draft.cuh"

#include "bench/acceptance/scripted_draft.h"

namespace specgen::kernels {
namespace {

// One thread a token: at most a step's drafts.
__global__ void ScriptedDraftKernel(ScriptedDraftTable table, const int32_t* base, int64_t offset, int depth0,
                                    int n, int32_t* tokens) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const int64_t pos = (base != nullptr ? int64_t{*base} : 0) + offset + t;
  const int64_t i = pos - table.first_position;
  if (i < 0 || i >= table.length) return;
  const int depth = depth0 + t;
  const double a = table.profile[depth < table.profile_len ? depth : table.profile_len - 1];
  tokens[t] = bench::ScriptedDraftToken(table.seed, pos, depth, a, table.continuation[i], table.vocab);
}

}  // namespace

cudaError_t LaunchScriptedDraft(const ScriptedDraftTable& table, const int32_t* base, int64_t offset, int depth0,
                                int n, int32_t* tokens, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (table.continuation == nullptr || table.length < 0 || table.profile == nullptr || table.profile_len <= 0 ||
      table.vocab <= 0 || tokens == nullptr || depth0 < 0) {
    return cudaErrorInvalidValue;
  }
  constexpr int kThreads = 32;
  ScriptedDraftKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(table, base, offset, depth0, n,
                                                                                   tokens);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
