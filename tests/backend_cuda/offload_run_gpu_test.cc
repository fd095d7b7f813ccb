// What an offloaded run does on the GPU against what the planner and the CPU promise (label gpu;
// skips without a device):
//  - The plan's resident bytes are what loading allocates: the bundled pair under a budget between
//    the pair's minimum and what holds every expert, loaded with the planner's slots into an arena of
//    exactly that budget. Weights and KV caches by kind exactly; the arena's growth equal to the
//    plan's kinds plus the terms the plan leaves out (enumerated below), up to each allocation's
//    alignment padding; and a generation whose prompt takes a prefill chunk and host-routed passes
//    runs inside the budget.
//  - Sampling per seed gives the same tokens with and without streaming (coupled, and rejection at a
//    fixed draft length): a streamed expert is the resident bytes, so every logit and draw is the same.
//  - Prefill's last-row head equals the all-rows pass's last row bit for bit where the head runs
//    through the batch-invariant GEMV (passes of up to 16 rows); past 16 rows the all-rows pass
//    multiplies bf16 and packed heads with cuBLAS on bf16-rounded activations, so only the greedy
//    token is checked there (docs/design.md §12, Prefill). No product path reads such a row: the
//    loops feed the prompt without logits.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "moe/planner.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "gtest/gtest.h"
#include "kernels/expert_cache.cuh"
#include "nlohmann/json.hpp"
#include "tests/common/gpu_test_env.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

std::shared_ptr<const LoadedModel> Load(const std::string& path) {
  auto m = LoadModel(path);
  EXPECT_TRUE(m.ok()) << path << ": " << m.status();
  return m.ok() ? std::shared_ptr<const LoadedModel>(std::move(m).value()) : nullptr;
}

std::vector<int32_t> Ids(int64_t n, int64_t vocab, int salt = 0) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((131 * i + 17 + 7 * salt) % vocab);
  return ids;
}

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

size_t KvDeviceBytes(const Transformer& lm) {
  const KvCache& c = lm.kv_cache();
  size_t bytes = 0;
  for (int64_t l = 0; l < c.n_layers(); ++l) {
    for (const Buffer* b : {&c.k(l), &c.v(l)}) {
      bytes += static_cast<size_t>(b->capacity_rows() * b->cols()) * static_cast<size_t>(Info(b->dtype()).block_bytes);
    }
  }
  return bytes;
}

size_t Sum(const std::map<DType, size_t>& by_dtype) {
  size_t s = 0;
  for (const auto& [dtype, bytes] : by_dtype) s += bytes;
  return s;
}

struct BundledPair {
  std::filesystem::path target, draft;
  bool present() const { return std::filesystem::exists(target) && std::filesystem::exists(draft); }
};
BundledPair Pair() {
  const auto models = testing::SourceDir() / "models";
  return {models / "tiny-target", models / "tiny-draft"};
}

constexpr int64_t kContext = 256;
constexpr int kDraft = 3;

