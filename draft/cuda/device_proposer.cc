#include "draft/cuda/device_proposer.h"

#include <algorithm>
#include <utility>

#include "engine/core/status_macros.h"
#include "engine/model/cached_prefix.h"
#include "engine/sampling/keyed_random.h"
#include "kernels/acceptance.cuh"
#include "kernels/cuda_check.h"
#include "kernels/sampling.cuh"

namespace specgen {
namespace {

// Feeds of up to this many tokens catch the draft up through its decode graph (see Feed).
constexpr size_t kGraphedFeedMax = 4;

// kAuto run-ahead: the weight of the latest guess in the running rates of hits and late misses, and
// the drafted steps after which a guess is tried again while late misses outweigh hits.
constexpr double kRunAheadRateWeight = 0.25;
constexpr int kRunAheadProbe = 16;
// kAuto drafts ahead of the guess only while at least this share of guesses hits (see WantGuess).
constexpr double kRunAheadDraftsHitRate = 0.5;

}  // namespace

kernels::SamplingConfig ToSamplingConfig(const SamplingParams& p) {
  kernels::SamplingConfig c;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  return c;
}

DeviceProposer::DeviceProposer(CudaBackend* backend, Transformer* draft, const SamplingParams& sampling,
                               AcceptMode accept, int32_t* tokens, int max_draft, const DeviceDraftHooks& hooks)
    : backend_(backend),
      draft_(draft),
      sampling_(sampling),
      accept_(accept),
      tokens_(tokens),
      max_draft_(max_draft),
      hooks_(hooks) {}

DeviceProposer::~DeviceProposer() {
  // The side stream first: a generation that failed mid-step may have left x_k's decode reading tokens_.
  if (side_stream_ != nullptr) {
    (void)cudaStreamSynchronize(side_stream_);
    cudaStreamDestroy(side_stream_);
  }
  (void)backend_->Synchronize(SyncKind::kOther);
  graphed_.reset();
  DeviceArena& a = backend_->arena();
  for (void* p : {static_cast<void*>(q_), static_cast<void*>(q_ahead_), static_cast<void*>(ahead_),
                  static_cast<void*>(guess_), sample_ws_, side_ws_}) {
    a.Free(p);
  }
  for (cudaEvent_t e : {fork_, join_, guess_ready_}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (host_guess_ != nullptr) cudaFreeHost(host_guess_);
}

absl::StatusOr<std::unique_ptr<DeviceProposer>> DeviceProposer::Create(CudaBackend* backend, Transformer* draft,
                                                                       const SamplingParams& sampling,
                                                                       AcceptMode accept, int32_t* tokens,
                                                                       int max_draft, const DeviceDraftHooks& hooks) {
  if (backend == nullptr || draft == nullptr || tokens == nullptr) {
    return InvalidArgument("device proposer: no backend, draft or token buffer");
  }
  if (&draft->backend() != backend) return InvalidArgument("device proposer: the draft must run on the given backend");
  if (max_draft < 1 || max_draft > kernels::kAcceptMaxDraft) {
    return InvalidArgument("device proposer: draft length bound ", max_draft, " outside [1, ",
                           kernels::kAcceptMaxDraft, "]");
  }
  if (hooks.script != nullptr && !sampling.greedy()) {
    return InvalidArgument("device proposer: a scripted draft (an acceptance regime) is greedy only");
  }
  std::unique_ptr<DeviceProposer> p(new DeviceProposer(backend, draft, sampling, accept, tokens, max_draft, hooks));
  RETURN_IF_ERROR(p->Allocate());
  p->why_not_graph_ = hooks.path == DraftDecodePath::kTransformer ? "not asked for" : GraphedDraft::Unsupported(*draft);
  if (p->why_not_graph_.empty()) {
    ASSIGN_OR_RETURN(p->graphed_, GraphedDraft::Create(backend, draft, hooks.path));
    if (hooks.path == DraftDecodePath::kFused) p->why_not_graph_ = "not asked for";
  }
  return p;
}

absl::Status DeviceProposer::Allocate() {
  DeviceArena& a = backend_->arena();
  const size_t v = static_cast<size_t>(draft_->vocab_size());
  ASSIGN_OR_RETURN(void* q, a.Allocate(static_cast<size_t>(max_draft_) * v * sizeof(float), "draft distributions q"));
  q_ = static_cast<float*>(q);
  ASSIGN_OR_RETURN(void* g, a.Allocate(sizeof(int32_t), "draft guess"));
  guess_ = static_cast<int32_t*>(g);
  sample_ws_bytes_ = std::max(kernels::ProcessAndSampleWorkspaceBytes(1, static_cast<int>(v)), size_t{256});
  ASSIGN_OR_RETURN(sample_ws_, a.Allocate(sample_ws_bytes_, "draft sampling workspace"));
  void* host_guess = nullptr;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host_guess, sizeof(int32_t), cudaHostAllocDefault));
  host_guess_ = static_cast<int32_t*>(host_guess);
  if (hooks_.overlap_last_draft) {
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    if (hooks_.run_ahead != RunAhead::kOff) {
      SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&guess_ready_, cudaEventDisableTiming));
      ahead_max_ = hooks_.run_ahead_drafts < 0 ? max_draft_ : std::min(hooks_.run_ahead_drafts, max_draft_);
      ahead_auto_ = ahead_max_;
      // The guess's argmax, and the run ahead's draws as Propose's (processing included).
      side_ws_bytes_ = std::max<size_t>(ahead_max_ > 0 ? kernels::ProcessAndSampleWorkspaceBytes(1, static_cast<int>(v))
                                                       : kernels::SampleWorkspaceBytes(1),
                                        256);
      ASSIGN_OR_RETURN(side_ws_, a.Allocate(side_ws_bytes_, "run-ahead sampling workspace"));
      if (ahead_max_ > 0) {
        ASSIGN_OR_RETURN(void* z, a.Allocate(static_cast<size_t>(max_draft_) * sizeof(int32_t), "run-ahead drafts"));
        ahead_ = static_cast<int32_t*>(z);
        if (!sampling_.greedy()) {
          ASSIGN_OR_RETURN(void* qa, a.Allocate(static_cast<size_t>(max_draft_) * v * sizeof(float),
                                                "run-ahead distributions q"));
          q_ahead_ = static_cast<float*>(qa);
        }
      }
    }
  }
  return absl::OkStatus();
}

