#include "moe/planner.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/core/byte_size.h"
#include "engine/io/synth.h"
#include "moe/expert_cache_tables.h"
#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

ModelBytes Synth(const std::string& path) {
  absl::StatusOr<ModelBytes> b = ReadModelBytes(path);
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

void ExpectConsistent(const Plan& p, const ModelBytes& target, const std::string& what) {
  size_t sum = 0;
  for (size_t b : p.resident_bytes) sum += b;
  EXPECT_EQ(p.resident_total, sum) << what;
  EXPECT_LE(p.resident_total, p.vram_budget) << what;
  EXPECT_GE(p.vram_budget, p.minimum_budget) << what;
  if (p.expert_cache_slots < 0) {
    EXPECT_EQ(p.prefill_chunk, kWorkspaceRows) << what;  // the larger chunk only where experts stream
    EXPECT_EQ(p.resident(ResidentKind::kExpertsResident), target.experts_total()) << what;
    EXPECT_EQ(p.streamed_experts, 0u) << what;
    EXPECT_EQ(p.slot_share, 1.0) << what;
  } else {
    EXPECT_TRUE(p.prefill_chunk == kWorkspaceRows || p.prefill_chunk == kStreamedPrefillRows) << what;
    EXPECT_LT(p.expert_cache_slots, p.total_experts) << what;
    EXPECT_EQ(p.resident(ResidentKind::kExpertSlots), static_cast<size_t>(p.expert_cache_slots) * p.slot_bytes)
        << what;
    EXPECT_EQ(p.streamed_experts, target.experts_total()) << what;
    EXPECT_DOUBLE_EQ(p.slot_share, double(p.expert_cache_slots) / double(p.total_experts)) << what;
    // The cache as the device allocates it (expert_cache_tables.h): each matrix of a slot padded to
    // 256 B, the tables, address tables and staging slot beside the slots, every block rounded to the
    // arena's alignment; and the slots are the most that fit, one more would not.
    EXPECT_EQ(p.slot_bytes, target.slot_bytes()) << what;
    EXPECT_EQ(p.slot_bytes % 256, 0u) << what;
    const int64_t layers = target.n_moe_layers(), experts = target.spec.n_experts;
    auto cache = [&](int64_t s) {
      return ArenaBytes(static_cast<size_t>(s) * p.slot_bytes) +
             ExpertCacheOverheadBytes(layers, experts, s, p.slot_bytes, target.expert_bias_roles);
    };
    const int64_t s = p.expert_cache_slots;
    EXPECT_EQ(p.resident(ResidentKind::kExpertSlots) + p.resident(ResidentKind::kSlotTable), cache(s)) << what;
    // The tables block alone: slot_of for every (layer, expert), owner and stamp per slot, two fetch
    // lists of 1024 and the 48-byte state, each 16-byte aligned, then the block on 256.
    const size_t tables = Align16(static_cast<size_t>(layers * experts) * 4) + 2 * Align16(static_cast<size_t>(s) * 4) +
                          2 * 4096 + 48;
    EXPECT_EQ(ExpertCacheTables(layers, experts, s).bytes, tables) << what;
    if (s + 1 < p.total_experts) {
      EXPECT_GT(p.resident_total - cache(s) + cache(s + 1), p.vram_budget) << what << ": room for another slot";
    }
  }
  size_t biases = 0;
  for (const LayerBytes& l : target.layers) biases += l.expert_biases;
  EXPECT_EQ(p.resident(ResidentKind::kExpertBiases), biases) << what << ": expert biases stay resident";
  size_t streamed_dense = 0;
  for (int l : p.streamed_dense_layers) streamed_dense += target.layers[l].dense_ffn;
  EXPECT_EQ(p.streamed_dense, streamed_dense) << what;
  EXPECT_EQ(p.host_bytes, p.streamed_experts + p.streamed_dense) << what;
  ASSERT_EQ(p.passes.size(), static_cast<size_t>(kMaxPredictedPositions)) << what;
  for (size_t i = 0; i < p.passes.size(); ++i) {
    const PassPrediction& x = p.passes[i];
    EXPECT_EQ(x.n, static_cast<int>(i) + 1);
    EXPECT_DOUBLE_EQ(x.floor_seconds, x.pcie_seconds + x.hbm_seconds);
    EXPECT_DOUBLE_EQ(x.pcie_seconds, x.streamed_bytes / kPcieBytesPerSecond);
    if (i > 0) {
      EXPECT_GE(x.streamed_bytes, p.passes[i - 1].streamed_bytes) << what;
      EXPECT_GE(x.distinct_experts, p.passes[i - 1].distinct_experts) << what;
    }
    if (p.expert_cache_slots < 0 && p.streamed_dense == 0) {
      EXPECT_EQ(x.streamed_bytes, 0.0) << what;
    }
  }
}

// Every preset, plain and quantized, at the minimum, just above it, and 4, 8, 16 and 80 GiB: within
// budget, self-consistent, the same plan twice, and more budget never fewer slots.
TEST(PlannerTest, EveryPresetAtSeveralBudgets) {
  for (const SynthPresetInfo& preset : SynthPresets()) {
    for (const std::string type : {"bf16", "q4_k"}) {
      const std::string path = "synth:" + preset.name + ":" + type;
      const ModelBytes target = Synth(path);
      PlanOptions o;
      o.vram_budget = 1024 * kGiB;
      absl::StatusOr<Plan> probe = MakePlan(target, nullptr, o);
      ASSERT_TRUE(probe.ok()) << path << ": " << probe.status();
      const size_t min = probe->minimum_budget;
      int64_t last_slots = -2;
      size_t last_dense = 0;
      std::vector<size_t> budgets = {min, min + min / 16, 4 * kGiB, 8 * kGiB, 16 * kGiB, 80 * kGiB};
      std::sort(budgets.begin(), budgets.end());
      for (size_t budget : budgets) {
        if (budget < min) continue;
        o.vram_budget = budget;
        const std::string what = path + " at " + FormatBytes(double(budget));
        absl::StatusOr<Plan> a = MakePlan(target, nullptr, o);
        absl::StatusOr<Plan> b = MakePlan(target, nullptr, o);
        ASSERT_TRUE(a.ok()) << what << ": " << a.status();
        ASSERT_TRUE(b.ok());
        EXPECT_EQ(a->resident_bytes, b->resident_bytes) << what;
        EXPECT_EQ(a->expert_cache_slots, b->expert_cache_slots) << what;
        EXPECT_EQ(a->streamed_dense_layers, b->streamed_dense_layers) << what;
        EXPECT_EQ(a->minimum_budget, min) << what;
        ExpectConsistent(*a, target, what);
        const int64_t slots = a->expert_cache_slots < 0 ? INT64_MAX : a->expert_cache_slots;
        EXPECT_GE(slots, last_slots) << what;
        EXPECT_GE(a->resident(ResidentKind::kDenseLayers), last_dense) << what;
        last_slots = slots;
        last_dense = a->resident(ResidentKind::kDenseLayers);
      }
    }
  }
}

TEST(PlannerTest, BelowTheMinimumIsAnErrorStatingIt) {
  const ModelBytes target = Synth("synth:qwen3-30b-a3b:q4_k");
  const ModelBytes draft = Synth("synth:qwen3-0.6b:q8_0");
  PlanOptions o;
  o.vram_budget = 1024 * kGiB;
  o.context = 4096;
  absl::StatusOr<Plan> probe = MakePlan(target, &draft, o);
  ASSERT_TRUE(probe.ok()) << probe.status();
  o.vram_budget = probe->minimum_budget - 1;
  absl::StatusOr<Plan> below = MakePlan(target, &draft, o);
  ASSERT_EQ(below.status().code(), absl::StatusCode::kResourceExhausted) << below.status();
  EXPECT_NE(std::string(below.status().message()).find(std::to_string(probe->minimum_budget) + " B"),
            std::string::npos)
      << below.status();
  o.vram_budget = probe->minimum_budget;
  absl::StatusOr<Plan> at = MakePlan(target, &draft, o);
  ASSERT_TRUE(at.ok()) << at.status();
  // At the minimum the cache holds exactly one pass's union: min(E, (draft_max + 1)·k) slots.
  EXPECT_EQ(at->expert_cache_slots, std::min<int64_t>(128, (o.draft_max + 1) * 8));
}

TEST(PlannerTest, PlacesTheDraftAndBothKvCachesFirst) {
  const ModelBytes target = Synth("synth:qwen3-30b-a3b:q4_k");
  const ModelBytes draft = Synth("synth:qwen3-0.6b:q8_0");
  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  o.context = 2048;
  o.kv_element_bytes = 2;
  absl::StatusOr<Plan> p = MakePlan(target, &draft, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->resident(ResidentKind::kDraft), draft.device_total());
  // K and V of every layer: 2 · layers · kv_dim · context · element bytes.
  EXPECT_EQ(p->resident(ResidentKind::kKvTarget), 2u * 48 * 4 * 128 * 2048 * 2);
  EXPECT_EQ(p->resident(ResidentKind::kKvDraft), 2u * 28 * 8 * 128 * 2048 * 2);
  EXPECT_EQ(p->resident(ResidentKind::kHead) + p->resident(ResidentKind::kEmbedding),
            target.head + target.embedding);
  EXPECT_GT(p->expert_cache_slots, 0);
  // f32 K/V at the same budget leave fewer slots.
  o.kv_element_bytes = 4;
  absl::StatusOr<Plan> wide = MakePlan(target, &draft, o);
  ASSERT_TRUE(wide.ok());
  EXPECT_LT(wide->expert_cache_slots, p->expert_cache_slots);
}

// A target whose experts stream takes prompts in kStreamedPrefillRows-row chunks where the budget has
// room: the extra rows' workspace comes out of the expert slots' room, and only then. Logits take a
// verification pass's rows whatever the chunk (prefill computes the head on its last row alone).
TEST(PlannerTest, AStreamedTargetTakesTheLargerPrefillChunkWhereItFits) {
  const ModelBytes target = Synth("synth:qwen3-30b-a3b:q4_k");
  const ModelBytes draft = Synth("synth:qwen3-0.6b:q8_0");
  const ModelSpec& t = target.spec;
  PlanOptions o;
  o.context = 4096;
  o.vram_budget = 80 * kGiB;
  absl::StatusOr<Plan> resident = MakePlan(target, &draft, o);
  ASSERT_TRUE(resident.ok()) << resident.status();
  ASSERT_EQ(resident->expert_cache_slots, -1);
  EXPECT_EQ(resident->prefill_chunk, kWorkspaceRows);
  const size_t draft_ws = WorkspaceBytes(draft.spec, o.context);
  EXPECT_EQ(resident->resident(ResidentKind::kWorkspace), draft_ws + WorkspaceBytes(t, o.context));

  o.vram_budget = 8 * kGiB;
  absl::StatusOr<Plan> streamed = MakePlan(target, &draft, o);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_GE(streamed->expert_cache_slots, 0);
  EXPECT_EQ(streamed->prefill_chunk, kStreamedPrefillRows);
  EXPECT_EQ(streamed->resident(ResidentKind::kWorkspace),
            draft_ws + WorkspaceBytes(t, o.context, kStreamedPrefillRows));
  // The difference is the extra rows' activations and attention scores, nothing else.
  const size_t row_floats = 4 * t.hidden + t.q_dim() + 2 * t.kv_dim() + 3 * t.n_experts_used * t.expert_ffn_dim +
                            t.n_experts;
  const size_t extra = WorkspaceBytes(t, o.context, kStreamedPrefillRows) - WorkspaceBytes(t, o.context);
  EXPECT_EQ(extra, static_cast<size_t>(kStreamedPrefillRows - kWorkspaceRows) *
                       (row_floats + static_cast<size_t>(t.n_heads) * 4096) * sizeof(float));
  // It costs the slots it displaces: the same budget without it would hold more.
  const size_t slot_room = streamed->resident(ResidentKind::kExpertSlots) + extra;
  EXPECT_LE(extra * kStreamedChunkRoomShare, slot_room + streamed->slot_bytes);

  // At the minimum the room holds one pass's union and no more: the chunk stays kWorkspaceRows.
  o.vram_budget = streamed->minimum_budget;
  absl::StatusOr<Plan> at = MakePlan(target, &draft, o);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->prefill_chunk, kWorkspaceRows);
  EXPECT_EQ(at->resident(ResidentKind::kWorkspace), resident->resident(ResidentKind::kWorkspace));

  // Logits: a verification pass's rows, twice (the output and the processed distributions).
  EXPECT_EQ(WorkspaceBytes(t, 1, 1) - (row_floats + t.n_heads) * sizeof(float) - kCublasWorkspaceBytes -
                kStagingRingBytes,
            static_cast<size_t>(kWorkspaceLogitRows * t.vocab_size) * sizeof(float));
}

