// SequencePool: the scheduler of `specgen serve`. Up to `parallel` sequences generate at once, each
// with its own speculative loop (its sampling parameters, seed, stop conditions and draft-length
// state) and its own target and draft KV caches from a pool made at start; requests beyond them wait
// in a bounded queue, and past that bound are refused (the server's 503).
//
// Continuous batching (docs/design.md §14). On the CPU reference, every running sequence's loop
// runs on its request's thread over a SequenceTarget and a SequenceDraft (pass_batcher.h): the
// drafts run one after another on the shared draft, each with its own cache, and the target verifies
// every sequence's k_i + 1 positions in ONE pass (Transformer::ForwardSequences), each attending to
// its own cache. A sequence joins or leaves between any two passes; a pass's rows equal those of the
// sequence alone, so a request's output does not depend on what else runs (batch invariance). On the
// GPU, whose loop keeps CUDA graphs holding the models' own cache addresses, a sequence keeps the
// models for its whole generation: requests run one after another, each exactly as alone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/kv_cache.h"
#include "engine/model/transformer.h"
#include "engine/serve/pass_batcher.h"
#include "engine/speculative/speculative_loop.h"

namespace specgen {
class CudaBackend;
}  // namespace specgen

namespace specgen::serve {

struct PoolOptions {
  int parallel = 1;  // --parallel: sequences generating at once (each holds a pair of KV caches)
  int queue = 16;    // --queue: requests that may wait for a sequence beyond those
};

class SequencePool {
 public:
  // One request's generation.
  struct Job {
    std::vector<int32_t> prompt;
    SpeculativeOptions options;  // -n, sampling and seed, accept rule, draft bound, end ids
    // Each step's committed tokens, called inside the sequence's turn: keep it short (decode, buffer).
    TokenSink sink;
    // After each step, outside the turn (others step meanwhile): send what was buffered, look for a
    // stop string or a closed connection. true ends the generation before the next step.
    std::function<bool()> between_steps;
  };

  // A place among the admitted requests (running or waiting), given back when destroyed.
  class Admission {
   public:
    explicit Admission(SequencePool* pool) : pool_(pool) {}
    ~Admission();
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;

   private:
    SequencePool* pool_;
  };

  // `cuda`: the models' backend when it is the CUDA backend, else null. `draft` may be null. The
  // models must outlive the pool; nobody else may run them while it exists.
  static absl::StatusOr<std::unique_ptr<SequencePool>> Create(CudaBackend* cuda, Transformer* target,
                                                              Transformer* draft, const PoolOptions& options);
  ~SequencePool();

  // A place, or Unavailable when `parallel` requests run and `queue` more wait.
  absl::StatusOr<std::unique_ptr<Admission>> Admit();
  // Waits for a free sequence, then generates `job` to its end; returns the generated tokens and the
  // run's stats.
  absl::StatusOr<std::vector<int32_t>> Run(const Admission& admission, const Job& job, SpeculativeStats* stats);

  struct Load {
    int running = 0, waiting = 0, parallel = 0, queue = 0;
  };
  Load load() const;
  // Whether sequences share passes (the CPU) or run request by request (the GPU).
  bool interleaves() const { return interleave_; }
  // The shared passes so far (zero on the GPU).
  PassBatcher::Counters pass_counters() const { return batcher_.counters(); }
  int64_t max_context() const { return target_->max_context(); }

 private:
  // A sequence's models, each with its own KV cache (the CPU; null on the GPU).
  struct Slot {
    std::unique_ptr<SequenceTarget> target;
    std::unique_ptr<SequenceDraft> draft;
  };

  SequencePool(CudaBackend* cuda, Transformer* target, Transformer* draft, const PoolOptions& options);
  // The GPU's turn (a whole request): FIFO by ticket.
  void AcquireTurn();
  void ReleaseTurn();
  absl::StatusOr<std::vector<int32_t>> RunShared(Slot& slot, const Job& job, SpeculativeStats* stats);
  absl::StatusOr<std::vector<int32_t>> RunAlone(const Job& job, SpeculativeStats* stats);

  CudaBackend* cuda_;
  Transformer* target_;
  Transformer* draft_;
  PoolOptions options_;
  bool interleave_;
  std::vector<Slot> slots_;
  PassBatcher batcher_;
  std::mutex draft_mu_;  // the shared draft: one sequence's call at a time

  mutable std::mutex mu_;  // admitted_, running_, free_slots_
  std::condition_variable slot_freed_;
  int admitted_ = 0, running_ = 0;
  std::vector<int> free_slots_;

  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  uint64_t next_ticket_ = 0, serving_ = 0;
};

}  // namespace specgen::serve
