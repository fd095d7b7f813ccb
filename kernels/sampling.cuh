// Sampling on the GPU over the full vocabulary, never copying logits to the host: logits → the
// processed distribution (temperature, top-k, top-p, min-p, renormalized; sorting-free, by radix
// select over the probability bits), and draws from it by keyed Gumbel-max with Philox keyed by
// (seed, absolute position, purpose) exactly as engine/sampling/keyed_random.h, so GPU and CPU draws
// agree token for token up to numeric ties.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace specgen::kernels {

// Mirrors specgen::SamplingParams (engine/sampling/sampling_params.h) without depending on it.
struct SamplingConfig {
  float temperature = 1.0f;  // <= 0: greedy (one-hot at the argmax, ties to the lowest id)
  int32_t top_k = 0;         // 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
};

// probs[r, :] = the processed distribution of logits[r, :], the same as the CPU reference
// specgen::ProcessLogits: w = exp((logit - max) / T); keep the top_k largest (ties: lower id), then
// the smallest most-probable prefix whose mass reaches top_p of the kept mass (ties: lower id first),
// then ids with w >= min_p * max w; renormalize in double. Exponentials are fp32 (the reference uses
// double), so probabilities agree to a few fp32 ulps and kept sets agree except at exact-tie margins.
//   logits  [rows, vocab] fp32, device
//   probs   [rows, vocab] fp32, device (must not alias logits)
// On sm_90+ each row runs on a cluster of 8 blocks (its chunk of the row in shared memory, logits read
// once, one kernel); elsewhere, or when a row's chunk exceeds shared memory, one 1024-thread block
// per row. Both give the same kept sets; a row's result never depends on `rows`.
cudaError_t LaunchProcessLogits(const float* logits, int rows, int vocab, SamplingConfig config,
                                float* probs, cudaStream_t stream);

// The same processing spread over one block per 2048 ids of a row (the split paths), for the common
// configs:
// - top-k first (sampling_topk.cu; ProcessTopKApplies): temperature > 0 and a top-k of up to 64 ids
//   with at most kTopKMaxCandidates candidates (every top-k up to 64 at a 151936-token vocabulary), with or without
//   top-p / min-p: each slice keeps its own top-k (a radix select) and one block per row finishes
//   over those candidates;
// - temperature only (sampling_plain.cu; ProcessPlainApplies): temperature > 0, no top-k (0 or >=
//   vocab), no top-p, min-p or not: the max, the kept sum and the normalization, a kernel each.
// The same kept sets as LaunchProcessLogits; the kept weights are summed in another fixed order, so a
// probability may differ from it by one fp32 ulp. A row's result never depends on `rows`. Where
// neither applies this is LaunchProcessLogits (the workspace is then not used).
//   workspace  ProcessSplitWorkspaceBytes(rows, vocab) bytes of device scratch, 16-byte aligned
// Slices (vocab / 2048, rounded up) x top_k, at most: 75 x 64 (a 151936-token vocabulary, Qwen's, at
// the largest top-k), the select kernel's keys then 38 KB of its shared memory.
inline constexpr int kTopKMaxCandidates = 4800;
bool ProcessTopKApplies(int vocab, SamplingConfig config);
bool ProcessPlainApplies(int vocab, SamplingConfig config);
size_t ProcessSplitWorkspaceBytes(int rows, int vocab);
cudaError_t LaunchProcessLogitsSplit(const float* logits, int rows, int vocab, SamplingConfig config,
                                     float* probs, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Splits of one row's vocabulary in the parallel Gumbel-max / argmax (fixed, so results never depend
// on the launch shape).
inline constexpr int kSampleSplits = 64;

// Bytes of device scratch LaunchSampleTokens needs for `rows` rows.
size_t SampleWorkspaceBytes(int rows);

// tokens[r] = a draw from the distribution proportional to weights[r, :] (>= 0, need not be
// normalized): argmax over ids with weight > 0 of log(weight) + Gumbel(seed, first_position + r,
// purpose, id), ties to the lower id, -1 if all weights are 0 (= specgen::SampleGumbelMax).
// greedy: tokens[r] = argmax of weights[r, :] (ties to the lowest id), no randomness; here the weights
// may be any floats (raw logits too: the argmax of the logits is that of their one-hot processing).
//   purpose  a specgen::RandomPurpose value (kTargetSample = 1, kDraftSample = 2, ...)
//   tokens   [rows] int32, device
cudaError_t LaunchSampleTokens(const float* weights, int rows, int vocab, bool greedy,
                               uint64_t seed, int64_t first_position, uint32_t purpose,
                               int32_t* tokens, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

// LaunchProcessLogitsSplit then LaunchSampleTokens (greedy when temperature <= 0), the draft's per-token
// step: where a split path applies the draw is made inside it (the same token: the same scores over
// the same probabilities), else by the two calls.
size_t ProcessAndSampleWorkspaceBytes(int rows, int vocab);
cudaError_t LaunchProcessAndSample(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                                   uint64_t seed, int64_t first_position, uint32_t purpose, int32_t* tokens,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream);

namespace detail {
// The temperature-only split path alone (LaunchProcessLogitsSplit and LaunchProcessAndSample take it
// where ProcessPlainApplies): probs as LaunchProcessLogits, and with tokens set the keyed draw of
// LaunchSampleTokens over them. cudaErrorInvalidValue where it does not apply.
size_t ProcessPlainWorkspaceBytes(int rows, int vocab);
cudaError_t LaunchProcessPlain(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                               int32_t* tokens, uint64_t seed, int64_t first_position, uint32_t purpose,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream);
// A partial winner of one split: the exact (double) score and its id; id -1 = none. nonfinite: the
// split's weights held a NaN or an infinity (LaunchSamplePartials sets it; the acceptance refuses such
// a row rather than emit the best of its finite values; other paths leave it 0).
struct SamplePartial {
  double score;
  int32_t id;
  int32_t nonfinite;
};
// The one-block-per-row path of LaunchProcessLogits, callable directly (tests compare both paths).
cudaError_t LaunchProcessLogitsOneBlock(const float* logits, int rows, int vocab,
                                        SamplingConfig config, float* probs, cudaStream_t stream);
// Whether LaunchProcessLogits takes the cluster path for this vocabulary on the current device.
bool ProcessLogitsUsesClusters(int vocab);
enum class WeightKind : uint8_t { kArgmax = 0, kGumbel = 1, kGumbelResidual = 2 };
// Partial winners over kSampleSplits splits of each row: partials[r * kSampleSplits + s].
// kGumbelResidual uses weights max(0, p[r] - q[r]) (q must be non-null).
cudaError_t LaunchSamplePartials(const float* p, const float* q, int rows, int vocab,
                                 WeightKind kind, uint64_t seed, int64_t first_position,
                                 uint32_t purpose, SamplePartial* partials, cudaStream_t stream);
}  // namespace detail

}  // namespace specgen::kernels
