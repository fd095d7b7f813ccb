// SequencePool: the scheduler of `specgen serve`. Up to `parallel` sequences generate at once, each
// with its own speculative loop (its sampling parameters, seed, stop conditions and draft-length
// state) and its own target and draft KV caches from a pool made at start; requests beyond them wait
// in a bounded queue, and past that bound are refused (the server's 503).
//
// Continuous batching, one sequence's step at a time (docs/design.md §16): on the CPU reference, the
// running sequences take turns, one speculative step each in arrival order; before a sequence's turn
// its KV caches are swapped into the two models and after it they are swapped out, so a sequence
// joins or leaves between any two steps. A step reads nothing but its own caches and tokens, so a
// request's output is the one it gets alone (batch invariance). On the GPU, whose loop keeps CUDA
// graphs that hold the models' own cache addresses, a sequence keeps the turn for its whole
// generation: requests run one after another, each exactly as alone.
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
  // Whether sequences take turns step by step (the CPU) or request by request (the GPU).
  bool interleaves() const { return interleave_; }
  int64_t max_context() const { return target_->max_context(); }

 private:
  // A sequence's own KV caches while it is not in its turn (the models hold them during the turn).
  struct Slot {
    std::unique_ptr<KvCache> target_cache, draft_cache;
  };

  SequencePool(CudaBackend* cuda, Transformer* target, Transformer* draft, const PoolOptions& options);
  // The turn: FIFO by ticket, so that every running sequence steps once before any steps twice.
  void AcquireTurn(Slot& slot);
  void ReleaseTurn(Slot& slot);
  void SwapCaches(Slot& slot);

  CudaBackend* cuda_;
  Transformer* target_;
  Transformer* draft_;
  PoolOptions options_;
  bool interleave_;
  std::vector<Slot> slots_;

  mutable std::mutex mu_;  // admitted_, running_, free_slots_
  std::condition_variable slot_freed_;
  int admitted_ = 0, running_ = 0;
  std::vector<int> free_slots_;

  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  uint64_t next_ticket_ = 0, serving_ = 0;
};

}  // namespace specgen::serve
