#include "engine/serve/sequence_pool.h"

#include <utility>

#include "draft/model_proposer.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/make_loop.h"
#include "engine/speculative/speculative_decoder.h"

namespace specgen::serve {

SequencePool::Admission::~Admission() {
  std::lock_guard lock(pool_->mu_);
  --pool_->admitted_;
}

SequencePool::SequencePool(CudaBackend* cuda, Transformer* target, Transformer* draft,
                           const PoolOptions& options)
    : cuda_(cuda), target_(target), draft_(draft), options_(options), interleave_(cuda == nullptr),
      batcher_(target) {}

SequencePool::~SequencePool() = default;

absl::StatusOr<std::unique_ptr<SequencePool>> SequencePool::Create(CudaBackend* cuda, Transformer* target,
                                                                   Transformer* draft,
                                                                   const PoolOptions& options) {
  if (target == nullptr) return InvalidArgument("serve: no target model");
  if (options.parallel < 1) return InvalidArgument("--parallel is ", options.parallel, "; it must be >= 1");
  if (options.queue < 0) return InvalidArgument("--queue is ", options.queue, "; it must be >= 0");
  std::unique_ptr<SequencePool> pool(new SequencePool(cuda, target, draft, options));
  pool->slots_.resize(options.parallel);
  for (int i = 0; i < options.parallel; ++i) {
    pool->free_slots_.push_back(options.parallel - 1 - i);
    // Shared passes need a pair of caches per sequence; one request at a time, the models' own do.
    if (!pool->interleave_) continue;
    Slot& s = pool->slots_[i];
    ASSIGN_OR_RETURN(KvCache tc, target->NewKvCache());
    s.target = std::make_unique<SequenceTarget>(target, &pool->batcher_, std::move(tc));
    if (draft != nullptr) {
      ASSIGN_OR_RETURN(KvCache dc, draft->NewKvCache());
      s.draft = std::make_unique<SequenceDraft>(draft, &pool->draft_mu_, std::move(dc));
    }
  }
  return pool;
}

absl::StatusOr<std::unique_ptr<SequencePool::Admission>> SequencePool::Admit() {
  std::lock_guard lock(mu_);
  if (admitted_ >= options_.parallel + options_.queue) {
    return absl::UnavailableError(Cat("the server is busy: ", running_, " requests generating and ",
                                      admitted_ - running_, " waiting (--parallel ", options_.parallel,
                                      ", --queue ", options_.queue, "); retry later"));
  }
  ++admitted_;
  return std::make_unique<Admission>(this);
}

SequencePool::Load SequencePool::load() const {
  std::lock_guard lock(mu_);
  return Load{running_, admitted_ - running_, options_.parallel, options_.queue};
}

void SequencePool::AcquireTurn() {
  std::unique_lock lock(turn_mu_);
  const uint64_t ticket = next_ticket_++;
  turn_cv_.wait(lock, [&] { return serving_ == ticket; });
}

void SequencePool::ReleaseTurn() {
  std::lock_guard lock(turn_mu_);
  ++serving_;
  turn_cv_.notify_all();
}

absl::StatusOr<std::vector<int32_t>> SequencePool::Run(const Admission& admission, const Job& job,
                                                       SpeculativeStats* stats) {
  int index;
  {
    std::unique_lock lock(mu_);
    slot_freed_.wait(lock, [&] { return !free_slots_.empty(); });
    index = free_slots_.back();
    free_slots_.pop_back();
    ++running_;
  }
  absl::StatusOr<std::vector<int32_t>> generated =
      interleave_ ? RunShared(slots_[index], job, stats) : RunAlone(job, stats);
  {
    std::lock_guard lock(mu_);
    free_slots_.push_back(index);
    --running_;
  }
  slot_freed_.notify_one();
  return generated;
}

absl::StatusOr<std::vector<int32_t>> SequencePool::RunShared(Slot& slot, const Job& job, SpeculativeStats* stats) {
  SpeculativeOptions options = job.options;
  options.keep_cache = false;  // a slot serves many requests: each starts from an empty cache
  options.stop = [&]() {
    // Away from the models while it sends its text: no pass waits for it meanwhile. A job with nothing
    // to do between steps (the benchmark's) stays in: leaving would let the others' passes run
    // without it each time, one sequence a pass.
    if (!job.between_steps) return false;
    batcher_.Leave();
    const bool stop = job.between_steps && job.between_steps();
    batcher_.Join();
    return stop;
  };
  std::unique_ptr<Proposer> proposer;
  if (slot.draft != nullptr && options.draft_max > 0) {
    proposer = std::make_unique<ModelProposer>(slot.draft.get(), target_->vocab_size(), options.sampling,
                                               options.accept);
  }
  SpeculativeDecoder loop(slot.target.get(), std::move(proposer), options);
  batcher_.Join();
  absl::StatusOr<std::vector<int32_t>> out = loop.Generate(job.prompt, job.sink);
  batcher_.Leave();
  if (out.ok() && stats != nullptr) *stats = loop.stats();
  return out;
}

absl::StatusOr<std::vector<int32_t>> SequencePool::RunAlone(const Job& job, SpeculativeStats* stats) {
  AcquireTurn();
  SpeculativeOptions options = job.options;
  options.keep_cache = false;
  options.stop = [&]() { return job.between_steps && job.between_steps(); };
  absl::StatusOr<std::vector<int32_t>> out = [&]() -> absl::StatusOr<std::vector<int32_t>> {
    ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeLoop> loop, MakeSpeculativeLoop(cuda_, target_, draft_, options));
    ASSIGN_OR_RETURN(std::vector<int32_t> generated, loop->Generate(job.prompt, job.sink));
    if (stats != nullptr) *stats = loop->stats();
    return generated;
  }();
  ReleaseTurn();
  return out;
}

}  // namespace specgen::serve
