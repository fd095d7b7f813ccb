// Acceptance of k drafted tokens against the target's k+1 distributions on the GPU, the twin of
// specgen::Accept (engine/sampling/acceptance.h): greedy, rejection (Leviathan/Chen min(1, p/q),
// residual norm(max(0, p - q)), bonus) and coupled (shared Gumbel noise) modes, all draws keyed by
// (seed, absolute position, purpose). The result is one small device struct, copied to the host once
// per step (docs/design.md §6.1).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace specgen::kernels {

inline constexpr int kAcceptMaxDraft = 16;

enum class AcceptKernelMode : uint8_t {
  kGreedy = 0,     // accept x_i iff x_i == argmax p_i; emit argmax at the first mismatch / bonus
  kRejection = 1,  // modified rejection sampling
  kCoupled = 2,    // accept iff x_i == argmax(log p_i + Gumbel(seed, pos_i, kTargetSample))
};

// What one verification pass produced; plain data, copied device→host as one block.
struct AcceptanceResult {
  int32_t n_accepted;                     // drafts kept, 0..k
  int32_t n_tokens;                       // n_accepted + 1 (the correction or bonus token)
  int32_t tokens[kAcceptMaxDraft + 1];    // kept drafts then the target's token; unused slots -1
  float logprobs[kAcceptMaxDraft + 1];    // log p_i(tokens[i]) under the processed target p_i
};

// Bytes of device scratch LaunchAcceptance needs for draft length k.
size_t AcceptanceWorkspaceBytes(int k);

// Decides one pass. Row i (0..k) of p is the target's processed distribution for the token at
// absolute position first_position + i; draft x_i (i < k) sits at that same position.
//   q       [k, vocab] fp32 probabilities the drafts were drawn from, device (read in kRejection
//           only; may be null otherwise)
//   p       [k+1, vocab] fp32 processed target probabilities, device; in kGreedy only their
//           argmax is used, so the raw logits may be passed instead (the same tokens; logprobs 0, the
//           log of the one-hot's 1)
//   drafts  [k] int32 draft tokens, device (an id outside [0, vocab) is rejected)
//   k       0..kAcceptMaxDraft
//   seed    the sampling seed (SamplingParams::seed)
//   result  one AcceptanceResult, device
// Random draws (engine/sampling/keyed_random.h): kAcceptUniform for the ratio test, kResidual for
// the resample, kTargetSample for the bonus, coupled mode and the resample's empty-residual fallback.
cudaError_t LaunchAcceptance(const float* q, const float* p, const int32_t* drafts, int k,
                             int vocab, AcceptKernelMode mode, uint64_t seed,
                             int64_t first_position, AcceptanceResult* result, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);

}  // namespace specgen::kernels
