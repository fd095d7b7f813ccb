// DeviceProposer: the resident draft model as a proposer on the GPU, the device twin of ModelProposer
// (draft/model_proposer.h). It keeps its KV cache equal to a prefix of the committed sequence, decodes
// k tokens from there (single tokens through GraphedDraft's CUDA graph where the draft takes it),
// draws each on the device with the shared Philox keys (q rows kept for the acceptance rule) and
// writes the tokens where the target's verification pass reads them: nothing visits the host.
// DeviceSpeculativeDecoder drives it: Propose, BesideVerification, then (after the step's one host
// wait) AfterResult.
//
// Beside the verification (a second stream, forked after the last draw and joined back on the device
// before the backend's stream touches the draft again) it decodes its last proposal x_k and, running
// ahead, guesses the target's bonus token y (its own argmax after x_k), decodes y and drafts the next
// step's proposals z_1..z_m after it: drawn with the keys, q rows and script Propose would use there
// (keyed by absolute position, so computable ahead), z_1..z_{m-1} decoded (Propose leaves its last
// proposal undecoded too), written to buffers of their own (the step's pass reads tokens[0..k] and its
// acceptance q meanwhile). Only y comes to the host, with the step's result in its one wait. When the
// step accepts every draft and its bonus is y, the next Propose(k') takes z_1..z_min(k',m) with one
// device copy (q rows by swapping buffers), keeps the cache Propose's contract says it holds (the
// sequence and the first k' - 1 proposals) and decodes on from there where k' > m; otherwise all of it
// is discarded (the cache rolled back). Every setting draws the same proposals.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "draft/cuda/graphed_draft.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/transformer.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"
#include "kernels/sampling.cuh"
#include "kernels/scripted_draft.cuh"

namespace specgen {

// The sampling kernels' view of the logits processing SamplingParams asks for.
kernels::SamplingConfig ToSamplingConfig(const SamplingParams& p);

// DeviceDraftHooks::run_ahead.
enum class RunAhead {
  kOff,
  kAuto,    // guess while hits are at least as frequent as misses whose side work outlasted the step;
            // draft ahead while most guesses hit, only as far as the verification hides
  kAlways,  // guess in every drafted step that another may follow, drafting run_ahead_drafts ahead
};

// Test and benchmark seam: how the GPU draft runs. The defaults are the product's; tests and
// benchmarks change them to compare paths (every setting gives the same proposals).
struct DeviceDraftHooks {
  // How single tokens decode; kGraph and kFused fall back to kTransformer for a draft the fused
  // kernels do not take (an MoE draft), kGraph to kFused if capture fails.
  DraftDecodePath path = DraftDecodePath::kGraph;
  // Decode the step's last draft x_k on a second stream while the target verifies (it does not
  // depend on the verification), so a step that accepts every draft leaves the draft holding x_k.
  bool overlap_last_draft = true;
  // With overlap_last_draft: after x_k the side stream also takes the draft's argmax y (its guess of
  // the bonus token), decodes it and drafts the next step's proposals after it (run_ahead_drafts); a
  // step whose bonus token is y starts the next one from them. A missed guess costs its side work only
  // where that outlasts the verification.
  RunAhead run_ahead = RunAhead::kAuto;
  // With run_ahead: how many of the next step's proposals the side stream drafts after the guess, at
  // most max_draft. Negative (the default): max_draft, the longest run the next step may ask for;
  // 0: the guess alone (the next step draws its first proposal from the logits after y). kAuto
  // drafts none while fewer than half the guesses hit, and shortens the run while it outlasts the
  // verification (see WantGuess).
  int run_ahead_drafts = -1;
  // Benchmarks' acceptance regimes only (bench/acceptance, docs/design.md §3.5; greedy): after each
  // draw kernels/scripted_draft.cuh replaces the token with the script's, and the draft decodes on
  // from it. Not owned; its fields are read at each launch, so the benchmark points it at the next
  // prompt's continuation between generations.
  const kernels::ScriptedDraftTable* script = nullptr;
};

// How the draft's single-token decodes ran (the proposals after the first of a step, and the first
// when the draft lacks only one token), cumulative over the proposer's life.
struct DraftDecodeStats {
  DraftDecodePath path = DraftDecodePath::kTransformer;  // the single-token path in use
  std::string why_not_graph;       // empty when the path asked for is in use
  int64_t graph_replays = 0;       // single tokens through the CUDA graph
  int64_t fused_steps = 0;         // through the same fused kernels launched one by one
  int64_t transformer_passes = 0;  // draft passes through Transformer::ForwardResident
  int64_t overlapped = 0;          // last drafts decoded beside the verification
  int64_t run_ahead = 0;           // guesses of the bonus token decoded beside it
  int64_t run_ahead_used = 0;      // steps that started from a guess (it was the bonus): its logits or its run
  int64_t run_ahead_late = 0;      // missed guesses whose side work was still running at the step's end
  int64_t run_ahead_drafted = 0;   // the next step's proposals drafted beside the verification after a guess
  int64_t run_ahead_drafts_used = 0;  // of them, proposals a step took instead of drafting them
};

class DeviceProposer {
 public:
  // `draft` runs on `backend`; its vocabulary is the target's. `tokens`: device memory [max_draft + 1]
  // the step shares with the target's pass: tokens[0] is the last committed token (the caller's),
  // Propose writes x_1..x_k to tokens[1..k]. `max_draft` <= kernels::kAcceptMaxDraft. Not owned.
  static absl::StatusOr<std::unique_ptr<DeviceProposer>> Create(CudaBackend* backend, Transformer* draft,
                                                                const SamplingParams& sampling,
                                                                AcceptMode accept, int32_t* tokens,
                                                                int max_draft,
                                                                const DeviceDraftHooks& hooks = {});
  ~DeviceProposer();
  DeviceProposer(const DeviceProposer&) = delete;
  DeviceProposer& operator=(const DeviceProposer&) = delete;