int64_t DeviceProposer::MaxDraft(int64_t context_len) const { return draft_->max_context() - context_len + 1; }

DraftDecodeStats DeviceProposer::stats() const {
  DraftDecodeStats s;
  s.transformer_passes = transformer_passes_;
  s.overlapped = overlapped_;
  s.run_ahead = run_ahead_;
  s.run_ahead_used = run_ahead_used_;
  s.run_ahead_late = run_ahead_late_;
  s.run_ahead_drafted = ahead_drafted_;
  s.run_ahead_drafts_used = ahead_used_;
  s.why_not_graph = why_not_graph_;
  if (graphed_ != nullptr) {
    s.path = graphed_->path();
    s.graph_replays = graphed_->graph_replays();
    s.fused_steps = graphed_->eager_steps();
    if (!graphed_->fallback_reason().empty()) s.why_not_graph = graphed_->fallback_reason();
  }
  return s;
}

absl::Status DeviceProposer::Reset() {
  RETURN_IF_ERROR(JoinLastDraft());
  guess_logits_ = ready_logits_ = nullptr;
  guessed_ = false;
  ahead_n_ = ready_ahead_ = 0;
  return absl::OkStatus();
}

absl::Status DeviceProposer::Prefill(std::span<const int32_t> prompt, bool keep_cache) {
  const auto head = prompt.first(prompt.size() - 1);
  ASSIGN_OR_RETURN(const size_t common, KeepCachedPrefix(*draft_, &cached_, head, keep_cache));
  const size_t chunk_max = draft_->prefill_chunk();
  for (size_t begin = common; begin < head.size(); begin += chunk_max) {
    const auto chunk = head.subspan(begin, std::min(chunk_max, head.size() - begin));
    RETURN_IF_ERROR(draft_->ForwardResident(chunk, LogitRows::kNone).status());  // logits unread
  }
  valid_ = static_cast<int64_t>(head.size());
  return absl::OkStatus();
}

