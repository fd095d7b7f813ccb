// One placement for every caller (moe/apply_plan.h): for every synth preset, alone and with a draft,
// at several VRAM budgets, the benchmark runner's path (RunRequestFor, then ModelCache::OptionsFor)
// gives the target the TransformerOptions the CLI's path gives it (generate and chat: a RunRequest of
// the flags' model, draft, --draft-max and context with the default --cache-type, then
// moe::TargetOptions): the same KV cache type, expert slots, prompt chunk and streamed dense layers
// with their ring. Budgets are planned from headers alone, so this runs on the CPU.
#include <string>
#include <vector>

#include "bench/runner/model_cache.h"
#include "bench/runner/pairing_config.h"
#include "bench/runner/pairing_run.h"
#include "engine/io/synth.h"
#include "gtest/gtest.h"
#include "moe/apply_plan.h"

namespace specgen::bench {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

// What LoadPair (engine/cli/generation_flags.cc) asks for: the flags' model and draft, --draft-max,
// the context, the --cache-type default.
moe::RunRequest CliRequest(const std::string& target, const std::string& draft, int draft_max, int64_t context) {
  moe::RunRequest r;
  r.target = target;
  if (!draft.empty() && draft_max > 0) r.draft = draft;
  r.draft_max = draft_max;
  r.context = context;
  return r;
}

void ExpectSameOptions(const TransformerOptions& cli, const TransformerOptions& runner, const std::string& what) {
  EXPECT_EQ(cli.max_context, runner.max_context) << what;
  EXPECT_EQ(cli.kv_type, runner.kv_type) << what;
  EXPECT_EQ(cli.expert_cache_slots, runner.expert_cache_slots) << what;
  EXPECT_EQ(cli.prefill_chunk, runner.prefill_chunk) << what;
  EXPECT_EQ(cli.streamed_dense_layers, runner.streamed_dense_layers) << what;
  EXPECT_EQ(cli.dense_ring_layers, runner.dense_ring_layers) << what;
  EXPECT_EQ(cli.streaming == nullptr, runner.streaming == nullptr) << what;
}

TEST(PlacementTest, TheRunnerPlacesEveryPresetAsTheCli) {
  ModelCache cache;  // OptionsFor on the CPU backend: the same options, with no streaming to hand in
  ASSERT_TRUE(cache.UseBackend({"cpu", "", 1}).ok());
  constexpr int64_t kContext = 2048;
  constexpr int kDraftMax = 4;
  int planned = 0, streamed_experts = 0, streamed_dense = 0;
  for (const SynthPresetInfo& preset : SynthPresets()) {
    for (const std::string draft : {std::string(), std::string("synth:qwen3-0.6b:q8_0")}) {
      const std::string target = "synth:" + preset.name + ":q4_k";
      Pairing p;
      p.name = preset.name;
      p.target = target;
      p.draft = draft;
      p.draft_lengths = {{draft.empty() ? 0 : kDraftMax, false}};
      p.context = kContext;
      RunSpec spec;
      spec.pairing = &p;
      spec.length = p.draft_lengths[0];
      // Both plans against one host RAM figure: MemAvailable moves between two calls on a busy machine.
      constexpr size_t kHostRam = 512 * kGiB;
      moe::RunRequest cli_request = CliRequest(target, draft, draft.empty() ? 0 : kDraftMax, kContext);
      cli_request.host_available = kHostRam;
      moe::RunRequest runner_request = RunRequestFor(spec);
      runner_request.host_available = kHostRam;
      for (const size_t budget : {size_t{0}, 1 * kGiB, 2 * kGiB, 4 * kGiB, 8 * kGiB, 24 * kGiB, 80 * kGiB}) {
        const std::string what = target + (draft.empty() ? "" : " + " + draft) + " at " + std::to_string(budget >> 30) +
                                 " GiB";
        const absl::StatusOr<moe::RunPlan> cli_plan = moe::PlanFor(cli_request, budget);
        const absl::StatusOr<moe::RunPlan> runner_plan = moe::PlanFor(runner_request, budget);
        ASSERT_EQ(cli_plan.ok(), runner_plan.ok()) << what << ": " << cli_plan.status() << " / " << runner_plan.status();
        if (!cli_plan.ok()) {  // below the pair's minimum
          EXPECT_EQ(cli_plan.status(), runner_plan.status()) << what;
          continue;
        }
        ++planned;
        streamed_experts += cli_plan->expert_cache_slots >= 0;
        streamed_dense += !cli_plan->streamed_dense_layers.empty();
        const TransformerOptions cli = moe::TargetOptions(cli_request, kContext, *cli_plan, nullptr);
        const TransformerOptions runner = cache.OptionsFor(kContext, *runner_plan);
        ExpectSameOptions(cli, runner, what);
        EXPECT_EQ(runner.kv_type, DType::kF16) << what;  // the CLI's default, never the library's f32
        // And the cache keys the model by all of it, so a model placed otherwise is another model.
        const LmKey key = LmKey::Of(target, kContext, *runner_plan);
        EXPECT_EQ(key.streamed_dense_layers, cli.streamed_dense_layers) << what;
        EXPECT_EQ(key.expert_cache_slots, cli.expert_cache_slots) << what;
      }
    }
  }
  // The budgets reach every kind of placement, or the comparisons above prove less than they say.
  EXPECT_GT(planned, 0);
  EXPECT_GT(streamed_experts, 0);
  EXPECT_GT(streamed_dense, 0);
}

}  // namespace
}  // namespace specgen::bench
