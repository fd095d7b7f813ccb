#include "engine/speculative/device_speculative_decoder.h"

#include <algorithm>
#include <chrono>

#include "engine/core/status_macros.h"
#include "engine/sampling/keyed_random.h"
#include "kernels/acceptance.cuh"
#include "kernels/cuda_check.h"
#include "kernels/sampling.cuh"

namespace specgen {
namespace {

constexpr size_t kPrefillChunk = 256;
// Feeds of up to this many tokens catch the draft up through its decode graph (see Propose).
constexpr size_t kGraphedFeedMax = 4;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// kAuto run-ahead: the weight of the latest guess in the running rates of hits and late misses, and
// the drafted steps after which a guess is tried again while late misses outweigh hits.
constexpr double kRunAheadRateWeight = 0.25;
constexpr int kRunAheadProbe = 16;

// What a step brings to the host: the acceptance's result (the backend's stream copies it), then the
// draft's guess y of the bonus token (run_ahead: the side stream copies it; read only in a step that
// queued one).
struct StepResult {
  kernels::AcceptanceResult accept;
  int32_t guess;
};

kernels::SamplingConfig ToConfig(const SamplingParams& p) {
  kernels::SamplingConfig c;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  return c;
}

}  // namespace

DeviceSpeculativeDecoder::DeviceSpeculativeDecoder(CudaBackend* backend, Transformer* target,
                                                   Transformer* draft, SpeculativeOptions options)
    : backend_(backend), target_(target), draft_(draft), options_(std::move(options)) {
  if (draft_ == nullptr) options_.draft_max = 0;
  options_.draft_max = std::clamp(options_.draft_max, 0, kernels::kAcceptMaxDraft);
  if (options_.adaptive && options_.draft_max > 0) {
    controller_ = std::make_unique<DraftLengthController>(options_.draft_max);
  }
}

DeviceSpeculativeDecoder::~DeviceSpeculativeDecoder() {
  // The side stream first: a Generate that failed mid-step may have left x_k's decode reading batch_.
  if (side_stream_ != nullptr) {
    (void)cudaStreamSynchronize(side_stream_);
    cudaStreamDestroy(side_stream_);
  }
  if (backend_ != nullptr) {
    (void)backend_->Synchronize(SyncKind::kOther);
    DeviceArena& a = backend_->arena();
    for (void* p : {static_cast<void*>(batch_), static_cast<void*>(q_), static_cast<void*>(p_), result_,
                    accept_ws_, sample_ws_, side_ws_}) {
      a.Free(p);
    }
  }
  for (cudaEvent_t e : {fork_, join_, guess_ready_}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (host_result_ != nullptr) cudaFreeHost(host_result_);
}

absl::StatusOr<std::unique_ptr<DeviceSpeculativeDecoder>> DeviceSpeculativeDecoder::Create(
    CudaBackend* backend, Transformer* target, Transformer* draft, SpeculativeOptions options,
    DraftDecodePath draft_path) {
  if (backend == nullptr || target == nullptr) return InvalidArgument("device decoder: no backend/target");
  if (&target->backend() != backend || (draft != nullptr && &draft->backend() != backend)) {
    return InvalidArgument("device decoder: target and draft must run on the given CUDA backend");
  }
  if (draft != nullptr && draft->vocab_size() != target->vocab_size()) {
    return InvalidArgument("device decoder: draft vocabulary ", draft->vocab_size(), " != target's ",
                           target->vocab_size());
  }
  std::unique_ptr<DeviceSpeculativeDecoder> d(
      new DeviceSpeculativeDecoder(backend, target, draft, std::move(options)));
  RETURN_IF_ERROR(d->Allocate());
  ASSIGN_OR_RETURN(d->target_pass_, GraphedTargetPass::Create(backend, target, d->batch_, d->options_.draft_max + 1,
                                                              d->options_.graph_verify));
  if (draft != nullptr && d->options_.draft_max > 0) {
    d->why_not_graph_ = draft_path == DraftDecodePath::kTransformer ? "not asked for"
                                                                    : GraphedDraft::Unsupported(*draft);
    if (d->why_not_graph_.empty()) {
      ASSIGN_OR_RETURN(d->graphed_, GraphedDraft::Create(backend, draft, draft_path));
      if (draft_path == DraftDecodePath::kFused) d->why_not_graph_ = "not asked for";
    }
  }
  return d;
}

DraftDecodeStats DeviceSpeculativeDecoder::draft_decode_stats() const {
  DraftDecodeStats s;
  s.transformer_passes = transformer_passes_;
  s.overlapped = overlapped_;
  s.run_ahead = run_ahead_;
  s.run_ahead_used = run_ahead_used_;
  s.run_ahead_late = run_ahead_late_;
  s.why_not_graph = why_not_graph_;
  if (graphed_ != nullptr) {
    s.path = graphed_->path();
    s.graph_replays = graphed_->graph_replays();
    s.fused_steps = graphed_->eager_steps();
    if (!graphed_->fallback_reason().empty()) s.why_not_graph = graphed_->fallback_reason();
  }
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

absl::StatusOr<const float*> DeviceSpeculativeDecoder::DecodeOne(const int32_t* device_token,
                                                                  int32_t host_token) {
  if (graphed_ != nullptr) return graphed_->Decode(device_token, host_token);
  if (device_token != nullptr) backend_->UseDeviceTokensOnce(device_token);
  ++transformer_passes_;
  ASSIGN_OR_RETURN(const Buffer* logits, draft_->ForwardResident({&host_token, 1}));
  return CudaBackend::Data(*logits);
}

absl::Status DeviceSpeculativeDecoder::Allocate() {
  DeviceArena& a = backend_->arena();
  const size_t v = static_cast<size_t>(target_->vocab_size());
  constexpr int kMax = kernels::kAcceptMaxDraft;
  ASSIGN_OR_RETURN(void* b, a.Allocate((kMax + 1) * sizeof(int32_t), "speculative step tokens"));
  batch_ = static_cast<int32_t*>(b);
  ASSIGN_OR_RETURN(void* q, a.Allocate(kMax * v * sizeof(float), "draft distributions q"));
  q_ = static_cast<float*>(q);
  ASSIGN_OR_RETURN(void* p, a.Allocate((kMax + 1) * v * sizeof(float), "target distributions p"));
  p_ = static_cast<float*>(p);
  ASSIGN_OR_RETURN(result_, a.Allocate(sizeof(StepResult), "step result"));
  accept_ws_bytes_ = std::max<size_t>(kernels::AcceptanceWorkspaceBytes(kMax), 256);
  ASSIGN_OR_RETURN(accept_ws_, a.Allocate(accept_ws_bytes_, "acceptance workspace"));
  // Shared by the processing of up to kMax + 1 rows and the draft's draw: they run one after the
  // other on the one stream.
  sample_ws_bytes_ = std::max({kernels::ProcessAndSampleWorkspaceBytes(1, static_cast<int>(v)),
                               kernels::ProcessSplitWorkspaceBytes(kMax + 1, static_cast<int>(v)), size_t{256}});
  ASSIGN_OR_RETURN(sample_ws_, a.Allocate(sample_ws_bytes_, "sampling workspace"));
  SPECGEN_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&host_result_, sizeof(StepResult), cudaHostAllocDefault));
  if (draft_ != nullptr && options_.draft_max > 0 && options_.overlap_last_draft) {
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    if (options_.run_ahead != RunAhead::kOff) {
      SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&guess_ready_, cudaEventDisableTiming));
      side_ws_bytes_ = std::max<size_t>(kernels::SampleWorkspaceBytes(1), 256);
      ASSIGN_OR_RETURN(side_ws_, a.Allocate(side_ws_bytes_, "run-ahead sampling workspace"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DeviceSpeculativeDecoder::OverlapLastDraft(int k, bool guess) {
  if (side_stream_ == nullptr || graphed_ == nullptr || !graphed_->ReplaysCaptured()) return false;
  const cudaStream_t stream = backend_->stream();
  // After x_k's draw (the fork), beside the target's pass queued next on the backend's stream. The
  // draft's graph reads batch_[k] and writes only the draft's own buffers and its cache row for x_k;
  // the step's acceptance reads q_ (written before the fork), never the draft's logits.
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_, stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side_stream_, fork_, 0));
  ASSIGN_OR_RETURN(const float* logits, graphed_->Decode(batch_ + k, 0, side_stream_));
  ++overlapped_;
  // run_ahead: the draft's argmax after x_k (its likeliest bonus token; any guess is exact, a likely one
  // is used more often), copied to the host at once (guess_ready_, which the step's result copy waits
  // for), then its decode. The argmax has its own workspace: the acceptance's kernels use sample_ws_
  // on the backend's stream meanwhile.
  if (guess && side_ws_ != nullptr && graphed_->ReplaysCaptured()) {
    int32_t* y = &static_cast<StepResult*>(result_)->guess;
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchSampleTokens(logits, 1, static_cast<int>(draft_->vocab_size()),
                                                             true, 0, 0, 0, y, side_ws_, side_ws_bytes_,
                                                             side_stream_));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&static_cast<StepResult*>(host_result_)->guess, y,
                                                 sizeof(int32_t), cudaMemcpyDeviceToHost, side_stream_));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(guess_ready_, side_stream_));
    ASSIGN_OR_RETURN(guess_logits_, graphed_->Decode(y, 0, side_stream_));
    ++run_ahead_;
  }
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(join_, side_stream_));
  join_due_ = true;
  return true;
}