absl::Status DeviceProposer::EndGeneration(std::span<const int32_t> target_cached) {
  const int64_t valid = std::min<int64_t>(valid_, static_cast<int64_t>(target_cached.size()));
  if (draft_->n_past() > valid) RETURN_IF_ERROR(draft_->Truncate(valid));
  cached_.assign(target_cached.begin(), target_cached.begin() + valid);
  return absl::OkStatus();
}

absl::StatusOr<const float*> DeviceProposer::DecodeOne(const int32_t* device_token, int32_t host_token) {
  if (graphed_ != nullptr) return graphed_->Decode(device_token, host_token);
  if (device_token != nullptr) backend_->UseDeviceTokensOnce(device_token);
  ++transformer_passes_;
  ASSIGN_OR_RETURN(const Buffer* logits, draft_->ForwardResident({&host_token, 1}));
  return CudaBackend::Data(*logits);
}

absl::Status DeviceProposer::Feed(const std::vector<int32_t>& sequence, const float** last) {
  const int64_t len = static_cast<int64_t>(sequence.size());
  // What the draft lacks of the committed sequence (its last token at least; known on the host).
  valid_ = std::min(valid_, len - 1);
  if (draft_->n_past() > valid_) RETURN_IF_ERROR(draft_->Truncate(valid_));
  std::vector<int32_t> feed(sequence.begin() + valid_, sequence.end());
  // A short feed (after a step that accepted every draft: the target's bonus token, and x_k where it
  // was not decoded beside the verification) goes through the decode graph a token at a time, which
  // is faster than one small pass launched op by op. The draft's numerics do not bear on the output
  // (acceptance corrects for q), so either path is exact.
  if (feed.size() == 1 || (graphed_ != nullptr && feed.size() <= kGraphedFeedMax)) {
    for (const int32_t token : feed) {
      ASSIGN_OR_RETURN(*last, DecodeOne(nullptr, token));
    }
    return absl::OkStatus();
  }
  // Otherwise one batched pass (a catch-up after steps made without the draft: several, in prefill
  // chunks, only past a chunk's length), the head on its last row alone.
  const size_t chunk_max = draft_->prefill_chunk();
  for (size_t begin = 0; begin < feed.size(); begin += chunk_max) {
    const size_t n = std::min(chunk_max, feed.size() - begin);
    const bool final_chunk = begin + n == feed.size();
    std::vector<int32_t> positions(n);
    for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(valid_ + begin + i);
    ++transformer_passes_;
    ASSIGN_OR_RETURN(const Buffer* logits,
                     draft_->ForwardResident(std::span<const int32_t>(feed).subspan(begin, n), positions, {},
                                             final_chunk ? LogitRows::kLast : LogitRows::kNone));
    if (final_chunk) *last = CudaBackend::Data(*logits);
  }
  return absl::OkStatus();
}

