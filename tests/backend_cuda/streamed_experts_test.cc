// Experts streamed from pinned host memory into the GPU-driven VRAM expert cache (docs/design.md §12,
// moe/cuda/streamed_experts.h). Skips without a device.
//  - The cache decision (kernels/expert_cache.cuh) against moe/expert_cache_model.h on random skewed
//    traces: every slot_of / owner / stamp entry and counter after every access, the layer's address
//    tables pointing at the right slots, and each union expert's slot holding its host bytes.
//  - Streamed equals resident bit for bit: logits of a prefill (host-routed, experts staged), of decode
//    and verify passes of 1..16 positions (GPU-driven cache) and greedy output, on synth tiny-moe, the
//    bundled tiny target and the qwen3moe-dense-layer and mixtral fixtures, at slot counts that force
//    eviction (experts_used, a middle value) and one that holds every expert.
//  - The counters add up, and a repeated pass with every expert cached misses nothing.
//  - The speculative loop with a streamed target: greedy output equals target-only greedy, the
//    verification is replayed from CUDA graphs, and a step still waits for the host once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "moe/cuda/host_arena.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "gtest/gtest.h"
#include "kernels/expert_cache.cuh"
#include "moe/expert_cache_model.h"
#include "nlohmann/json.hpp"
#include "tests/common/gpu_test_env.h"
#include "tests/common/speculative_options.h"
#include "tests/common/streamed_equality.h"
#include "moe/cuda/cuda_streaming.h"