bool DeviceSpeculativeDecoder::WantGuess() {
  switch (options_.run_ahead) {
    case RunAhead::kOff:
      return false;
    case RunAhead::kAlways:
      return true;
    case RunAhead::kAuto:
      break;
  }
  // A hit saves the next step a decode; a late miss costs it what the guess's decode has left when the
  // verification ends (up to a decode); an early miss costs only the multiprocessors it shared.
  return hit_rate_ >= late_miss_rate_ || ++steps_without_guess_ >= kRunAheadProbe;
}

void DeviceSpeculativeDecoder::ObserveGuess(bool hit, bool late) {
  steps_without_guess_ = 0;
  const bool late_miss = !hit && late;
  if (late_miss) ++run_ahead_late_;
  hit_rate_ += kRunAheadRateWeight * ((hit ? 1.0 : 0.0) - hit_rate_);
  late_miss_rate_ += kRunAheadRateWeight * ((late_miss ? 1.0 : 0.0) - late_miss_rate_);
}

absl::Status DeviceSpeculativeDecoder::JoinLastDraft() {
  if (!join_due_) return absl::OkStatus();
  join_due_ = false;
  return SPECGEN_CUDA_STATUS(cudaStreamWaitEvent(backend_->stream(), join_, 0));
}

absl::Status DeviceSpeculativeDecoder::Prefill(std::span<const int32_t> prompt) {
  // As SpeculativeDecoder: both models cache all but the last prompt token, and with keep_cache a
  // cache that already holds a prefix of them (the previous turn of a chat) is fed only the rest.
  // Logits stay unread.
  const auto head = prompt.first(prompt.size() - 1);
  for (Transformer* lm : {target_, draft_}) {
    if (lm == nullptr) continue;
    std::vector<int32_t>& cached = lm == target_ ? target_cached_ : draft_cached_;
    size_t common = 0;
    if (options_.keep_cache && static_cast<int64_t>(cached.size()) == lm->n_past()) {
      while (common < cached.size() && common < head.size() && cached[common] == head[common]) ++common;
    }
    cached.clear();  // set again once this Generate has finished
    if (lm->n_past() > static_cast<int64_t>(common)) RETURN_IF_ERROR(lm->Truncate(static_cast<int64_t>(common)));
    for (size_t begin = common; begin < head.size(); begin += kPrefillChunk) {
      // At positions begin .. (the cache holds the prompt's first `begin` tokens).
      const auto chunk = head.subspan(begin, std::min(kPrefillChunk, head.size() - begin));
      RETURN_IF_ERROR(lm->ForwardResident(chunk).status());
    }
    if (lm == target_) last_prefill_fed_ = static_cast<int64_t>(head.size() - common);
  }
  draft_valid_ = draft_ != nullptr ? static_cast<int64_t>(head.size()) : 0;
  return absl::OkStatus();
}