absl::Status DeviceProposer::Draw(const float* logits, int64_t position, int depth, int32_t* token, float* q_row,
                                  void* ws, size_t ws_bytes, cudaStream_t stream) {
  const int v = static_cast<int>(draft_->vocab_size());
  // Draws as SampleDraft: own noise in rejection mode, the target's in coupled mode.
  const uint32_t purpose = static_cast<uint32_t>(accept_ == AcceptMode::kCoupled ? RandomPurpose::kTargetSample
                                                                                 : RandomPurpose::kDraftSample);
  // Greedy: the draft's token is the argmax of its logits, which is the argmax of the one-hot q
  // that processing would write (the same (value, id) order, ties to the lower id), and greedy
  // acceptance never reads q: the draw skips the processing. Otherwise processing and draw are one
  // call.
  if (sampling_.greedy()) {
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchSampleTokens(logits, 1, v, true, sampling_.seed, position, purpose,
                                                             token, ws, ws_bytes, stream));
  } else {
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchProcessAndSample(logits, 1, v, ToSamplingConfig(sampling_), q_row,
                                                                 sampling_.seed, position, purpose, token, ws,
                                                                 ws_bytes, stream));
  }
  if (hooks_.script != nullptr) {
    // The drawn token becomes the script's (eager: the position is known).
    SPECGEN_CUDA_RETURN_IF_ERROR(
        kernels::LaunchScriptedDraft(*hooks_.script, nullptr, position, depth, 1, token, stream));
  }
  return absl::OkStatus();
}

absl::Status DeviceProposer::Propose(const std::vector<int32_t>& sequence, int k) {
  if (k < 1 || k > max_draft_) return InvalidArgument("device proposer: k = ", k, " outside [1, ", max_draft_, "]");
  const int64_t len = static_cast<int64_t>(sequence.size());
  const size_t v = static_cast<size_t>(draft_->vocab_size());
  const cudaStream_t stream = backend_->stream();
  const float* last = nullptr;
  int first = 0;  // proposals already in tokens_[1..first]
  if (ready_ahead_ > 0 && valid_ == len && draft_->n_past() == len + ready_ahead_ - 1) {
    // The last step's bonus token was the draft's guess, and the side stream drafted z_1..z_n after it
    // (joined: AfterResult queued the wait before this). They are this step's first proposals.
    first = std::min(k, ready_ahead_);
    SPECGEN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(tokens_ + 1, ahead_, static_cast<size_t>(first) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                        stream));
    if (q_ahead_ != nullptr) std::swap(q_, q_ahead_);  // z_i's row is row i - 1 there, as x_i's here
    // The cache keeps what it would hold had Propose drafted them: the sequence and z_1..z_{first-1}.
    if (draft_->n_past() > len + first - 1) RETURN_IF_ERROR(draft_->Truncate(len + first - 1));
    ++run_ahead_used_;
    ahead_used_ += first;
  } else if (ready_logits_ != nullptr && valid_ == len && draft_->n_past() == len) {
    // The last step's bonus token was the draft's guess, decoded beside the verification.
    last = ready_logits_;
    ++run_ahead_used_;
  } else {
    RETURN_IF_ERROR(Feed(sequence, &last));
  }
  ready_logits_ = nullptr;
  ready_ahead_ = 0;
  for (int i = first; i < k; ++i) {
    if (i > 0) {
      // x_i (drawn on the device in the previous iteration, or taken from the run ahead) at position
      // len + i - 1.
      ASSIGN_OR_RETURN(last, DecodeOne(tokens_ + i, 0));
    }
    RETURN_IF_ERROR(Draw(last, len + i, i, tokens_ + 1 + i, q_ + static_cast<size_t>(i) * v, sample_ws_,
                         sample_ws_bytes_, stream));
  }
  valid_ = len + k - 1;  // the draft now holds the sequence and x_1..x_{k-1}
  return absl::OkStatus();
}

absl::Status DeviceProposer::BesideVerification(int64_t len, int k, bool another_may_follow) {
  // A guess of the bonus token pays only where another step follows.
  ASSIGN_OR_RETURN(const bool overlapped, OverlapLastDraft(len, k, another_may_follow && WantGuess()));
  if (overlapped) valid_ = len + k;  // the guess counts once the step finds it was the bonus
  return absl::OkStatus();
}

