// DeviceSpeculativeDecoder: the loop of docs/design.md §1 with everything on the GPU (CudaBackend). The draft
// proposes on the device (its logits → q with the sampling kernels, tokens drawn with the shared
// Philox keys, fed back to the draft and to the target straight from device memory); the target
// verifies the k+1 positions in one pass whose logits stay on the device (replayed from a CUDA graph
// per pass size: GraphedTargetPass, SpeculativeOptions::graph_verify); logits processing and the
// acceptance rule run as kernels; the step's result {n_accepted, tokens, logprobs} comes back in ONE
// pinned copy, the step's only host wait (resident MoE experts route on the device; an expert-union
// read, docs/design.md §6.2, happens only where a layer's experts cannot: a verify pass of more than 16
// positions, or experts of mixed shapes).
// Same options, Stats and outputs as SpeculativeDecoder (the CPU loop), which it mirrors draw for draw.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/transformer.h"
#include "engine/speculative/graphed_draft.h"
#include "engine/speculative/graphed_target_pass.h"
#include "engine/speculative/speculative_decoder.h"
#include "engine/speculative/stats.h"

namespace specgen {

// Host waits of the generation steps (prefill excluded), by kind.
struct StepSyncStats {
  int64_t steps = 0;
  int64_t step_result = 0;        // should equal steps
  int64_t expert_union = 0;       // host-routed MoE layers' reads, allowed (docs/design.md §6.2)
  int64_t other = 0;              // should be 0
  int64_t max_non_union_per_step = 0;  // result + other waits of the worst step
};

// How the draft's single-token decodes ran (the proposals after the first of a step, and the first
// when the draft lacks only one token).
struct DraftDecodeStats {
  DraftDecodePath path = DraftDecodePath::kTransformer;  // the single-token path in use
  std::string why_not_graph;     // empty when the path asked for is in use
  int64_t persistent_launches = 0;  // single tokens through the persistent kernel
  int64_t graph_replays = 0;     // single tokens through the CUDA graph
  int64_t fused_steps = 0;       // through the same fused kernels launched one by one
  int64_t transformer_passes = 0;  // draft passes through Transformer::ForwardResident
  int64_t overlapped = 0;          // last drafts decoded beside the verification (overlap_last_draft)
  int64_t run_ahead = 0;           // guesses of the bonus token decoded beside it (run_ahead)
  int64_t run_ahead_used = 0;      // steps that started from such a guess's logits (it was the bonus)
  int64_t run_ahead_late = 0;      // missed guesses whose decode was still running at the step's end
                                   // (the next step's draft waited for it)
};

// How the target's passes of the generation steps ran (SpeculativeOptions::graph_verify).
struct VerifyPassStats {
  int64_t graph_replays = 0;  // passes replayed from a captured graph
  int64_t captures = 0;       // graphs captured (one per pass size and key bound, again after a workspace grew)
  int64_t eager_passes = 0;   // passes launched kernel by kernel (graph_verify off, or no graph possible)
  std::string why_not_graph;  // why passes run eagerly (empty while graphs are in use or not asked for)
};

class DeviceSpeculativeDecoder {
 public:
  // `target` and `draft` run on `backend`; `draft` may be null (plain decoding through the same
  // kernels). Draft and target must share the vocabulary size. None is owned. `draft_path`: how the
  // draft decodes single tokens; kGraph (the default: the fastest today, see bench/RESULTS.md),
  // kPersistent and kFused fall back to kTransformer for a draft the fused kernels do not take (an MoE
  // draft), kPersistent to kGraph on a device without cooperative launch or a shape it does not take,
  // and kGraph to kFused if capture fails.
  static absl::StatusOr<std::unique_ptr<DeviceSpeculativeDecoder>> Create(
      CudaBackend* backend, Transformer* target, Transformer* draft, SpeculativeOptions options,
      DraftDecodePath draft_path = DraftDecodePath::kGraph);
  ~DeviceSpeculativeDecoder();

  absl::StatusOr<std::vector<int32_t>> Generate(std::span<const int32_t> prompt,
                                                const TokenSink& sink = nullptr);

  const SpeculativeStats& stats() const { return stats_; }
  const StepSyncStats& syncs() const { return syncs_; }
  // Cumulative over this decoder's life.
  DraftDecodeStats draft_decode_stats() const;
  VerifyPassStats verify_pass_stats() const;
  // Prompt tokens the last Generate's prefill fed to the target (with keep_cache, only those past the
  // prefix its KV cache already held).
  int64_t last_prefill_fed() const { return last_prefill_fed_; }

