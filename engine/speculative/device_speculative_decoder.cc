#include "engine/speculative/device_speculative_decoder.h"

#include <algorithm>
#include <chrono>

#include "engine/core/status_macros.h"
#include "kernels/acceptance.cuh"
#include "kernels/cuda_check.h"
#include "kernels/sampling.cuh"

namespace specgen {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DeviceSpeculativeDecoder::DeviceSpeculativeDecoder(CudaBackend* backend, Transformer* target, Transformer* draft,
                                                   SpeculativeOptions options)
    : SpeculativeLoop(target, std::move(options), draft != nullptr, kernels::kAcceptMaxDraft),
      backend_(backend),
      target_lm_(target),
      draft_(draft) {}

DeviceSpeculativeDecoder::~DeviceSpeculativeDecoder() {
  proposer_.reset();  // its side stream first: a failed step may have left a decode reading batch_
  target_pass_.reset();
  (void)backend_->Synchronize(SyncKind::kOther);
  DeviceArena& a = backend_->arena();
  for (void* p : {static_cast<void*>(batch_), static_cast<void*>(p_), result_, accept_ws_, sample_ws_}) a.Free(p);
  if (host_result_ != nullptr) cudaFreeHost(host_result_);
  if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
}

absl::StatusOr<std::unique_ptr<DeviceSpeculativeDecoder>> DeviceSpeculativeDecoder::Create(
    CudaBackend* backend, Transformer* target, Transformer* draft, SpeculativeOptions options,
    const DeviceLoopHooks& hooks) {
  if (backend == nullptr || target == nullptr) return InvalidArgument("device decoder: no backend/target");
  if (&target->backend() != backend || (draft != nullptr && &draft->backend() != backend)) {
    return InvalidArgument("device decoder: target and draft must run on the given CUDA backend");
  }
  if (draft != nullptr && draft->vocab_size() != target->vocab_size()) {
    return InvalidArgument("device decoder: draft vocabulary ", draft->vocab_size(), " != target's ",
                           target->vocab_size());
  }
  std::unique_ptr<DeviceSpeculativeDecoder> d(new DeviceSpeculativeDecoder(backend, target, draft, std::move(options)));
  RETURN_IF_ERROR(d->Allocate());
  const int draft_max = d->options_.draft_max;
  ASSIGN_OR_RETURN(d->target_pass_, GraphedTargetPass::Create(backend, target, d->batch_, draft_max + 1, hooks.graph_verify));
  if (draft != nullptr && draft_max > 0) {
    ASSIGN_OR_RETURN(d->proposer_, DeviceProposer::Create(backend, draft, d->options_.sampling, d->options_.accept,
                                                          d->batch_, draft_max, hooks.draft));
  }
  return d;
}

absl::Status DeviceSpeculativeDecoder::Allocate() {
  DeviceArena& a = backend_->arena();
  const size_t v = static_cast<size_t>(target_lm_->vocab_size());
  constexpr int kMax = kernels::kAcceptMaxDraft;
  ASSIGN_OR_RETURN(void* b, a.Allocate((kMax + 1) * sizeof(int32_t), "speculative step tokens"));
  batch_ = static_cast<int32_t*>(b);
  ASSIGN_OR_RETURN(void* p, a.Allocate((kMax + 1) * v * sizeof(float), "target distributions p"));
  p_ = static_cast<float*>(p);
  ASSIGN_OR_RETURN(result_, a.Allocate(sizeof(kernels::AcceptanceResult), "step result"));
  accept_ws_bytes_ = std::max<size_t>(kernels::AcceptanceWorkspaceBytes(kMax), 256);
  ASSIGN_OR_RETURN(accept_ws_, a.Allocate(accept_ws_bytes_, "acceptance workspace"));
  sample_ws_bytes_ = std::max(kernels::ProcessSplitWorkspaceBytes(kMax + 1, static_cast<int>(v)), size_t{256});
  ASSIGN_OR_RETURN(sample_ws_, a.Allocate(sample_ws_bytes_, "sampling workspace"));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host_result_, sizeof(kernels::AcceptanceResult), cudaHostAllocDefault));
  if (options_.on_logprobs) {
    // --n-probs: the pass's logits rows come back with the step's result (one wait still), pinned.
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&host_logits_), (kMax + 1) * v * sizeof(float),
                                               cudaHostAllocDefault));
  }
  return absl::OkStatus();
}

