#include "engine/sampling/keyed_random.h"
#include "kernels/acceptance.cuh"
#include "kernels/device_util.cuh"
#include "kernels/sampling.cuh"

namespace specgen::kernels {
namespace {

using detail::SamplePartial;

// The winner among one row's kSampleSplits partials (ties to the lower id), computed by a whole warp;
// every lane gets it. The order is a total order, so the folding order does not matter.
__device__ int32_t WarpCombine(const SamplePartial* parts) {
  double best = 0.0;
  int32_t best_id = -1;
  for (int s = threadIdx.x & 31; s < kSampleSplits; s += 32) {
    const SamplePartial sp = parts[s];
    if (sp.id < 0) continue;
    if (best_id < 0 || sp.score > best || (sp.score == best && sp.id < best_id)) {
      best = sp.score;
      best_id = sp.id;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (oi >= 0 && (best_id < 0 || ov > best || (ov == best && oi < best_id))) {
      best = ov;
      best_id = oi;
    }
  }
  return best_id;
}

// Whether any of one row's kSampleSplits partials met a NaN or an infinity; every lane gets it.
__device__ bool WarpAnyNonFinite(const SamplePartial* parts) {
  bool bad = false;
  for (int s = threadIdx.x & 31; s < kSampleSplits; s += 32) bad |= parts[s].nonfinite != 0;
  return __any_sync(0xffffffffu, bad);
}

// Warp i decides row i on its own (its draw, whether draft x_i passes, the token row i would emit
// and its log-probability); then thread 0 walks the rows in order, reading only shared memory, so
// the serial part touches no global memory.
//   cand   [k+1][splits]: greedy argmax / coupled target draw / rejection residual draw (i < k)
//   fall   [k+1][splits]: rejection only: the target's own draw, used as the bonus and when the
//          residual is empty
// Launched with (k + 1) * 32 threads.
__global__ void AcceptFinishKernel(const float* __restrict__ q, const float* __restrict__ p,
                                   const int32_t* __restrict__ drafts, int k, int vocab,
                                   AcceptKernelMode mode, uint64_t seed, int64_t first_position,
                                   const SamplePartial* __restrict__ cand,
                                   const SamplePartial* __restrict__ fall,
                                   AcceptanceResult* __restrict__ result) {
  __shared__ int32_t emit_s[kAcceptMaxDraft + 1];
  __shared__ float logprob_s[kAcceptMaxDraft + 1];
  __shared__ bool accept_s[kAcceptMaxDraft + 1];
  const int i = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool rejection = mode == AcceptKernelMode::kRejection;
  if (i <= k) {
    const float* pi = p + static_cast<int64_t>(i) * vocab;
    int32_t emit;
    bool accept = false;
    if (i == k) {
      emit = WarpCombine((rejection ? fall : cand) + i * kSampleSplits);  // the bonus
    } else if (rejection) {
      const int32_t resid = WarpCombine(cand + i * kSampleSplits);
      const int32_t own = WarpCombine(fall + i * kSampleSplits);
      const int32_t x = drafts[i];
      if (x >= 0 && x < vocab) {
        const float qx = q[static_cast<int64_t>(i) * vocab + x], px = pi[x];
        if (qx > 0.f) {
          accept = px >= qx || KeyedUniform(seed, first_position + i,
                                            RandomPurpose::kAcceptUniform) * double(qx) <
                                   double(px);
        }
      }
      emit = accept ? x : resid;
      if (emit < 0) emit = own;
    } else {
      const int32_t t = WarpCombine(cand + i * kSampleSplits);
      const int32_t x = drafts[i];
      accept = x >= 0 && x < vocab && x == t;
      emit = t;
    }
    // A row with a NaN or an infinity decides nothing: it emits no token (-1, which the loop reports
    // as non-finite logits) even where its finite values have a winner.
    // (Under rejection, fall holds every row's draw over p and cand only rows < k, over the residual.)
    if (WarpAnyNonFinite((rejection ? fall : cand) + i * kSampleSplits)) {
      emit = -1;
      accept = false;
    }
    if (lane == 0) {
      emit_s[i] = emit;
      // Greedy emits the argmax of the one-hot p_i, whose log-probability is log 1 = 0: p is not read
      // (so it may be the raw logits, see LaunchAcceptance).
      logprob_s[i] = emit < 0 ? -INFINITY : mode == AcceptKernelMode::kGreedy ? 0.f : logf(pi[emit]);
      accept_s[i] = accept;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  AcceptanceResult r;
  r.n_accepted = 0;
  for (int j = 0; j <= kAcceptMaxDraft; ++j) {
    r.tokens[j] = -1;
    r.logprobs[j] = 0.f;
  }
  int n = 0;
  bool done = false;
  for (int j = 0; j < k && !done; ++j) {
    r.tokens[n] = emit_s[j];
    r.logprobs[n] = logprob_s[j];
    ++n;
    if (accept_s[j]) {
      ++r.n_accepted;
    } else {
      done = true;
    }
  }
  if (!done) {
    r.tokens[n] = emit_s[k];
    r.logprobs[n] = logprob_s[k];
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
  AcceptFinishKernel<<<1, (k + 1) * 32, 0, stream>>>(q, p, drafts, k, vocab, mode, seed, first_position, cand,
                                           fall, result);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