TEST(OffloadRun, PlannedResidentBytesAreWhatLoadingAllocates) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const BundledPair pair = Pair();
  if (!pair.present()) GTEST_SKIP() << "bundled pair not present";
  auto tb = moe::ReadModelBytes(pair.target.string());
  auto db = moe::ReadModelBytes(pair.draft.string());
  ASSERT_TRUE(tb.ok() && db.ok()) << tb.status() << db.status();
  moe::PlanOptions po;
  po.context = kContext;
  po.draft_max = kDraft;
  po.kv_element_bytes = 2;  // f16, as the Transformers below
  po.vram_budget = size_t{1} << 30;
  auto probe = moe::MakePlan(*tb, &*db, po);
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_LT(probe->minimum_budget, probe->resident_total) << "the bundled target's experts cannot stream";
  po.vram_budget = (probe->minimum_budget + probe->resident_total) / 2;
  auto plan = moe::MakePlan(*tb, &*db, po);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->expert_cache_slots, 0);
  using K = moe::ResidentKind;

  // The arena is the budget, as the CLI makes it.
  auto be = testing::TestCudaBackend(plan->vram_budget);
  ASSERT_NE(be, nullptr);
  DeviceArena& arena = be->arena();
  auto target_model = Load(pair.target.string());
  auto draft_model = Load(pair.draft.string());
  ASSERT_TRUE(target_model && draft_model);

  size_t used = arena.used(), blocks = arena.blocks();
  TransformerOptions o;
  o.max_context = kContext;
  o.kv_type = DType::kF16;
  auto draft = Transformer::Create(draft_model, be.get(), o);
  ASSERT_TRUE(draft.ok()) << draft.status();
  const size_t draft_used = arena.used() - used, draft_blocks = arena.blocks() - blocks;
  EXPECT_EQ(Sum((*draft)->resident_bytes()), plan->resident(K::kDraft)) << "draft weights";
  EXPECT_EQ(KvDeviceBytes(**draft), plan->resident(K::kKvDraft)) << "draft KV cache";
  // Left out of the plan: a resident MoE layer's expert address tables (three pointers an expert).
  const ModelSpec& ds = draft_model->spec;
  const size_t draft_tables =
      3 * sizeof(void*) * static_cast<size_t>(ds.n_experts) *
      static_cast<size_t>(std::count(ds.layer_is_moe.begin(), ds.layer_is_moe.end(), true));
  const size_t draft_expected = plan->resident(K::kDraft) + plan->resident(K::kKvDraft) + draft_tables;
  EXPECT_GE(draft_used, draft_expected);
  EXPECT_LE(draft_used, draft_expected + (DeviceArena::kAlignment - 1) * draft_blocks);

  used = arena.used(), blocks = arena.blocks();
  o.expert_cache_slots = plan->expert_cache_slots;
  o.prefill_chunk = plan->prefill_chunk;
  auto target = Transformer::Create(target_model, be.get(), o);
  ASSERT_TRUE(target.ok()) << target.status();
  const size_t target_used = arena.used() - used, target_blocks = arena.blocks() - blocks;
  EXPECT_EQ(Sum((*target)->resident_bytes()),
            plan->resident(K::kEmbedding) + plan->resident(K::kHead) + plan->resident(K::kNorms) +
                plan->resident(K::kRouters) + plan->resident(K::kAttention) + plan->resident(K::kDenseLayers))
      << "target weights but the experts";
  EXPECT_EQ(KvDeviceBytes(**target), plan->resident(K::kKvTarget)) << "target KV cache";
  auto stats = (*target)->expert_stream_stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->slots, plan->expert_cache_slots);
  // A slot holds the largest expert with each of gate, up and down starting on a 256-byte boundary
  // (moe/expert_layout.h); the plan counts the three unpadded.
  EXPECT_GE(stats->slot_bytes, plan->slot_bytes);
  EXPECT_LT(stats->slot_bytes, plan->slot_bytes + 3 * 256);
  // Left out of the plan, or counted otherwise: the slots' padding; the cache's tables as
  // moe/cuda/streamed_experts.cc lays them out (per (layer, expert) its slot and three
  // address-table pointers, per slot its owner and stamp, two fetch lists and the state) where the
  // plan reserves kSlotTableBytesPerExpert an expert.
  const size_t total_experts = static_cast<size_t>(plan->total_experts);
  const size_t slots = static_cast<size_t>(plan->expert_cache_slots);
  const size_t cache_tables = Align16(total_experts * sizeof(int32_t)) + 2 * Align16(slots * sizeof(int32_t)) +
                              2 * Align16(kernels::kExpertCacheMaxExperts * sizeof(int32_t)) +
                              Align16(sizeof(kernels::ExpertCacheState));
  const size_t address_tables = 3 * sizeof(void*) * total_experts;
  const size_t target_expected = plan->resident(K::kKvTarget) + plan->resident(K::kEmbedding) +
                                 plan->resident(K::kHead) + plan->resident(K::kNorms) +
                                 plan->resident(K::kRouters) + plan->resident(K::kAttention) +
                                 plan->resident(K::kDenseLayers) + slots * stats->slot_bytes + cache_tables +
                                 address_tables;
  EXPECT_GE(target_used, target_expected);
  EXPECT_LE(target_used, target_expected + (DeviceArena::kAlignment - 1) * target_blocks);
  // How far the plan's own table term is from the tables' bytes (reported: a planner constant to
  // revisit if it is far off).
  std::printf("plan slot table %zu B, device tables %zu B (cache) + %zu B (addresses); slots %zu x %zu B "
              "(plan %zu B); draft %zu B, target %zu B over %zu + %zu blocks\n",
              plan->resident(K::kSlotTable), cache_tables, address_tables, slots, stats->slot_bytes,
              plan->slot_bytes, draft_used, target_used, draft_blocks, target_blocks);

  // A generation inside the budget: a prompt of more than 16 positions (host-routed, one staging
  // buffer), then speculative steps whose passes route on the device.
  const SpeculativeOptions so =
      testing::MakeSpeculativeOptions(SamplingParams::Greedy(), kDraft, false, AcceptMode::kRejection, 24);
  auto dec = DeviceSpeculativeDecoder::Create(be.get(), target->get(), draft->get(), so, {});
  ASSERT_TRUE(dec.ok()) << dec.status();
  auto out = (*dec)->Generate(Ids(40, target_model->spec.vocab_size));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), 24u);
  EXPECT_LE(arena.peak(), plan->vram_budget);
  std::printf("budget %zu B, plan %zu B, arena peak %zu B\n", plan->vram_budget, plan->resident_total, arena.peak());
}