DraftDecodeStats DeviceSpeculativeDecoder::draft_decode_stats() const {
  if (proposer_ != nullptr) return proposer_->stats();
  DraftDecodeStats s;
  if (draft_ != nullptr) s.why_not_graph = "no draft length";
  return s;
}

VerifyPassStats DeviceSpeculativeDecoder::verify_pass_stats() const {
  VerifyPassStats s;
  s.graph_replays = target_pass_->replays();
  s.captures = target_pass_->captures();
  s.eager_passes = target_pass_->eager_passes();
  s.why_not_graph = target_pass_->fallback_reason();
  return s;
}

absl::Status DeviceSpeculativeDecoder::BeginGeneration() {
  syncs_ = StepSyncStats();
  return proposer_ != nullptr ? proposer_->Reset() : absl::OkStatus();
}

absl::Status DeviceSpeculativeDecoder::FeedTarget(std::span<const int32_t> chunk) {
  return target_lm_->ForwardResident(chunk, LogitRows::kNone).status();
}

absl::Status DeviceSpeculativeDecoder::PrefillDraft(std::span<const int32_t> prompt) {
  return proposer_->Prefill(prompt, options_.keep_cache);
}

absl::Status DeviceSpeculativeDecoder::FinishPrefill() {
  return backend_->Synchronize(SyncKind::kOther);  // the prefill's time ends here; not a step's wait
}

int64_t DeviceSpeculativeDecoder::DraftRoom(int64_t context_len) const {
  return proposer_ != nullptr ? proposer_->MaxDraft(context_len) : 0;
}

absl::StatusOr<OffloadCounters> DeviceSpeculativeDecoder::OffloadTotals() {
  OffloadCounters c;
  if (target_lm_->streams_dense_layers()) {  // every pass copies the streamed dense layers once
    ASSIGN_OR_RETURN(const LayerStreamStats d, target_lm_->dense_stream_stats());
    c.h2d_bytes += d.copied_bytes;
  }
  if (!target_lm_->streams_experts()) return c;
  ASSIGN_OR_RETURN(const ExpertStreamStats s, target_lm_->expert_stream_stats());
  c.h2d_bytes += s.fetched_bytes + s.staged_bytes;
  c.expert_hits = s.hits;
  // An expert staged for a pass routed on the host is fetched whatever the cache holds: a miss; so is
  // one the host expert path computed instead (that path bypasses the cache).
  c.expert_misses = s.misses + s.staged + s.host_experts;
  c.distinct_experts = s.hits + s.misses + s.staged + s.host_experts;
  c.moe_layer_passes = s.layer_passes;
  c.host_experts = s.host_experts;
  c.host_seconds = s.host_seconds;
  c.host_activation_bytes = s.host_activation_bytes;
  return c;
}

absl::Status DeviceSpeculativeDecoder::EndGeneration(std::span<const int32_t> target_cached) {
  return proposer_ != nullptr ? proposer_->EndGeneration(target_cached) : absl::OkStatus();
}