  // The q rows of the last Propose, [max_draft, V] in device memory (unwritten under greedy sampling,
  // whose acceptance reads none). Read it after each Propose: a step that takes proposals drafted
  // ahead takes their rows by switching buffers.
  const float* q() const { return q_; }
  // Largest k it can propose after `context_len` committed tokens (its own context limit).
  int64_t MaxDraft(int64_t context_len) const;

  // Before a generation: joins a decode a failed call may have left on the side stream.
  absl::Status Reset();
  // Caches all of `prompt` but its last token, feeding only what its cache lacks (with `keep_cache`,
  // the prefix it held at the end of the last generation is kept).
  absl::Status Prefill(std::span<const int32_t> prompt, bool keep_cache);
  // Queues k >= 1 proposals after `sequence` (the committed tokens, its last in tokens[0]).
  absl::Status Propose(const std::vector<int32_t>& sequence, int k);
  // A step without the draft (k = 0): what was decoded and drafted ahead goes stale (the cache beyond
  // valid_ is rolled back by the next Feed).
  void SkipStep() {
    ready_logits_ = nullptr;
    ready_ahead_ = 0;
  }
  // After Propose, before the target's pass is queued: decodes x_k beside it (and, when
  // `another_may_follow`, maybe guesses the bonus token and drafts on after it); `len` = sequence.size().
  absl::Status BesideVerification(int64_t len, int k, bool another_may_follow);
  // Makes `stream` wait (on the device) for the guess's copy to the host, so that the step's one host
  // wait brings it with the acceptance result. No-op without a guess.
  absl::Status OrderBeforeHostWait(cudaStream_t stream);
  // After the step's host wait: n_accepted of k drafts, the target's token `bonus`, keep = len + n_acc
  // (the committed sequence's length less one). Rolls the draft's cache back.
  absl::Status AfterResult(int64_t keep, int k, int n_accepted, int32_t bonus);
  // With keep_cache, at the end of a generation: the target's cache holds `target_cached`; the draft
  // keeps the prefix of it that it holds.
  absl::Status EndGeneration(std::span<const int32_t> target_cached);

  DraftDecodeStats stats() const;