absl::StatusOr<bool> DeviceProposer::OverlapLastDraft(int64_t len, int k, bool guess) {
  if (side_stream_ == nullptr || graphed_ == nullptr || !graphed_->ReplaysCaptured()) return false;
  const cudaStream_t stream = backend_->stream();
  // After x_k's draw (the fork), beside the target's pass queued next on the backend's stream. The
  // draft's graph reads tokens_[k] and writes only the draft's own buffers and its cache rows from
  // x_k's on; the step's acceptance reads q_ (written before the fork), never the draft's logits.
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_, stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side_stream_, fork_, 0));
  const absl::Status queued = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const float* logits, graphed_->Decode(tokens_ + k, 0, side_stream_));
    ++overlapped_;
    // The draft's argmax after x_k (its likeliest bonus token; any guess is exact, a likely one is
    // used more often), copied to the host at once (guess_ready_, which the step's result copy waits
    // for, so that the step's one wait does not wait for the rest), then its decode and the run
    // ahead. The argmax has its own workspace: the acceptance runs on the backend's stream meanwhile.
    if (!guess || side_ws_ == nullptr || !graphed_->ReplaysCaptured()) return absl::OkStatus();
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchSampleTokens(logits, 1, static_cast<int>(draft_->vocab_size()), true,
                                                             0, 0, 0, guess_, side_ws_, side_ws_bytes_, side_stream_));
    SPECGEN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_guess_, guess_, sizeof(int32_t), cudaMemcpyDeviceToHost, side_stream_));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(guess_ready_, side_stream_));
    ASSIGN_OR_RETURN(const float* after_guess, graphed_->Decode(guess_, 0, side_stream_));
    guessed_ = true;
    ++run_ahead_;
    // The next step's sequence, should y be its bonus: this one's, x_1..x_k and y.
    RETURN_IF_ERROR(RunAheadDrafts(len + k + 1, after_guess, AheadLength()));
    guess_logits_ = ahead_n_ == 0 ? after_guess : nullptr;
    return absl::OkStatus();
  }();
  // Joined even after a failure, so that the backend's stream never runs beside what was queued.
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(join_, side_stream_));
  join_due_ = true;
  RETURN_IF_ERROR(queued);
  return true;
}

absl::Status DeviceProposer::RunAheadDrafts(int64_t next_len, const float* logits, int n) {
  ahead_n_ = 0;
  // Propose's loop, shifted to the side stream and to buffers of its own: z_{i+1} drawn at position
  // next_len + i, depth i, from the logits after z_i (decoded first; after y for z_1). The q rows go
  // to q_ahead_, which the queued acceptance does not read; ahead_ is read by the next Propose only,
  // after the join. z_n stays undecoded, as Propose's last proposal: the cache then holds what
  // Propose's contract says after n proposals, and the next step decodes z_n beside its verification
  // as any x_k (decoding it here would help only a next step asking for more than n, never with a
  // fixed k, where n = k). A decode the side stream cannot take (the graph for the position is not
  // captured yet, or the context is full) ends the run: the next Propose decodes on from there.
  const size_t v = static_cast<size_t>(draft_->vocab_size());
  for (int i = 0; i < n; ++i) {
    if (i > 0) {
      if (!graphed_->ReplaysCaptured()) break;
      ASSIGN_OR_RETURN(logits, graphed_->Decode(ahead_ + i - 1, 0, side_stream_));
    }
    RETURN_IF_ERROR(Draw(logits, next_len + i, i, ahead_ + i,
                         q_ahead_ != nullptr ? q_ahead_ + static_cast<size_t>(i) * v : nullptr, side_ws_,
                         side_ws_bytes_, side_stream_));
    ahead_n_ = i + 1;
  }
  ahead_drafted_ += ahead_n_;
  return absl::OkStatus();
}

absl::Status DeviceProposer::OrderBeforeHostWait(cudaStream_t stream) {
  if (!guessed_) return absl::OkStatus();
  return SPECGEN_CUDA_STATUS(cudaStreamWaitEvent(stream, guess_ready_, 0));
}

absl::Status DeviceProposer::JoinLastDraft() {
  if (!join_due_) return absl::OkStatus();
  join_due_ = false;
  return SPECGEN_CUDA_STATUS(cudaStreamWaitEvent(backend_->stream(), join_, 0));
}