absl::StatusOr<SpeculativeLoop::StepOutcome> DeviceSpeculativeDecoder::Step(const std::vector<int32_t>& sequence,
                                                                             int k, bool another_may_follow) {
  const SyncCounts before = backend_->syncs();
  const int64_t vocab = target_lm_->vocab_size();
  const int64_t len = static_cast<int64_t>(sequence.size());
  const cudaStream_t stream = backend_->stream();
  const kernels::AcceptKernelMode mode = options_.sampling.greedy()                ? kernels::AcceptKernelMode::kGreedy
                                         : options_.accept == AcceptMode::kCoupled ? kernels::AcceptKernelMode::kCoupled
                                                                                   : kernels::AcceptKernelMode::kRejection;
  StepOutcome out;

  auto t0 = std::chrono::steady_clock::now();
  // batch_[0] = the last committed token (the host knows it); batch_[1..k] = drafts (device).
  ASSIGN_OR_RETURN(void* staged, backend_->Stage(&sequence.back(), sizeof(int32_t)));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(batch_, staged, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  if (k > 0) {
    RETURN_IF_ERROR(proposer_->Propose(sequence, k));
  } else if (proposer_ != nullptr) {
    proposer_->SkipStep();
  }
  out.draft_seconds = SecondsSince(t0);

  // ONE target pass over the k + 1 positions len-1 .. len+k-1, tokens read from batch_; the draft's
  // decode of x_k beside it, and its run ahead of the next step (joined in AfterResult).
  t0 = std::chrono::steady_clock::now();
  if (k > 0) RETURN_IF_ERROR(proposer_->BesideVerification(len, k, another_may_follow));
  const int64_t captures_before = target_pass_->captures();
  ASSIGN_OR_RETURN(const Buffer* logits, target_pass_->Forward(k + 1));
  out.verify_seconds = SecondsSince(t0);

  t0 = std::chrono::steady_clock::now();
  // Greedy acceptance reads only the argmax of each row, the same over the logits as over their
  // one-hot processing: the target's k + 1 rows are not processed.
  const float* p = CudaBackend::Data(*logits);
  if (host_logits_ != nullptr) {
    // The raw logits (processing writes p_, not them), queued before the result's copy so that the
    // step's one host wait brings both.
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_logits_, p, static_cast<size_t>(k + 1) * vocab * sizeof(float),
                                                 cudaMemcpyDeviceToHost, stream));
  }
  if (mode != kernels::AcceptKernelMode::kGreedy) {
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchProcessLogitsSplit(p, k + 1, static_cast<int>(vocab),
                                                                  ToSamplingConfig(options_.sampling), p_, sample_ws_,
                                                                  sample_ws_bytes_, stream));
    p = p_;
  }
  const float* q = mode == kernels::AcceptKernelMode::kRejection && k > 0 ? proposer_->q() : nullptr;
  auto* result = static_cast<kernels::AcceptanceResult*>(result_);
  SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAcceptance(q, p, batch_ + 1, k, static_cast<int>(vocab), mode,
                                                         options_.sampling.seed, len, result, accept_ws_,
                                                         accept_ws_bytes_, stream));
  // With a guess queued the result waits for its copy too (not for the run ahead after it), so the
  // step's one host wait brings both.
  if (k > 0) RETURN_IF_ERROR(proposer_->OrderBeforeHostWait(stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_result_, result_, sizeof(kernels::AcceptanceResult), cudaMemcpyDeviceToHost, stream));
  RETURN_IF_ERROR(backend_->Synchronize(SyncKind::kStepResult));  // the step's one host wait
  const auto* host = static_cast<const kernels::AcceptanceResult*>(host_result_);
  const int n_acc = host->n_accepted;
  const int n_tokens = std::clamp(host->n_tokens, 0, kernels::kAcceptMaxDraft + 1);
  if (k > 0) RETURN_IF_ERROR(proposer_->AfterResult(len + n_acc, k, n_acc, host->tokens[std::clamp(n_acc, 0, k)]));
  out.accept_seconds = SecondsSince(t0);
  out.result.n_accepted = n_acc;
  out.result.tokens.assign(host->tokens, host->tokens + n_tokens);
  if (host_logits_ != nullptr) {
    // Row i chose tokens[i] after the accepted drafts before it: the target's own row there.
    const size_t v = static_cast<size_t>(vocab);
    for (int i = 0; i < n_tokens && i <= k; ++i) {
      out.logprobs.push_back(TopLogprobs(std::span<const float>(host_logits_ + static_cast<size_t>(i) * v, v),
                                         out.result.tokens[static_cast<size_t>(i)], options_.n_probs));
    }
  }
  // A step whose pass was captured (its warm-up pass, the capture and the instantiation) says nothing
  // about what a pass of that size costs.
  out.untimed = target_pass_->captures() != captures_before;

  const SyncCounts& after = backend_->syncs();
  ++syncs_.steps;
  syncs_.step_result += after.step_result - before.step_result;
  syncs_.expert_union += after.expert_union - before.expert_union;
  syncs_.other += after.other - before.other;
  syncs_.max_non_union_per_step = std::max(
      syncs_.max_non_union_per_step, (after.step_result - before.step_result) + (after.other - before.other));
  return out;
}

}  // namespace specgen