namespace specgen {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

uint8_t PatternByte(int layer, int expert, size_t offset) {
  uint64_t z = (static_cast<uint64_t>(layer) << 40) ^ (static_cast<uint64_t>(expert) << 24) ^ offset;
  z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<uint8_t>(z >> 51);
}

// ---------------------------------------------------------------- the decision kernel vs the model

struct CacheCase {
  int slots;
  uint32_t first_clock;
};

void CheckDecisions(const CacheCase& cc) {
  SCOPED_TRACE("slots " + std::to_string(cc.slots) + ", clock from " + std::to_string(cc.first_clock));
  // Layers of different expert counts and strides (a stride that is not a whole number of the gather's
  // chunks, and one of several chunks).
  const int experts_per_layer = 64, k = 4;
  const std::vector<int> experts = {64, 40, 64};
  const std::vector<size_t> strides = {1280, 4352, 70016};
  const int layers = static_cast<int>(experts.size());
  std::vector<size_t> base(layers);
  size_t total = 0, slot_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    base[l] = total;
    total += experts[l] * strides[l];
    slot_bytes = std::max(slot_bytes, strides[l]);
  }
  auto host = HostArena::Create(total, 4);
  ASSERT_TRUE(host.ok()) << host.status();
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts[l]; ++e) {
      for (size_t o = 0; o < strides[l]; ++o) (*host)->host()[base[l] + e * strides[l] + o] = PatternByte(l, e, o);
    }
  }
  const int keys = layers * experts_per_layer;
  kernels::ExpertCacheTables c;
  CUDA_OK(cudaMalloc(&c.slot_of, keys * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&c.owner, cc.slots * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&c.stamp, cc.slots * sizeof(uint32_t)));
  CUDA_OK(cudaMalloc(&c.fetch_expert, kernels::kExpertCacheMaxExperts * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&c.fetch_slot, kernels::kExpertCacheMaxExperts * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&c.state, sizeof(kernels::ExpertCacheState)));
  CUDA_OK(cudaMalloc(&c.slots, slot_bytes * cc.slots));
  CUDA_OK(cudaMemset(c.slot_of, 0xFF, keys * sizeof(int32_t)));
  CUDA_OK(cudaMemset(c.owner, 0xFF, cc.slots * sizeof(int32_t)));
  CUDA_OK(cudaMemset(c.stamp, 0, cc.slots * sizeof(uint32_t)));
  kernels::ExpertCacheState st0;
  st0.clock = cc.first_clock;
  CUDA_OK(cudaMemcpy(c.state, &st0, sizeof(st0), cudaMemcpyHostToDevice));
  c.slot_bytes = slot_bytes;
  c.n_slots = cc.slots;
  c.experts_per_layer = experts_per_layer;
  std::vector<kernels::ExpertCacheLayer> cl(layers);
  std::vector<const void**> tables(layers);
  for (int l = 0; l < layers; ++l) {
    CUDA_OK(cudaMalloc(&tables[l], 3 * experts[l] * sizeof(void*)));
    cl[l].layer = l;
    cl[l].experts = experts[l];
    cl[l].host = (*host)->device() + base[l];
    cl[l].stride = strides[l];
    cl[l].gate = 0;
    cl[l].up = 256;
    cl[l].down = 512;
    cl[l].gate_table = tables[l];
    cl[l].up_table = tables[l] + experts[l];
    cl[l].down_table = tables[l] + 2 * experts[l];
  }
  int32_t* d_ids = nullptr;
  CUDA_OK(cudaMalloc(&d_ids, 16 * k * sizeof(int32_t)));

  std::vector<int64_t> bytes(strides.begin(), strides.end());
  moe::ExpertCacheModel model(moe::CachePolicy::kLru, layers, experts_per_layer, cc.slots, bytes);
  model.StartClockAt(cc.first_clock);
  std::mt19937 rng(11 + cc.slots);
  int64_t union_sum = 0;
  std::vector<int32_t> slot_of(keys), owner(cc.slots);
  std::vector<uint32_t> stamp(cc.slots);
  std::vector<const void*> tab;
  std::vector<uint8_t> slot(slot_bytes);
  for (int step = 0; step < 300; ++step) {
    const int l = static_cast<int>(rng() % layers);
    const int n = 1 + static_cast<int>(rng() % std::max(1, std::min(16, cc.slots / k)));
    std::vector<int32_t> ids;
    for (int t = 0; t < n; ++t) {
      std::set<int32_t> tok;
      while (static_cast<int>(tok.size()) < k) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        tok.insert(static_cast<int32_t>(experts[l] * u * u));
      }
      ids.insert(ids.end(), tok.begin(), tok.end());
    }
    CUDA_OK(cudaMemcpy(d_ids, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_OK(kernels::LaunchExpertCacheFetch(c, cl[l], d_ids, static_cast<int>(ids.size()), 8, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    auto a = model.Touch(l, ids);
    ASSERT_TRUE(a.ok()) << a.status();
    union_sum += static_cast<int64_t>(a->experts.size());
    CUDA_OK(cudaMemcpy(slot_of.data(), c.slot_of, keys * sizeof(int32_t), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(owner.data(), c.owner, cc.slots * sizeof(int32_t), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(stamp.data(), c.stamp, cc.slots * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    kernels::ExpertCacheState st;
    CUDA_OK(cudaMemcpy(&st, c.state, sizeof(st), cudaMemcpyDeviceToHost));
    for (int key = 0; key < keys; ++key) {
      ASSERT_EQ(slot_of[key], model.slot_of(key / experts_per_layer, key % experts_per_layer))
          << "step " << step << " (layer " << l << ", " << ids.size() << " ids, " << a->fetches.size()
          << " misses): slot of layer " << key / experts_per_layer << " expert " << key % experts_per_layer;
    }
    for (int s = 0; s < cc.slots; ++s) {
      ASSERT_EQ(owner[s], model.owner(s)) << "step " << step << ": owner of slot " << s;
      ASSERT_EQ(stamp[s], model.stamp(s)) << "step " << step << ": stamp of slot " << s;
    }
    ASSERT_EQ(st.clock, model.clock());
    ASSERT_EQ(st.fetches, static_cast<int32_t>(a->fetches.size())) << "step " << step;
    ASSERT_EQ(static_cast<int64_t>(st.hits), model.counters().hits) << "step " << step;
    ASSERT_EQ(static_cast<int64_t>(st.misses), model.counters().misses) << "step " << step;
    ASSERT_EQ(static_cast<int64_t>(st.evictions), model.counters().evictions) << "step " << step;
    ASSERT_EQ(static_cast<int64_t>(st.bytes), model.counters().bytes) << "step " << step;
    tab.resize(3 * experts[l]);
    CUDA_OK(cudaMemcpy(tab.data(), tables[l], tab.size() * sizeof(void*), cudaMemcpyDeviceToHost));
    for (int32_t e : a->experts) {
      const int s = model.slot_of(l, e);
      const char* at = c.slots + static_cast<size_t>(s) * slot_bytes;
      ASSERT_EQ(tab[e], at + 0) << "step " << step << ": gate table of expert " << e;
      ASSERT_EQ(tab[experts[l] + e], at + 256) << "step " << step << ": up table of expert " << e;
      ASSERT_EQ(tab[2 * experts[l] + e], at + 512) << "step " << step << ": down table of expert " << e;
      CUDA_OK(cudaMemcpy(slot.data(), at, strides[l], cudaMemcpyDeviceToHost));
      for (size_t o = 0; o < strides[l]; ++o) {
        ASSERT_EQ(slot[o], PatternByte(l, e, o)) << "step " << step << ": byte " << o << " of layer " << l
                                                 << " expert " << e << " in slot " << s;
      }
    }
  }
  const moe::CacheCounters& m = model.counters();
  EXPECT_EQ(m.hits + m.misses, union_sum);
  std::printf("slots %d: %lld hits, %lld misses, %lld evictions over %lld union experts\n", cc.slots,
              static_cast<long long>(m.hits), static_cast<long long>(m.misses), static_cast<long long>(m.evictions),
              static_cast<long long>(union_sum));
  if (cc.slots < keys) {
    EXPECT_GT(m.evictions, 0) << "the trace should force evictions";
  }
  EXPECT_GT(m.hits, 0);
  for (auto* p : {static_cast<void*>(c.slot_of), static_cast<void*>(c.owner), static_cast<void*>(c.stamp),
                  static_cast<void*>(c.fetch_expert), static_cast<void*>(c.fetch_slot), static_cast<void*>(c.state),
                  static_cast<void*>(c.slots), static_cast<void*>(d_ids)}) {
    cudaFree(p);
  }
  for (auto* t : tables) cudaFree(t);
}

TEST(ExpertCacheKernel, DecisionsMatchTheHostModel) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  // experts_used; a few unions; a middle value; every key has a slot. The clocks start where stamps
  // cross a byte of the radix select (and 2^24), beside slots never used (stamp 0).
  for (const CacheCase& cc : {CacheCase{4, 0}, CacheCase{24, 0}, CacheCase{24, 0x00FFFF80u}, CacheCase{64, 200},
                              CacheCase{200, 0x0000FFF0u}}) {
    CheckDecisions(cc);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------- streamed == resident

using testing::Argmax;
using testing::FirstDifference;
using testing::PassIds;

std::shared_ptr<const LoadedModel> Load(const std::string& path) { return testing::LoadShared(path); }

void CheckStreamedEqualsResident(const char* what, std::shared_ptr<const LoadedModel> model) {
  ASSERT_NE(model, nullptr);
  const ModelSpec& spec = model->spec;
  const int64_t moe_layers = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true);
  ASSERT_GT(moe_layers, 0) << what;
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions ro;
  ro.max_context = 160;
  auto resident = Transformer::Create(model, be.get(), ro);
  ASSERT_TRUE(resident.ok()) << resident.status();
  const int64_t k = spec.n_experts_used, e_all = spec.n_experts * moe_layers, vocab = spec.vocab_size;
  // Whether every MoE layer's experts take the same bytes (one type per role throughout).
  std::set<std::pair<DType, DType>> expert_types;
  for (int l = 0; l < spec.n_layers; ++l) {
    if (!spec.layer_is_moe[l]) continue;
    auto g = model->weights.Get({Role::kExpertGate, l, 0});
    auto d = model->weights.Get({Role::kExpertDown, l, 0});
    ASSERT_TRUE(g.ok() && d.ok()) << what;
    expert_types.insert({g->dtype, d->dtype});
  }
  const bool uniform_experts = expert_types.size() == 1;
  for (int64_t slots : {k, std::max(k + 1, spec.n_experts / 2 + 1), e_all}) {
    SCOPED_TRACE(std::string(what) + ", " + std::to_string(slots) + " slots");
    TransformerOptions so = ro;
    so.expert_cache_slots = slots;
    so.streaming = std::make_shared<CudaWeightStreaming>(be.get());
    size_t progress_total = 0, progress_last = 0;
    so.expert_copy_progress = [&](size_t done, size_t total) {
      EXPECT_GE(done, progress_last);
      progress_last = done;
      progress_total = total;
    };
    auto streamed = Transformer::Create(model, be.get(), so);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_TRUE((*streamed)->streams_experts());
    EXPECT_GT(progress_total, 0u);
    EXPECT_EQ(progress_last, progress_total) << "the progress callback ends at the total";
    Transformer* r = resident->get();
    Transformer* s = streamed->get();
    ASSERT_TRUE(r->Truncate(0).ok());
    // A prefill longer than 16 (routed on the host, experts staged), then verify-sized passes (the
    // GPU-driven cache where the union fits the slots), then greedy decoding.
    const int passes[] = {37, 1, 4, 16, 2, 1, 8, 3, 16, 5, 1};
    testing::ExpectSamePasses(*r, *s, passes);
    if (::testing::Test::HasFatalFailure()) return;
    testing::ExpectSameGreedy(*r, *s, 12);
    auto stats = s->expert_stream_stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    std::printf("%s, %lld slots of %zu bytes (host copy %zu bytes): %lld hits, %lld misses, %lld evictions, "
                "%lld bytes fetched; %lld experts staged (%lld bytes)\n",
                what, static_cast<long long>(stats->slots), stats->slot_bytes, stats->host_bytes,
                static_cast<long long>(stats->hits), static_cast<long long>(stats->misses),
                static_cast<long long>(stats->evictions), static_cast<long long>(stats->fetched_bytes),
                static_cast<long long>(stats->staged), static_cast<long long>(stats->staged_bytes));
    EXPECT_EQ(stats->slots, slots);
    EXPECT_GT(stats->staged, 0) << "the 37-position prefill is routed on the host";
    EXPECT_GT(stats->misses, 0) << "single-position passes use the GPU-driven cache";
    // A fetch copies its layer's expert; with one expert size in every layer that is one slot's bytes,
    // else (per-role types that differ between layers) at most one slot's.
    if (uniform_experts) {
      EXPECT_EQ(stats->fetched_bytes, stats->misses * static_cast<int64_t>(stats->slot_bytes));
    } else {
      EXPECT_LE(stats->fetched_bytes, stats->misses * static_cast<int64_t>(stats->slot_bytes));
      EXPECT_GT(stats->fetched_bytes, stats->misses * static_cast<int64_t>(stats->slot_bytes) / 2);
    }
    EXPECT_LE(stats->evictions, stats->misses);
    if (slots >= e_all) {
      EXPECT_EQ(stats->evictions, 0);
      EXPECT_LE(stats->misses, e_all);
      // The same pass again: every expert is cached, nothing is fetched, every union member is a hit.
      const int64_t len = s->n_past();
      const auto ids = PassIds(len, 4, vocab);
      std::vector<float> l1, l2;
      ASSERT_TRUE(s->Forward(ids, &l1).ok());
      auto mid = s->expert_stream_stats();
      ASSERT_TRUE(s->Truncate(len).ok());
      ASSERT_TRUE(s->Forward(ids, &l2).ok());
      auto after = s->expert_stream_stats();
      ASSERT_TRUE(mid.ok() && after.ok());
      EXPECT_EQ(after->misses, mid->misses) << "a repeated pass with every expert cached fetched something";
      EXPECT_GE(after->hits - mid->hits, moe_layers * k) << "each layer's union has at least k experts";
      EXPECT_LE(after->hits - mid->hits, moe_layers * std::min<int64_t>(4 * k, spec.n_experts));
      EXPECT_EQ(FirstDifference(l1, l2), "");
    } else if (slots == k) {
      EXPECT_GT(stats->evictions, 0) << "experts_used slots must evict";
    }
  }
}

TEST(StreamedExperts, EqualResidentOnSynthTinyMoe) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kBF16, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  CheckStreamedEqualsResident("synth tiny-moe bf16", std::shared_ptr<const LoadedModel>(std::move(w).value()));
  // Quantized files are streamed in the backend's device form (Q8_0 packed): the same bits as their upload.
  auto q = SynthWeights(*spec, DType::kQ8_0, 4);
  ASSERT_TRUE(q.ok()) << q.status();
  CheckStreamedEqualsResident("synth tiny-moe q8_0", std::shared_ptr<const LoadedModel>(std::move(q).value()));
}

// llama.cpp's q4_k_m keeps some layers' ffn_down_exps in Q6_K beside Q4_K gate/up: a layer whose
// roles have different packed types streams too, with the resident bits. Rows of 256 (the K-quants'
// block) on tiny-moe's shape otherwise.
TEST(StreamedExperts, EqualResidentWithMixedPackedTypes) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  spec->hidden = 256;
  spec->expert_ffn_dim = 256;
  spec->ffn_dim = 256;
  spec->n_heads = 4;
  spec->n_kv_heads = 2;
  spec->head_dim = 64;
  auto mix = ParseExportType("q4_k_m");
  ASSERT_TRUE(mix.ok()) << mix.status();
  auto m = SynthWeights(*spec, *mix, 5);
  ASSERT_TRUE(m.ok()) << m.status();
  bool mixed = false;
  for (int l = 0; l < spec->n_layers; ++l) {
    auto g = (*m)->weights.Get({Role::kExpertGate, l, 0});
    auto d = (*m)->weights.Get({Role::kExpertDown, l, 0});
    ASSERT_TRUE(g.ok() && d.ok());
    mixed |= g->dtype != d->dtype;
  }
  ASSERT_TRUE(mixed) << "q4_k_m gave every layer one expert type: the case is not exercised";
  CheckStreamedEqualsResident("synth tiny-moe (D=F=256) q4_k_m", std::shared_ptr<const LoadedModel>(std::move(m).value()));
}

TEST(StreamedExperts, EqualResidentOnTheBundledTarget) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto path = testing::SourceDir() / "models" / "tiny-target";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  CheckStreamedEqualsResident("tiny-target", Load(path.string()));
}

TEST(StreamedExperts, EqualResidentOnFixtures) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (const char* name : {"qwen3moe-dense-layer", "mixtral"}) {
    const auto path = testing::SourceDir() / "tests" / "data" / "models" / name;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
    CheckStreamedEqualsResident(name, Load(path.string()));
  }
}

// The general MoE models stream too (issue 45): gpt-oss's expert biases stay resident and reach both the
// device path's tables (the GPU-driven cache) and the staged experts of the host-routed passes; GLM-4.5's
// sigmoid routing and shared expert run beside its streamed experts. The synth presets in bf16 and
// q8_0 (gpt-oss's experts MXFP4 there, as published), then the fixtures from their HF directories (f32).
TEST(StreamedExperts, EqualResidentOnGeneralMoe) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (const char* preset : {"tiny-gptoss", "tiny-glm4moe"}) {
    for (const DType t : {DType::kBF16, DType::kQ8_0}) {
      auto spec = SynthSpec(preset);
      ASSERT_TRUE(spec.ok()) << spec.status();
      ASSERT_FALSE(RequiredFeatures(*spec).empty()) << preset;
      auto w = SynthWeights(*spec, t, 9);
      ASSERT_TRUE(w.ok()) << w.status();
      const std::string what = std::string("synth ") + preset + " " + std::string(Name(t));
      CheckStreamedEqualsResident(what.c_str(), std::shared_ptr<const LoadedModel>(std::move(w).value()));
      if (HasFatalFailure()) return;
    }
  }
  for (const char* name : {"gptoss-tiny", "glm4moe-tiny"}) {
    const auto path = testing::SourceDir() / "tests" / "data" / "models" / name;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
    CheckStreamedEqualsResident(name, Load(path.string()));
  }
}

// ---------------------------------------------------------------- the speculative loop

TEST(StreamedExperts, SpeculativeGreedyEqualsTargetOnlyWithOneWaitAStep) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto models = testing::SourceDir() / "models";
  if (!std::filesystem::exists(models / "tiny-target") || !std::filesystem::exists(models / "tiny-draft")) {
    GTEST_SKIP() << "bundled pair not present in " << models;
  }
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto target_model = Load((models / "tiny-target").string());
  auto draft_model = Load((models / "tiny-draft").string());
  ASSERT_TRUE(target_model && draft_model);
  TransformerOptions o;
  o.max_context = 256;
  auto resident = Transformer::Create(target_model, be.get(), o);
  auto draft = Transformer::Create(draft_model, be.get(), o);
  ASSERT_TRUE(resident.ok() && draft.ok());
  const auto json = nlohmann::json::parse(std::ifstream(models / "pair_prompts.json"));
  auto prompts = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
  prompts.resize(std::min<size_t>(prompts.size(), 2));
  const int64_t k_used = target_model->spec.n_experts_used;
  // Draft length 3: passes of up to 4 positions, 4 k ids: with that many slots every pass is routed on
  // the device (fewer experts than the model's layers hold, so the cache evicts).
  constexpr int kDraft = 3;
  const int64_t slots = (kDraft + 1) * k_used;
  o.expert_cache_slots = slots;
  o.streaming = std::make_shared<CudaWeightStreaming>(be.get());
  auto streamed = Transformer::Create(target_model, be.get(), o);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_LT(slots, target_model->spec.n_experts * target_model->spec.n_layers);
  auto run = [&](Transformer* target, int k, StepSyncStats* syncs, VerifyPassStats* vstats) {
    return testing::DeviceGreedyTokens(be.get(), target, draft->get(), k, prompts, syncs, vstats);
  };
  const auto plain = run(resident->get(), 0, nullptr, nullptr);
  ASSERT_FALSE(plain.empty());
  StepSyncStats rs, ss;
  VerifyPassStats rv, sv;
  const auto resident_spec = run(resident->get(), kDraft, &rs, &rv);
  EXPECT_EQ(run(streamed->get(), 0, nullptr, nullptr), plain) << "streamed target-only greedy";
  const auto before = (*streamed)->expert_stream_stats();
  ASSERT_TRUE(before.ok());
  const auto streamed_spec = run(streamed->get(), kDraft, &ss, &sv);
  EXPECT_EQ(resident_spec, plain);
  EXPECT_EQ(streamed_spec, plain) << "streamed speculative greedy";
  std::printf("resident: %lld steps, %lld result waits, %lld union reads, %lld other; %lld replays\n",
              static_cast<long long>(rs.steps), static_cast<long long>(rs.step_result),
              static_cast<long long>(rs.expert_union), static_cast<long long>(rs.other),
              static_cast<long long>(rv.graph_replays));
  std::printf("streamed: %lld steps, %lld result waits, %lld union reads, %lld other; %lld replays, %lld eager%s%s\n",
              static_cast<long long>(ss.steps), static_cast<long long>(ss.step_result),
              static_cast<long long>(ss.expert_union), static_cast<long long>(ss.other),
              static_cast<long long>(sv.graph_replays), static_cast<long long>(sv.eager_passes),
              sv.why_not_graph.empty() ? "" : "; why: ", sv.why_not_graph.c_str());
  EXPECT_EQ(ss.step_result, ss.steps);
  EXPECT_EQ(ss.expert_union, rs.expert_union) << "streaming added host reads of the expert union";
  EXPECT_EQ(ss.other, 0);
  EXPECT_EQ(ss.max_non_union_per_step, rs.max_non_union_per_step);
  EXPECT_TRUE(sv.why_not_graph.empty()) << sv.why_not_graph;
  EXPECT_GT(sv.graph_replays, 0) << "the streamed verification should replay from graphs";
  const auto after = (*streamed)->expert_stream_stats();
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->misses, before->misses) << "the verification passes fetched through the cache";
  EXPECT_GT(after->evictions, before->evictions);
  // Draft length 4 with the same slots: passes of 5 positions may route more experts than the slots
  // hold, so the host routes them (eagerly, each expert staged once); the output is still target greedy,
  // and the sizes that fit keep their graphs.
  StepSyncStats s4;
  VerifyPassStats v4;
  EXPECT_EQ(run(streamed->get(), kDraft + 1, &s4, &v4), plain) << "streamed speculative greedy, k = 4";
  std::printf("streamed k=4: %lld steps, %lld union reads, %lld other; %lld replays, %lld eager%s%s\n",
              static_cast<long long>(s4.steps), static_cast<long long>(s4.expert_union),
              static_cast<long long>(s4.other), static_cast<long long>(v4.graph_replays),
              static_cast<long long>(v4.eager_passes), v4.why_not_graph.empty() ? "" : "; why: ",
              v4.why_not_graph.c_str());
  EXPECT_EQ(s4.other, 0);
  EXPECT_GT(v4.eager_passes, 0);
  EXPECT_TRUE(v4.why_not_graph.empty()) << v4.why_not_graph;
}

}  // namespace
}  // namespace specgen