TEST(PlannerTest, HostRamTooSmallForTheStreamedPartIsAnError) {
  const ModelBytes target = Synth("synth:qwen3-30b-a3b:q4_k");
  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  absl::StatusOr<Plan> p = MakePlan(target, nullptr, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_GT(p->host_bytes, 0u);
  o.host_available = static_cast<double>(p->host_bytes) - 1;
  absl::StatusOr<Plan> small = MakePlan(target, nullptr, o);
  ASSERT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted) << small.status();
  EXPECT_NE(std::string(small.status().message()).find("host RAM"), std::string::npos);
  EXPECT_NE(std::string(small.status().message()).find(std::to_string(p->host_bytes) + " B"), std::string::npos);
  o.host_available = static_cast<double>(p->host_bytes);
  EXPECT_TRUE(MakePlan(target, nullptr, o).ok());
  // Nothing streams at a budget that holds everything: no host RAM needed.
  o.vram_budget = 80 * kGiB;
  o.host_available = 1;
  absl::StatusOr<Plan> all = MakePlan(target, nullptr, o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->expert_cache_slots, -1);
  EXPECT_EQ(all->host_bytes, 0u);
}

TEST(PlannerTest, DenseLayersStreamInLayerOrderThroughARing) {
  const ModelBytes target = Synth("synth:qwen3-1.7b:bf16");
  PlanOptions o;
  o.vram_budget = 1024 * kGiB;
  absl::StatusOr<Plan> probe = MakePlan(target, nullptr, o);
  ASSERT_TRUE(probe.ok());
  EXPECT_TRUE(probe->streamed_dense_layers.empty());
  EXPECT_EQ(probe->dense_ring_layers, 0) << "no ring when every dense layer is resident";
  o.vram_budget = probe->minimum_budget + 3 * target.layers[0].dense_ffn + target.layers[0].dense_ffn / 2;
  absl::StatusOr<Plan> p = MakePlan(target, nullptr, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->resident(ResidentKind::kDenseRing), kDenseRingLayers * target.layers[0].dense_ffn);
  EXPECT_EQ(p->dense_ring_layers, kDenseRingLayers);
  EXPECT_EQ(p->resident(ResidentKind::kDenseLayers), 3 * target.layers[0].dense_ffn);
  ASSERT_EQ(p->streamed_dense_layers.size(), target.layers.size() - 3);
  for (size_t i = 0; i < p->streamed_dense_layers.size(); ++i) EXPECT_EQ(p->streamed_dense_layers[i], int(i) + 3);
  for (const PassPrediction& x : p->passes) EXPECT_EQ(x.streamed_bytes, double(p->streamed_dense));
}