int DeviceSpeculativeDecoder::ChooseDraftLength(int64_t context_len, int64_t remaining) {
  int64_t k = controller_ ? controller_->Choose() : options_.draft_max;
  k = std::min<int64_t>(k, remaining - 1);
  k = std::min<int64_t>(k, target_->max_context() - context_len - 1);
  if (draft_ != nullptr && k > 0) k = std::min<int64_t>(k, draft_->max_context() - context_len + 1);
  return static_cast<int>(std::max<int64_t>(k, 0));
}

absl::Status DeviceSpeculativeDecoder::Feed(const std::vector<int32_t>& sequence, const float** last) {
  const int64_t len = static_cast<int64_t>(sequence.size());
  // What the draft lacks of the committed sequence (its last token at least; known on the host).
  draft_valid_ = std::min(draft_valid_, len - 1);
  if (draft_->n_past() > draft_valid_) RETURN_IF_ERROR(draft_->Truncate(draft_valid_));
  std::vector<int32_t> feed(sequence.begin() + draft_valid_, sequence.end());
  // A short feed (after a step that accepted every draft: the target's bonus token, and x_k where it
  // was not decoded beside the verification) goes through the decode graph a token at a time: on the
  // H200 two replays of synth:qwen3-0.6b cost ~1.2 ms, one two-token pass through the Backend ops
  // (launched op by op) ~2.5 ms. The draft's numerics do not bear on the output (acceptance corrects
  // for q), so either path is exact.
  if (feed.size() == 1 || (graphed_ != nullptr && feed.size() <= kGraphedFeedMax)) {
    for (const int32_t token : feed) {
      ASSIGN_OR_RETURN(*last, DecodeOne(nullptr, token));
    }
    return absl::OkStatus();
  }
  std::vector<int32_t> positions(feed.size());
  for (size_t i = 0; i < feed.size(); ++i) positions[i] = static_cast<int32_t>(draft_valid_ + i);
  ++transformer_passes_;
  ASSIGN_OR_RETURN(const Buffer* logits, draft_->ForwardResident(feed, positions, {}));
  *last = CudaBackend::Data(*logits) + (logits->rows() - 1) * logits->cols();
  return absl::OkStatus();
}

