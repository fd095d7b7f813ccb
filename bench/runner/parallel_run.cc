#include "bench/runner/parallel_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/serve/sequence_pool.h"

namespace specgen::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

absl::StatusOr<ParallelTotals> RunParallel(ModelCache& cache, const RunSpec& spec) {
  const Pairing& p = *spec.pairing;
  const int n = spec.parallel;
  if (n < 1) return InvalidArgument("--parallel ", n, ": must be >= 1");
  ASSIGN_OR_RETURN(PreparedRun run, PrepareRun(cache, spec));
  if (run.ids.empty()) return InvalidArgument("pairing '", p.name, "': no prompts");
  // One trace for every sequence (it is keyed by absolute position, which every sequence walks).
  if (absl::Status st = UseRouting(spec, *run.target->lm, 0); !st.ok()) {
    return InvalidArgument("pairing '", p.name, "', routing ", spec.routing, ": ", st.message());
  }
  const size_t requests = std::max(run.ids.size(), static_cast<size_t>(n));
  serve::PoolOptions pool_options;
  pool_options.parallel = n;
  pool_options.queue = static_cast<int>(requests);  // every client is admitted; at most n generate
  ASSIGN_OR_RETURN(std::unique_ptr<serve::SequencePool> pool,
                   serve::SequencePool::Create(cache.cuda(), run.target->lm.get(),
                                               run.draft != nullptr ? run.draft->lm.get() : nullptr, pool_options));
  ParallelTotals out;
  out.totals.expert_cache_slots = run.expert_cache_slots;
  out.totals.prefill_chunk = run.target->lm->prefill_chunk();
  std::mutex mu;  // out, status
  absl::Status status;
  std::atomic<size_t> next{0};
  // The clients start together, so that the first does not run alone while the others are made.
  std::latch ready(n + 1);
  auto client = [&] {
    ready.arrive_and_wait();
    for (size_t i = next++; i < requests; i = next++) {
      const std::vector<int32_t>& ids = run.ids[i % run.ids.size()];
      absl::StatusOr<std::unique_ptr<serve::SequencePool::Admission>> admission = pool->Admit();
      if (!admission.ok()) {
        std::lock_guard lock(mu);
        status.Update(admission.status());
        return;
      }
      serve::SequencePool::Job job;
      job.prompt = ids;
      job.options = run.options;
      const Clock::time_point t0 = Clock::now();
      double ttft = -1;
      job.sink = [&](std::span<const int32_t> tokens) {
        if (ttft < 0 && !tokens.empty()) ttft = SecondsSince(t0);
      };
      SpeculativeStats stats;
      absl::StatusOr<std::vector<int32_t>> generated = pool->Run(**admission, job, &stats);
      const double seconds = SecondsSince(t0);
      std::lock_guard lock(mu);
      if (!generated.ok()) {
        status.Update(InvalidArgument("pairing '", p.name, "', --parallel ", n, ", prompt ", i % run.ids.size(), ": ",
                                      generated.status().message()));
        return;
      }
      if (stats.stop_reason == StopReason::kContextFull) {
        status.Update(InvalidArgument("pairing '", p.name, "', prompt ", i % run.ids.size(), ": the context of ",
                                      p.context, " filled after ", stats.tokens, " of max_new_tokens ",
                                      p.max_new_tokens, "; raise context or lower max_new_tokens"));
        return;
      }
      out.totals.prompts += 1;
      out.totals.stats += stats;
      out.totals.ttft_seconds += std::max(ttft, 0.0);
      out.sequence_seconds += seconds;
      ++out.requests;
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < n; ++c) clients.emplace_back(client);
  const Clock::time_point start = Clock::now();
  ready.arrive_and_wait();
  for (std::thread& t : clients) t.join();
  out.wall_seconds = SecondsSince(start);
  RETURN_IF_ERROR(status);
  const serve::PassBatcher::Counters c = pool->pass_counters();
  out.shared_passes = c.passes;
  out.shared_pass_sequences = c.sequences;
  return out;
}

}  // namespace specgen::bench
