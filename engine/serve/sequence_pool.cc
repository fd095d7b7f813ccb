#include "engine/serve/sequence_pool.h"

#include <utility>

#include "engine/core/status_macros.h"
#include "engine/speculative/make_loop.h"

namespace specgen::serve {

SequencePool::Admission::~Admission() {
  std::lock_guard lock(pool_->mu_);
  --pool_->admitted_;
}

SequencePool::SequencePool(CudaBackend* cuda, Transformer* target, Transformer* draft,
                           const PoolOptions& options)
    : cuda_(cuda), target_(target), draft_(draft), options_(options), interleave_(cuda == nullptr) {}

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
    // Interleaved sequences need caches of their own; one at a time, the models' own suffice.
    if (!pool->interleave_) continue;
    Slot& s = pool->slots_[i];
    auto make = [](Transformer& m) -> absl::StatusOr<std::unique_ptr<KvCache>> {
      ASSIGN_OR_RETURN(KvCache c, KvCache::Create(m.backend(), m.spec().n_layers, m.max_context(),
                                                  m.spec().kv_dim(), m.kv_cache().dtype()));
      return std::make_unique<KvCache>(std::move(c));
    };
    ASSIGN_OR_RETURN(s.target_cache, make(*target));
    if (draft != nullptr) {
      ASSIGN_OR_RETURN(s.draft_cache, make(*draft));
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

void SequencePool::SwapCaches(Slot& slot) {
  std::swap(target_->kv_cache(), *slot.target_cache);
  if (draft_ != nullptr) std::swap(draft_->kv_cache(), *slot.draft_cache);
}

void SequencePool::AcquireTurn(Slot& slot) {
  std::unique_lock lock(turn_mu_);
  const uint64_t ticket = next_ticket_++;
  turn_cv_.wait(lock, [&] { return serving_ == ticket; });
  if (interleave_) SwapCaches(slot);
}

void SequencePool::ReleaseTurn(Slot& slot) {
  std::lock_guard lock(turn_mu_);
  if (interleave_) SwapCaches(slot);
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
  Slot& slot = slots_[index];
  AcquireTurn(slot);
  SpeculativeOptions options = job.options;
  options.keep_cache = false;  // a slot serves many requests: each starts from an empty cache
  options.stop = [&]() {
    // Interleaved: others step while this one flushes its text and looks at its connection.
    if (interleave_) ReleaseTurn(slot);
    const bool stop = job.between_steps && job.between_steps();
    if (interleave_) AcquireTurn(slot);
    return stop;
  };
  absl::StatusOr<std::vector<int32_t>> generated = [&]() -> absl::StatusOr<std::vector<int32_t>> {
    ASSIGN_OR_RETURN(std::unique_ptr<SpeculativeLoop> loop,
                     MakeSpeculativeLoop(cuda_, target_, draft_, options));
    ASSIGN_OR_RETURN(std::vector<int32_t> out, loop->Generate(job.prompt, job.sink));
    if (stats != nullptr) *stats = loop->stats();
    return out;
  }();
  ReleaseTurn(slot);
  {
    std::lock_guard lock(mu_);
    free_slots_.push_back(index);
    --running_;
  }
  slot_freed_.notify_one();
  return generated;
}

}  // namespace specgen::serve