 private:
  DeviceProposer(CudaBackend* backend, Transformer* draft, const SamplingParams& sampling, AcceptMode accept,
                 int32_t* tokens, int max_draft, const DeviceDraftHooks& hooks);
  absl::Status Allocate();
  // Brings the draft's cache up to `sequence` (truncating what it holds past valid_) and points *last
  // at its logits after the sequence's last token.
  absl::Status Feed(const std::vector<int32_t>& sequence, const float** last);
  // One draft token at the draft's n_past(): *device_token, or host_token when device_token is null.
  absl::StatusOr<const float*> DecodeOne(const int32_t* device_token, int32_t host_token);
  // Draws the proposal at absolute position `position`, depth `depth` of its step, from `logits` into
  // *token (its q row into q_row unless greedy), then applies the script: how every proposal is drawn,
  // Propose's and the run-ahead's alike, so that both give the same token at a position.
  absl::Status Draw(const float* logits, int64_t position, int depth, int32_t* token, float* q_row, void* ws,
                    size_t ws_bytes, cudaStream_t stream);
  // Queues x_k's decode on side_stream_ where the draft replays a captured graph (true when it did);
  // with `guess`, also the guess of the bonus token, its decode and the run ahead (RunAheadDrafts).
  // `len`: the step's sequence length.
  absl::StatusOr<bool> OverlapLastDraft(int64_t len, int k, bool guess);
  // Drafts ahead_[0..n) on side_stream_ from the logits after the guess, as the next step's Propose
  // would from position `next_len` on; sets ahead_n_.
  absl::Status RunAheadDrafts(int64_t next_len, const float* logits, int n);
  // When a decode queued by OverlapLastDraft is not joined yet: the backend's stream waits for it (a
  // device-side wait), so that nothing queued after touches the draft before it ends.
  absl::Status JoinLastDraft();
  // RunAhead::kAuto: whether this step guesses, and how far it drafts ahead (AheadLength); the running
  // rates and the length learn from each guess's outcome.
  bool WantGuess();
  int AheadLength() const;
  void ObserveGuess(bool hit, bool late);

  CudaBackend* backend_;
  Transformer* draft_;
  SamplingParams sampling_;
  AcceptMode accept_;
  int32_t* tokens_;
  int max_draft_;
  DeviceDraftHooks hooks_;
  int64_t valid_ = 0;             // leading tokens of the sequence the draft's KV cache holds
  std::vector<int32_t> cached_;   // keep_cache: the tokens its cache held when the last generation ended
  std::unique_ptr<GraphedDraft> graphed_;  // null: single tokens through the Transformer
  std::string why_not_graph_;
  int64_t transformer_passes_ = 0, overlapped_ = 0;
  int64_t run_ahead_ = 0, run_ahead_used_ = 0, run_ahead_late_ = 0;
  int64_t ahead_drafted_ = 0, ahead_used_ = 0;
  // The most proposals a run ahead drafts (DeviceDraftHooks::run_ahead_drafts resolved; 0: the guess
  // alone), and kAuto's current length within it.
  int ahead_max_ = 0;
  int ahead_auto_ = 0;
  // RunAhead::kAuto: running rates (over guesses) of hits and of late misses, and the drafted steps
  // since the last guess.
  double hit_rate_ = 1.0, late_miss_rate_ = 0.0;
  int steps_without_guess_ = 0;
  // A guess is queued (until AfterResult). guess_logits_: the draft's logits after y while nothing was
  // decoded after it (no run ahead); ready_logits_: the same once a step found y to be the bonus token,
  // which the next Propose draws x_1 from.
  bool guessed_ = false;
  const float* guess_logits_ = nullptr;
  const float* ready_logits_ = nullptr;
  // Proposals the queued run ahead drafted into ahead_ (z_1..z_n, z_1..z_{n-1} decoded); ready_ahead_:
  // the same once a step found y to be the bonus token, which the next Propose takes.
  int ahead_n_ = 0;
  int ready_ahead_ = 0;
  // The side stream x_k's decode runs on, the events that fork it from the backend's stream and join
  // it back, and whether a join is due.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cudaEvent_t guess_ready_ = nullptr;  // the guess is on the host
  bool join_due_ = false;
  cudaError_t side_state_ = cudaSuccess;  // the side stream's state at the step's host wait

  // Device memory (from the backend's arena).
  float* q_ = nullptr;         // [max_draft, V]
  // [max_draft, V]: the run ahead's q rows (sampling only), the next step's q_ when it takes them; the
  // two buffers trade places then, so the run ahead never writes rows a queued acceptance reads.
  float* q_ahead_ = nullptr;
  int32_t* ahead_ = nullptr;   // [max_draft]: z_1..z_n
  int32_t* guess_ = nullptr;   // the guess y
  void* sample_ws_ = nullptr;  // the draws (backend's stream)
  size_t sample_ws_bytes_ = 0;
  void* side_ws_ = nullptr;    // the guess's argmax and the run ahead's draws (side stream)
  size_t side_ws_bytes_ = 0;
  int32_t* host_guess_ = nullptr;  // pinned
};

}  // namespace specgen
