#include "engine/sampling/keyed_random.h"
#include "kernels/acceptance.cuh"
#include "kernels/device_util.cuh"
#include "kernels/sampling.cuh"

namespace specgen::kernels {
namespace {

using detail::SamplePartial;

__device__ int32_t Combine(const SamplePartial* parts) {
  double best = 0.0;
  int32_t best_id = -1;
  for (int s = 0; s < kSampleSplits; ++s) {
    const SamplePartial& sp = parts[s];
    if (sp.id < 0) continue;
    if (best_id < 0 || sp.score > best || (sp.score == best && sp.id < best_id)) {
      best = sp.score;
      best_id = sp.id;
    }
  }
  return best_id;
}

// One thread: walk the drafts in order (the work per row was done in parallel by the partials).
//   cand   [k+1][splits]: greedy argmax / coupled target draw / rejection residual draw (i < k) and
//          bonus draw (i = k)
//   fall   [k+1][splits]: rejection only: the target's own draw, used as the bonus and when the
//          residual is empty
__global__ void AcceptFinishKernel(const float* __restrict__ q, const float* __restrict__ p,
                                   const int32_t* __restrict__ drafts, int k, int vocab,
                                   AcceptKernelMode mode, uint64_t seed, int64_t first_position,
                                   const SamplePartial* __restrict__ cand,
                                   const SamplePartial* __restrict__ fall,
                                   AcceptanceResult* __restrict__ result) {
  if (threadIdx.x != 0) return;
  AcceptanceResult r;
  r.n_accepted = 0;
  for (int i = 0; i <= kAcceptMaxDraft; ++i) {
    r.tokens[i] = -1;
    r.logprobs[i] = 0.f;
  }
  int n = 0;
  bool done = false;
  for (int i = 0; i < k && !done; ++i) {
    const int64_t pos = first_position + i;
    const int32_t x = drafts[i];
    const float* pi = p + static_cast<int64_t>(i) * vocab;
    const bool valid = x >= 0 && x < vocab;
    int32_t emit;
    bool accept;
    if (mode == AcceptKernelMode::kRejection) {
      const float* qi = q + static_cast<int64_t>(i) * vocab;
      accept = false;
      if (valid && qi[x] > 0.f) {
        accept = pi[x] >= qi[x] ||
                 KeyedUniform(seed, pos, RandomPurpose::kAcceptUniform) * double(qi[x]) < double(pi[x]);
      }
      emit = accept ? x : Combine(cand + i * kSampleSplits);
      if (emit < 0) emit = Combine(fall + i * kSampleSplits);
    } else {
      const int32_t t = Combine(cand + i * kSampleSplits);
      accept = valid && x == t;
      emit = t;
    }
    r.tokens[n] = emit;
    r.logprobs[n] = emit >= 0 ? logf(pi[emit]) : -INFINITY;
    ++n;
    if (accept) {
      ++r.n_accepted;
    } else {
      done = true;
    }
  }
  if (!done) {
    const float* pk = p + static_cast<int64_t>(k) * vocab;
    const int32_t t = Combine((mode == AcceptKernelMode::kRejection ? fall : cand) + k * kSampleSplits);
    r.tokens[n] = t;
    r.logprobs[n] = t >= 0 ? logf(pk[t]) : -INFINITY;
    ++n;
  }
  r.n_tokens = n;
  *result = r;
}

}  // namespace

size_t AcceptanceWorkspaceBytes(int k) {
  return 2 * static_cast<size_t>(k + 1) * kSampleSplits * sizeof(SamplePartial);
}

cudaError_t LaunchAcceptance(const float* q, const float* p, const int32_t* drafts, int k,
                             int vocab, AcceptKernelMode mode, uint64_t seed,
                             int64_t first_position, AcceptanceResult* result, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(k >= 0 && k <= kAcceptMaxDraft && vocab > 0);
  SPECGEN_KERNEL_REQUIRE(p && result && workspace && (k == 0 || drafts));
  SPECGEN_KERNEL_REQUIRE(mode != AcceptKernelMode::kRejection || k == 0 || q);
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >= AcceptanceWorkspaceBytes(k));
  auto* cand = static_cast<SamplePartial*>(workspace);
  SamplePartial* fall = cand + (k + 1) * kSampleSplits;
  const auto target = static_cast<uint32_t>(RandomPurpose::kTargetSample);
  cudaError_t err = cudaSuccess;
  switch (mode) {
    case AcceptKernelMode::kGreedy:
      err = detail::LaunchSamplePartials(p, nullptr, k + 1, vocab, detail::WeightKind::kArgmax, seed,
                                         first_position, target, cand, stream);
      break;
    case AcceptKernelMode::kCoupled:
      err = detail::LaunchSamplePartials(p, nullptr, k + 1, vocab, detail::WeightKind::kGumbel, seed,
                                         first_position, target, cand, stream);
      break;
    case AcceptKernelMode::kRejection:
      err = detail::LaunchSamplePartials(p, q, k, vocab, detail::WeightKind::kGumbelResidual, seed,
                                         first_position,
                                         static_cast<uint32_t>(RandomPurpose::kResidual), cand,
                                         stream);
      if (err == cudaSuccess) {
        err = detail::LaunchSamplePartials(p, nullptr, k + 1, vocab, detail::WeightKind::kGumbel,
                                           seed, first_position, target, fall, stream);
      }
      break;
  }
  if (err != cudaSuccess) return err;
  AcceptFinishKernel<<<1, 32, 0, stream>>>(q, p, drafts, k, vocab, mode, seed, first_position, cand,
                                           fall, result);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