// Per seed, the same tokens whether the target's experts stream or not: coupled acceptance (the
// adaptive length cannot change its text) and rejection at a fixed length.
TEST(OffloadRun, SampledTokensPerSeedAreTheSameWithAndWithoutStreaming) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const BundledPair pair = Pair();
  if (!pair.present()) GTEST_SKIP() << "bundled pair not present";
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto target_model = Load(pair.target.string());
  auto draft_model = Load(pair.draft.string());
  ASSERT_TRUE(target_model && draft_model);
  TransformerOptions o;
  o.max_context = kContext;
  auto resident = Transformer::Create(target_model, be.get(), o);
  auto draft = Transformer::Create(draft_model, be.get(), o);
  ASSERT_TRUE(resident.ok() && draft.ok());
  // One pass's union fits ((kDraft + 1) · k slots: every pass routes on the device), fewer than the
  // model's experts: the cache evicts.
  o.expert_cache_slots = (kDraft + 1) * target_model->spec.n_experts_used;
  auto streamed = Transformer::Create(target_model, be.get(), o);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_LT(o.expert_cache_slots, target_model->spec.n_experts * target_model->spec.n_layers);
  const auto json = nlohmann::json::parse(std::ifstream(Pair().target.parent_path() / "pair_prompts.json"));
  auto prompts = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
  prompts.resize(std::min<size_t>(prompts.size(), 2));
  auto run = [&](Transformer* target, AcceptMode mode, bool adaptive, uint64_t seed) {
    SamplingParams sampling = SamplingParams::Plain(0.8f, seed);
    const SpeculativeOptions so = testing::MakeSpeculativeOptions(sampling, kDraft, adaptive, mode, 32);
    auto dec = DeviceSpeculativeDecoder::Create(be.get(), target, draft->get(), so, {});
    EXPECT_TRUE(dec.ok()) << dec.status();
    std::vector<int32_t> out;
    if (!dec.ok()) return out;
    for (const auto& p : prompts) {
      auto got = (*dec)->Generate(p);
      EXPECT_TRUE(got.ok()) << got.status();
      if (got.ok()) out.insert(out.end(), got->begin(), got->end());
    }
    return out;
  };
  for (const uint64_t seed : {1u, 2u, 3u}) {
    for (const auto& [mode, adaptive] : {std::pair{AcceptMode::kCoupled, true}, std::pair{AcceptMode::kRejection, false}}) {
      const auto want = run(resident->get(), mode, adaptive, seed);
      ASSERT_FALSE(want.empty());
      EXPECT_EQ(run(streamed->get(), mode, adaptive, seed), want)
          << std::string(AcceptModeName(mode)) << ", seed " << seed;
    }
  }
  auto s = (*streamed)->expert_stream_stats();
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->misses, 0) << "nothing streamed";
  EXPECT_GT(s->evictions, 0) << "the cache never evicted";
}

// The head on the last row only, on the GPU, against the all-rows pass.
TEST(OffloadRun, LastRowHeadEqualsTheAllRowsPassOnTheGpu) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  for (const std::string path : {"synth:tiny-moe:bf16", "synth:tiny-moe:q8_0"}) {
    auto model = Load(path);
    ASSERT_NE(model, nullptr);
    const int64_t v = model->spec.vocab_size;
    TransformerOptions o;
    o.max_context = 128;
    auto all = Transformer::Create(model, be.get(), o);
    auto last = Transformer::Create(model, be.get(), o);
    ASSERT_TRUE(all.ok() && last.ok());
    // A prefix (so the passes attend to a cache), then passes of n rows.
    const auto prefix = Ids(8, v, 1);
    ASSERT_TRUE((*all)->Feed(prefix).ok());
    ASSERT_TRUE((*last)->Feed(prefix).ok());
    for (const int n : {1, 5, 16, 40}) {
      SCOPED_TRACE(path + ", " + std::to_string(n) + " rows");
      const auto tokens = Ids(n, v, n);
      std::vector<float> rows, one;
      ASSERT_TRUE((*all)->Forward(tokens, &rows).ok());
      ASSERT_TRUE((*last)->ForwardLast(tokens, &one).ok());
      ASSERT_EQ(static_cast<int64_t>(one.size()), v);
      const std::vector<float> want(rows.end() - v, rows.end());
      if (n <= 16) {  // both through the GEMV, whose elements do not depend on the batch
        EXPECT_EQ(std::memcmp(want.data(), one.data(), v * sizeof(float)), 0) << "not bit for bit";
      } else {
        // cuBLAS on bf16-rounded activations in the all-rows pass: the greedy token agrees.
        EXPECT_EQ(std::max_element(want.begin(), want.end()) - want.begin(),
                  std::max_element(one.begin(), one.end()) - one.begin());
      }
      ASSERT_TRUE((*all)->Truncate(8).ok());
      ASSERT_TRUE((*last)->Truncate(8).ok());
    }
  }
}

}  // namespace
}  // namespace specgen