 private:
  DeviceSpeculativeDecoder(CudaBackend* backend, Transformer* target, Transformer* draft,
                           SpeculativeOptions options);
  absl::Status Allocate();
  absl::Status Prefill(std::span<const int32_t> prompt);
  int ChooseDraftLength(int64_t context_len, int64_t remaining);
  // Brings the draft's cache up to `sequence` (truncating what it holds past draft_valid_) and points
  // *last at its logits after the sequence's last token.
  absl::Status Feed(const std::vector<int32_t>& sequence, const float** last);
  // Queues the draft's k proposals (tokens into batch_[1..k], q rows into q_) after `sequence`.
  absl::Status Propose(const std::vector<int32_t>& sequence, int k);
  // One draft token at the draft's n_past(): *device_token, or host_token when device_token is null.
  absl::StatusOr<const float*> DecodeOne(const int32_t* device_token, int32_t host_token);
  // overlap_last_draft: queues the draft's decode of x_k (batch_[k]) on side_stream_ after what the
  // stream has queued so far, where the draft replays a captured graph; true when it did. With
  // run_ahead and `guess` (no generation end before the next step), also the draft's guess of the
  // bonus token and its decode (guess_logits_ then points at the logits after it).
  absl::StatusOr<bool> OverlapLastDraft(int k, bool guess);
  // When a decode queued by OverlapLastDraft is not joined yet: the backend's stream waits for it (a
  // device-side wait, no host wait), so that nothing queued after touches the draft before it ends.
  absl::Status JoinLastDraft();
  // run_ahead: whether this drafted step (one that another may follow) guesses the bonus token. kAuto
  // guesses while hits are at least as frequent as late misses, and once every kRunAheadProbe steps
  // otherwise (to notice a change).
  bool WantGuess();
  // After a step that guessed: whether the guess was the bonus token (hit) and whether its decode was
  // still running when the step's result arrived (late).
  void ObserveGuess(bool hit, bool late);

  CudaBackend* backend_;
  Transformer* target_;
  Transformer* draft_;
  SpeculativeOptions options_;
  std::unique_ptr<DraftLengthController> controller_;
  SpeculativeStats stats_;
  StepSyncStats syncs_;
  int64_t draft_valid_ = 0;  // leading tokens of the sequence the draft's KV cache holds
  // keep_cache: the tokens each KV cache holds after the last Generate (a later prompt that starts
  // with them is fed from where they end, as SpeculativeDecoder does).
  std::vector<int32_t> target_cached_, draft_cached_;
  int64_t last_prefill_fed_ = 0;
  std::unique_ptr<GraphedDraft> graphed_;  // null: single tokens through the Transformer
  std::unique_ptr<GraphedTargetPass> target_pass_;  // every target pass of a step (eager: graph_verify off)
  std::string why_not_graph_;
  int64_t transformer_passes_ = 0;
  int64_t overlapped_ = 0;
  int64_t run_ahead_ = 0, run_ahead_used_ = 0, run_ahead_late_ = 0;
  // RunAhead::kAuto, over this decoder's life: running rates (over guesses) of hits and of late misses,
  // and the drafted steps since the last guess.
  double hit_rate_ = 1.0, late_miss_rate_ = 0.0;
  int steps_without_guess_ = 0;
  // run_ahead: the draft's logits after its guess y (valid until its next decode), set while a guess
  // is queued; ready_logits_: the same once the step found y to be the bonus token, which the next
  // Propose draws x_1 from (then cleared).
  const float* guess_logits_ = nullptr;
  const float* ready_logits_ = nullptr;
  // overlap_last_draft: the stream x_k's decode runs on, the events that fork it from the backend's
  // stream and join it back (the backend's stream waits for join_ right after each step's host wait,
  // before anything else touches the draft), and whether a join is due.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cudaEvent_t guess_ready_ = nullptr;  // run_ahead: the guess is on the host (the step's result waits for it)
  bool join_due_ = false;

  // Device memory (from the backend's arena).
  int32_t* batch_ = nullptr;  // [kAcceptMaxDraft + 1]: the last committed token, then the drafts
  float* q_ = nullptr;        // [kAcceptMaxDraft, V] the draft's processed distributions
  float* p_ = nullptr;        // [kAcceptMaxDraft + 1, V] the target's
  void* result_ = nullptr;    // StepResult: kernels::AcceptanceResult, then the draft's guess y
  void* accept_ws_ = nullptr;
  size_t accept_ws_bytes_ = 0;
  void* sample_ws_ = nullptr;
  size_t sample_ws_bytes_ = 0;
  void* side_ws_ = nullptr;  // the guess's argmax on side_stream_ (sample_ws_ is the main stream's)
  size_t side_ws_bytes_ = 0;
  void* host_result_ = nullptr;  // pinned StepResult
};

}  // namespace specgen