TEST(PlannerTest, BadOptionsAreErrors) {
  const ModelBytes target = Synth("synth:tiny-moe");
  PlanOptions o;
  o.vram_budget = 0;
  EXPECT_EQ(MakePlan(target, nullptr, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.vram_budget = kGiB;
  o.draft_max = -1;
  EXPECT_EQ(MakePlan(target, nullptr, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.draft_max = 4;
  o.kv_element_bytes = 0;
  EXPECT_EQ(MakePlan(target, nullptr, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.kv_element_bytes = 2;
  o.context = -5;
  EXPECT_EQ(MakePlan(target, nullptr, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// The closed form against enumeration of every choice of n tokens, each a k-subset of E.
TEST(PlannerTest, ExpectedDistinctExpertsMatchesEnumeration) {
  for (auto [E, k] : std::vector<std::pair<int, int>>{{6, 2}, {5, 3}, {7, 1}}) {
    std::vector<unsigned> subsets;
    for (unsigned m = 0; m < (1u << E); ++m) {
      if (__builtin_popcount(m) == k) subsets.push_back(m);
    }
    for (int n = 1; n <= 3; ++n) {
      double sum = 0, count = 0;
      std::vector<size_t> idx(n, 0);
      while (true) {
        unsigned u = 0;
        for (size_t i : idx) u |= subsets[i];
        sum += __builtin_popcount(u);
        ++count;
        int j = 0;
        while (j < n && ++idx[j] == subsets.size()) idx[j++] = 0;
        if (j == n) break;
      }
      EXPECT_NEAR(ExpectedDistinctExperts(E, k, n), sum / count, 1e-12) << E << " " << k << " " << n;
    }
  }
  // Qwen3-30B-A3B (E = 128, top-8): 8 for one token, about 29 for 4 (docs/design.md §3.2).
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(128, 8, 1), 8.0);
  EXPECT_NEAR(ExpectedDistinctExperts(128, 8, 4), 29.0, 0.5);
}

// A pass's predicted bytes follow the model stated in planner.cc: misses × expert bytes per MoE layer.
TEST(PlannerTest, PredictionFollowsTheUniformModel) {
  const ModelBytes target = Synth("synth:qwen3-30b-a3b:q4_k");
  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  absl::StatusOr<Plan> p = MakePlan(target, nullptr, o);
  ASSERT_TRUE(p.ok());
  const double per_layer = double(p->expert_cache_slots) / 48.0;
  for (const PassPrediction& x : p->passes) {
    const double distinct = ExpectedDistinctExperts(128, 8, x.n);
    EXPECT_DOUBLE_EQ(x.distinct_experts, distinct);
    EXPECT_NEAR(x.missed_experts, distinct * (1 - per_layer / 128.0), 1e-9);
    EXPECT_NEAR(x.streamed_bytes, x.missed_experts * 48 * double(target.layers[0].expert), 1.0);
  }
}

// Packed types count their blocks (MXFP4 too: model_bytes.h); types the GPU does not keep packed count
// as bf16.
TEST(PlannerTest, DeviceBytesFollowTheGpuDtype) {
  EXPECT_EQ(DeviceDType(DType::kQ4_K), DType::kQ4_K);
  EXPECT_EQ(DeviceDType(DType::kQ6_K), DType::kQ6_K);
  EXPECT_EQ(DeviceDType(DType::kQ8_0), DType::kQ8_0);
  EXPECT_EQ(DeviceDType(DType::kQ5_0), DType::kBF16);
  EXPECT_EQ(DeviceDType(DType::kQ2_K), DType::kBF16);
  EXPECT_EQ(DeviceDType(DType::kF32), DType::kF32);
  EXPECT_EQ(DeviceDType(DType::kMXFP4), DType::kMXFP4);
  // A synth model's stored bytes are what SynthWeights would allocate.
  for (const std::string type : {"f32", "bf16", "q4_k", "q8_0"}) {
    const ModelBytes b = Synth("synth:olmoe-1b-7b:" + type);
    absl::StatusOr<ModelSpec> spec = SynthSpec("olmoe-1b-7b");
    ASSERT_TRUE(spec.ok());
    absl::StatusOr<DType> t = ParseDType(type);
    absl::StatusOr<size_t> expect = SynthBytes(*spec, *t);
    ASSERT_TRUE(expect.ok());
    EXPECT_EQ(b.stored_total, *expect) << type;
    EXPECT_EQ(b.device_total(), *expect) << type;  // all four are kept as stored on the GPU
  }
  // One Q4_K expert of Qwen3-30B-A3B: gate and up [768, 2048], down [2048, 768]: 144 bytes a 256-block.
  EXPECT_EQ(Synth("synth:qwen3-30b-a3b:q4_k").largest_expert(), 3u * 768 * 2048 / 256 * 144);
}

// gpt-oss ships its experts in MXFP4: 32 weights in 17 bytes (an E8M0 scale and 16 bytes of E2M1),
// 4.25 bits a weight. gpt-oss-20b as published (openai/gpt-oss-20b: MXFP4 experts, every other
// tensor bf16) is 12.8 GiB by its shapes; the planner must count it so, not with its experts widened
// to bf16 (which would make it 39 GiB), and its speed prediction must stream MXFP4-sized experts.
TEST(PlannerTest, GptOssMxfp4ExpertsPlanAtTheirPublishedSize) {
  absl::StatusOr<ModelSpec> spec = SynthSpec("gpt-oss-20b");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->hidden, 2880);
  ASSERT_EQ(spec->n_layers, 24);
  ASSERT_EQ(spec->n_experts, 32);
  std::vector<TensorEntry> published;
  for (const ExpectedTensor& e : ExpectedTensors(*spec)) {
    const bool expert_matrix =
        e.key.role == Role::kExpertGate || e.key.role == Role::kExpertUp || e.key.role == Role::kExpertDown;
    published.push_back({e.key, expert_matrix ? DType::kMXFP4 : DType::kBF16, e.shape});
  }
  absl::StatusOr<ModelBytes> b = SumModelBytes(*spec, published, "gpt-oss-20b (published)");
  ASSERT_TRUE(b.ok()) << b.status();
  // One expert: gate, up and down [2880, 2880] each in MXFP4 (2880 / 32 blocks of 17 bytes a row);
  // its three bf16 bias vectors of 2880 are counted apart (resident: ExpertBiasesStayResident).
  const size_t expert = 3 * (2880u * (2880 / 32) * 17);
  EXPECT_EQ(b->largest_expert(), expert);
  EXPECT_EQ(b->experts_total(), 24u * 32 * expert);  // 9.47 GiB
  // Device and stored bytes agree (nothing widened); the whole model is 12-13 GiB as published.
  EXPECT_EQ(b->device_total(), b->stored_total);
  EXPECT_GT(b->device_total(), 12 * kGiB);
  EXPECT_LT(b->device_total(), 13 * kGiB);

  // Under an 8 GiB budget the experts stream: the host arena holds them at MXFP4 size, and a pass's
  // streamed bytes are its missed experts at that size.
  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  absl::StatusOr<Plan> p = MakePlan(*b, nullptr, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_GE(p->expert_cache_slots, 0);
  ExpectConsistent(*p, *b, "gpt-oss-20b at 8 GiB");
  EXPECT_EQ(p->streamed_experts, b->experts_total());
  for (const PassPrediction& x : p->passes) {
    EXPECT_NEAR(x.streamed_bytes, x.missed_experts * 24 * double(expert), 1.0) << x.n;
  }

  // synth writes the same experts (MXFP4 under a quantized type), so `specgen plan` on
  // synth:gpt-oss-20b:q8_0 counts the same expert bytes (its biases are f32 there: 4 bytes each).
  const ModelBytes synth = Synth("synth:gpt-oss-20b:q8_0");
  EXPECT_EQ(synth.experts_total(), size_t{24} * 32 * (3 * (2880u * (2880 / 32) * 17)));
  EXPECT_EQ(synth.layers[0].expert_biases, size_t{32} * 3 * 2880 * 4);
  // gpt-oss-120b: 36 layers of 128 such experts, 56.7 GiB of MXFP4 experts; about 59 GiB in all
  // ("~63 GB in every GGUF").
  const ModelBytes big = Synth("synth:gpt-oss-120b:q8_0");
  EXPECT_GT(big.device_total(), 58 * kGiB);
  EXPECT_LT(big.device_total(), 61 * kGiB);
}

// gpt-oss's expert biases (E × (2F + D) values a layer) stay resident when the experts stream: the
// Transformer uploads them and the routed experts' tables point at them. So they are neither in an
// expert's streamed bytes, nor in a cache slot, nor in the host arena, but in the resident total,
// and the streamed layers' address tables carry one pointer more an expert for each bias role.
TEST(PlannerTest, ExpertBiasesStayResident) {
  const ModelBytes g = Synth("synth:gpt-oss-20b:q8_0");
  const size_t mxfp4 = 2880u * (2880 / 32) * 17;  // one [2880, 2880] MXFP4 matrix
  const size_t biases = size_t{32} * (2880 + 2880 + 2880) * 4;  // f32 gate, up (F) and down (D) of 32 experts
  ASSERT_EQ(g.n_moe_layers(), 24);
  EXPECT_EQ(g.expert_bias_roles, 3);
  for (const LayerBytes& l : g.layers) {
    EXPECT_EQ(l.expert, 3 * mxfp4);
    EXPECT_EQ(l.expert_biases, biases);
    EXPECT_EQ(l.expert_slot, 3 * ((mxfp4 + 255) / 256 * 256)) << "a slot holds the matrices only";
  }
  size_t rest = g.embedding + g.head;
  for (const LayerBytes& l : g.layers) rest += l.norms + l.attention + l.router + l.dense_ffn + l.shared_experts;
  EXPECT_EQ(g.device_total(), rest + g.experts_total() + 24 * biases);

  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  absl::StatusOr<Plan> p = MakePlan(g, nullptr, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_GE(p->expert_cache_slots, 0);
  ExpectConsistent(*p, g, "synth:gpt-oss-20b:q8_0 at 8 GiB");
  EXPECT_EQ(p->resident(ResidentKind::kExpertBiases), 24 * biases);
  EXPECT_EQ(p->streamed_experts, size_t{24} * 32 * 3 * mxfp4);
  EXPECT_EQ(p->host_bytes, p->streamed_experts + p->streamed_dense);
  // The address tables: 3 matrix and 3 bias pointers an expert, 32 experts, a 256-byte block a layer.
  EXPECT_EQ(ExpertCacheOverheadBytes(24, 32, p->expert_cache_slots, p->slot_bytes, 3) -
                ExpertCacheOverheadBytes(24, 32, p->expert_cache_slots, p->slot_bytes, 0),
            24 * (ArenaBytes(48 * 32) - ArenaBytes(24 * 32)));

  // Resident experts: the biases still count once, beside the experts.
  o.vram_budget = 80 * kGiB;
  p = MakePlan(g, nullptr, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_LT(p->expert_cache_slots, 0);
  EXPECT_EQ(p->resident(ResidentKind::kExpertBiases), 24 * biases);
  EXPECT_EQ(p->resident(ResidentKind::kExpertsResident), g.experts_total());

  // A model without expert biases has none to count, and its address tables are the three pointers.
  const ModelBytes q = Synth("synth:tiny-moe");
  EXPECT_EQ(q.expert_bias_roles, 0);
  for (const LayerBytes& l : q.layers) EXPECT_EQ(l.expert_biases, 0u);
}

TEST(PlannerTest, BadModelPathsAreErrors) {
  EXPECT_FALSE(ReadModelBytes("synth:no-such-preset").ok());
  EXPECT_FALSE(ReadModelBytes("synth:tiny-moe:q9_9").ok());
  EXPECT_FALSE(ReadModelBytes("/nonexistent/model.gguf").ok());
}

}  // namespace
}  // namespace specgen::moe