absl::Status DeviceSpeculativeDecoder::Propose(const std::vector<int32_t>& sequence, int k) {
  const int64_t len = static_cast<int64_t>(sequence.size());
  const int v = static_cast<int>(target_->vocab_size());
  const cudaStream_t stream = backend_->stream();
  const kernels::SamplingConfig config = ToConfig(options_.sampling);
  const bool greedy = options_.sampling.greedy();
  // Draws as SampleDraft: own noise in rejection mode, the target's in coupled mode.
  const uint32_t purpose = static_cast<uint32_t>(options_.accept == AcceptMode::kCoupled
                                                     ? RandomPurpose::kTargetSample
                                                     : RandomPurpose::kDraftSample);
  const float* last = nullptr;
  if (ready_logits_ != nullptr && draft_valid_ == len && draft_->n_past() == len) {
    // run_ahead: the last step's bonus token was the draft's guess, decoded beside the verification.
    last = ready_logits_;
    ready_logits_ = nullptr;
    ++run_ahead_used_;
  } else {
    RETURN_IF_ERROR(Feed(sequence, &last));
  }
  for (int i = 0; i < k; ++i) {
    if (i > 0) {
      // x_i (drawn on the device in the previous iteration) at position len + i - 1.
      ASSIGN_OR_RETURN(last, DecodeOne(batch_ + i, 0));
    }
    // Greedy: the draft's token is the argmax of its logits, which is the argmax of the one-hot q
    // that processing would write (the same (value, id) order, ties to the lower id), and greedy
    // acceptance never reads q (only rejection does): the draw skips the processing (22.7 -> 9.9 us a
    // token over a 151936-token vocabulary on the H200). Otherwise processing and draw are one call.
    if (greedy) {
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchSampleTokens(last, 1, v, true, options_.sampling.seed, len + i,
                                                               purpose, batch_ + 1 + i, sample_ws_, sample_ws_bytes_,
                                                               stream));
    } else {
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchProcessAndSample(
          last, 1, v, config, q_ + static_cast<size_t>(i) * v, options_.sampling.seed, len + i, purpose,
          batch_ + 1 + i, sample_ws_, sample_ws_bytes_, stream));
    }
  }
  draft_valid_ = len + k - 1;  // the draft now holds the sequence and x_1..x_{k-1}
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> DeviceSpeculativeDecoder::Generate(std::span<const int32_t> prompt,
                                                                        const TokenSink& sink) {
  stats_ = SpeculativeStats();
  syncs_ = StepSyncStats();
  const int64_t vocab = target_->vocab_size();
  RETURN_IF_ERROR(ValidateGeneration(prompt, *target_, options_));
  stats_.prompt_tokens = static_cast<int64_t>(prompt.size());
  stats_.draft_max = options_.draft_max;
  stats_.adaptive = controller_ != nullptr;
  const cudaStream_t stream = backend_->stream();
  const kernels::AcceptKernelMode mode =
      options_.sampling.greedy() ? kernels::AcceptKernelMode::kGreedy
      : options_.accept == AcceptMode::kCoupled ? kernels::AcceptKernelMode::kCoupled
                                                : kernels::AcceptKernelMode::kRejection;

  RETURN_IF_ERROR(JoinLastDraft());  // a call that failed mid-step: x_k's decode before the prefill
  guess_logits_ = ready_logits_ = nullptr;
  auto t_prefill = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Prefill(prompt));
  RETURN_IF_ERROR(backend_->Synchronize(SyncKind::kOther));  // prefill timing ends here, not counted
  stats_.prefill_seconds = SecondsSince(t_prefill);

  const auto t_start = std::chrono::steady_clock::now();
  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  // What the target's cache holds: the sequence but its last token, then per pass the accepted drafts
  // (which an end token may cut from `sequence`).
  std::vector<int32_t> held(prompt.begin(), prompt.end() - 1);
  const auto* step_result = static_cast<const StepResult*>(host_result_);
  const kernels::AcceptanceResult* host = &step_result->accept;
  bool ended = false;
  int previous_k = -1;  // the draft holds the prompt: the first step has nothing to catch up
  while (!ended && static_cast<int64_t>(generated.size()) < options_.max_new_tokens &&
         static_cast<int64_t>(sequence.size()) < target_->max_context()) {
    const SyncCounts before = backend_->syncs();
    const int64_t len = static_cast<int64_t>(sequence.size());
    const int k = ChooseDraftLength(len, options_.max_new_tokens - static_cast<int64_t>(generated.size()));

    auto t0 = std::chrono::steady_clock::now();
    // batch_[0] = the last committed token (the host knows it); batch_[1..k] = drafts (device).
    ASSIGN_OR_RETURN(void* staged, backend_->Stage(&sequence.back(), sizeof(int32_t)));
    SPECGEN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(batch_, staged, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
    if (k > 0) {
      RETURN_IF_ERROR(Propose(sequence, k));
    } else {
      ready_logits_ = nullptr;  // a step without the draft: its logits after a guess go stale
    }
    const double t_draft = SecondsSince(t0);

    // ONE target pass over the k + 1 positions len-1 .. len+k-1, tokens read from batch_; with
    // overlap_last_draft, the draft's decode of x_k beside it (the draft then holds x_1..x_k).
    t0 = std::chrono::steady_clock::now();
    if (k > 0) {
      // A guess of the bonus token pays only where another step follows: room for more tokens and
      // context after this step's k + 1.
      const bool next_step = static_cast<int64_t>(generated.size()) + k + 1 < options_.max_new_tokens &&
                             len + k + 1 < target_->max_context();
      ASSIGN_OR_RETURN(const bool overlapped, OverlapLastDraft(k, next_step && WantGuess()));
      if (overlapped) draft_valid_ = len + k;  // the guess counts once the step finds it was the bonus
    }
    if (target_->n_past() != len - 1) {
      return absl::InternalError(Cat("target holds ", target_->n_past(), " positions of ", len, " tokens before a step"));
    }
    const int64_t captures_before = target_pass_->captures();
    ASSIGN_OR_RETURN(const Buffer* logits, target_pass_->Forward(k + 1));
    const double t_verify = SecondsSince(t0);

    t0 = std::chrono::steady_clock::now();
    // Greedy acceptance reads only the argmax of each row, the same over the logits as over their
    // one-hot processing: the target's k + 1 rows are not processed.
    const float* p = CudaBackend::Data(*logits);
    if (mode != kernels::AcceptKernelMode::kGreedy) {
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchProcessLogitsSplit(p, k + 1, static_cast<int>(vocab),
                                                                    ToConfig(options_.sampling), p_, sample_ws_,
                                                                    sample_ws_bytes_, stream));
      p = p_;
    }
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAcceptance(
        mode == kernels::AcceptKernelMode::kRejection ? q_ : nullptr, p, batch_ + 1, k,
        static_cast<int>(vocab), mode, options_.sampling.seed, len,
        static_cast<kernels::AcceptanceResult*>(result_), accept_ws_, accept_ws_bytes_, stream));
    // With a guess queued the result waits for its copy too (x_k's decode and an argmax: it ends before
    // the verification on the pairs measured), so the step's one host wait brings both.
    const bool guessed = guess_logits_ != nullptr;
    if (guessed) SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, guess_ready_, 0));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_result_, result_, sizeof(kernels::AcceptanceResult),
                                                 cudaMemcpyDeviceToHost, stream));
    RETURN_IF_ERROR(backend_->Synchronize(SyncKind::kStepResult));  // the step's one host wait
    // Whether the side stream is still at work (the guess's decode): a query, not a wait.
    const cudaError_t side_state = guessed ? cudaEventQuery(join_) : cudaSuccess;
    if (side_state != cudaSuccess && side_state != cudaErrorNotReady) return SPECGEN_CUDA_STATUS(side_state);
    RETURN_IF_ERROR(JoinLastDraft());
    const double t_accept = SecondsSince(t0);

    const int n_acc = host->n_accepted;
    if (n_acc < 0 || n_acc > k || host->n_tokens != n_acc + 1) {
      return absl::InternalError(Cat("acceptance kernel returned ", n_acc, " accepted of ", k, " and ",
                                     host->n_tokens, " tokens"));
    }
    const int64_t keep = len + n_acc;
    if (target_->n_past() > keep) RETURN_IF_ERROR(target_->Truncate(keep));
    if (options_.keep_cache) {  // O(length) per step: only when the caches are kept for the next call
      held.assign(sequence.begin(), sequence.end());
      held.insert(held.end(), host->tokens, host->tokens + n_acc);
    }
    if (draft_ != nullptr && k > 0) {
      const bool hit = guessed && n_acc == k && step_result->guess == host->tokens[k];
      if (hit) {
        draft_valid_ = keep + 1;  // the draft holds the bonus token too: the next step draws at once
        ready_logits_ = guess_logits_;
      } else {
        draft_valid_ = std::min<int64_t>(draft_valid_, keep);
      }
      if (guessed) ObserveGuess(hit, side_state == cudaErrorNotReady);
      if (draft_->n_past() > draft_valid_) RETURN_IF_ERROR(draft_->Truncate(draft_valid_));
    }
    guess_logits_ = nullptr;
    AcceptResult result;
    result.n_accepted = n_acc;
    const size_t first_new = generated.size();
    for (int i = 0; i < host->n_tokens; ++i) {
      const int32_t t = host->tokens[i];
      if (t < 0 || t >= vocab) return absl::InternalError(Cat("acceptance kernel emitted token ", t));
      result.tokens.push_back(t);
      sequence.push_back(t);
      generated.push_back(t);
      if (std::find(options_.end_ids.begin(), options_.end_ids.end(), t) != options_.end_ids.end()) {
        ended = true;
        break;
      }
    }

    stats_.RecordPass(k, n_acc);
    stats_.draft_seconds += t_draft;
    stats_.verify_seconds += t_verify;
    stats_.accept_seconds += t_accept;
    // A step whose pass was captured (its warm-up pass, the capture and the instantiation: ~2-4 ms on
    // a Qwen3-1.7B-sized target) says nothing about what a pass of that size costs: its times would
    // stay in the controller's estimate of that k until it is chosen again, which they prevent.
    const bool captured = target_pass_->captures() != captures_before;
    // Nor does a step whose draft first caught up on the tokens of steps made without it (k = 0), as an
    // exploration of k = 1 after a run of plain steps does.
    const bool draft_caught_up = k > 0 && previous_k == 0;
    previous_k = k;
    if (controller_) {
      controller_->ObserveAcceptance(k, n_acc);
      // The step's wall time: the host's launches of the drafting and the verification, and the wait
      // for the device's work (the step's one sync), so each k is charged with what a step of it costs.
      if (captured || draft_caught_up) {
        controller_->ObserveUntimed();
      } else {
        controller_->ObserveStepTime(k, t_draft + t_verify + t_accept);
      }
    }
    const SyncCounts& after = backend_->syncs();
    ++syncs_.steps;
    syncs_.step_result += after.step_result - before.step_result;
    syncs_.expert_union += after.expert_union - before.expert_union;
    syncs_.other += after.other - before.other;
    syncs_.max_non_union_per_step =
        std::max(syncs_.max_non_union_per_step, (after.step_result - before.step_result) +
                                                    (after.other - before.other));
    if (options_.on_pass) options_.on_pass(k, result);
    if (sink) sink(std::span<const int32_t>(generated).subspan(first_new));
  }
  stats_.tokens = static_cast<int64_t>(generated.size());
  stats_.total_seconds = SecondsSince(t_start);
  if (options_.keep_cache) {
    target_cached_.assign(held.begin(), held.begin() + std::min<int64_t>(target_->n_past(), held.size()));
    if (draft_ != nullptr) {
      const int64_t valid = std::min<int64_t>(draft_valid_, static_cast<int64_t>(target_cached_.size()));
      if (draft_->n_past() > valid) RETURN_IF_ERROR(draft_->Truncate(valid));
      draft_cached_.assign(target_cached_.begin(), target_cached_.begin() + valid);
    }
  }
  return generated;
}

}  // namespace specgen