absl::Status DeviceProposer::AfterResult(int64_t keep, int k, int n_accepted, int32_t bonus) {
  const bool guessed = guessed_;
  // Whether the side stream is still at work (the guess's decode, the run ahead): a query, not a wait.
  const cudaError_t side_state = guessed ? cudaEventQuery(join_) : cudaSuccess;
  if (side_state != cudaSuccess && side_state != cudaErrorNotReady) return SPECGEN_CUDA_STATUS(side_state);
  RETURN_IF_ERROR(JoinLastDraft());
  const bool hit = guessed && n_accepted == k && *host_guess_ == bonus;
  int64_t held = 0;  // what the draft's cache keeps
  if (hit) {
    valid_ = keep + 1;  // the draft holds the bonus token too: the next step draws at once
    if (ahead_n_ > 0) {
      ready_ahead_ = ahead_n_;
      held = valid_ + ahead_n_ - 1;  // and z_1..z_{n-1}, which the next Propose keeps as far as it takes them
    } else {
      ready_logits_ = guess_logits_;
      held = valid_;
    }
  } else {
    valid_ = std::min<int64_t>(valid_, keep);
    held = valid_;
  }
  if (guessed) ObserveGuess(hit, side_state == cudaErrorNotReady);
  guessed_ = false;
  guess_logits_ = nullptr;
  ahead_n_ = 0;
  if (draft_->n_past() > held) RETURN_IF_ERROR(draft_->Truncate(held));
  return absl::OkStatus();
}

bool DeviceProposer::WantGuess() {
  switch (hooks_.run_ahead) {
    case RunAhead::kOff:
      return false;
    case RunAhead::kAlways:
      return true;
    case RunAhead::kAuto:
      break;
  }
  // The side work after x_k is the guess's decode and a run of n drafts (n - 1 decodes, n draws).
  // A hit takes it off the next step's critical path (as much of the run as that step asks for); a
  // miss discards it. Work beside the verification is not free: it shares the multiprocessors, so the
  // verification runs longer by a share s of the side work's own time (about half of it on the
  // bundled pair: docs/experiments.md), and a late miss
  // (still running when the verification ends) also makes the next step wait for what is left.
  // The guess itself is one decode, cheap beside a verification, so for it only late misses count:
  // guess while hits are at least as frequent. The run's n - 1 decodes pay (1 - s) of each on a hit
  // and cost s of each on any miss: at a hit rate h they pay while h (1 - s) >= (1 - h) s, i.e.
  // h >= s; AheadLength drafts ahead while h >= kRunAheadDraftsHitRate, and shortens the run while it
  // outlasts the verification (ObserveGuess).
  return hit_rate_ >= late_miss_rate_ || ++steps_without_guess_ >= kRunAheadProbe;
}

int DeviceProposer::AheadLength() const {
  if (hooks_.run_ahead != RunAhead::kAuto) return ahead_max_;
  return hit_rate_ >= kRunAheadDraftsHitRate ? ahead_auto_ : 0;
}

void DeviceProposer::ObserveGuess(bool hit, bool late) {
  steps_without_guess_ = 0;
  const bool late_miss = !hit && late;
  if (late_miss) ++run_ahead_late_;
  hit_rate_ += kRunAheadRateWeight * ((hit ? 1.0 : 0.0) - hit_rate_);
  late_miss_rate_ += kRunAheadRateWeight * ((late_miss ? 1.0 : 0.0) - late_miss_rate_);
  // kAuto's run length: the run should end within the verification it hides behind. A late miss says
  // it did not (the next step waited for discarded work): halve it, down to the guess alone. A guess
  // whose side work ended in time leaves room: one more draft, up to the bound. A late hit changes
  // nothing: its work was the next step's own, merely waited for.
  if (late_miss) {
    ahead_auto_ /= 2;
  } else if (!late && ahead_auto_ < ahead_max_) {
    ++ahead_auto_;
  }
}

}  // namespace specgen
