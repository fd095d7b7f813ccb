// The GPU-resident speculative loop (DeviceSpeculativeDecoder) with the bundled pair (models/
// tiny-target, a Qwen3-MoE with 32 experts top-4, and models/tiny-draft): greedy output equal to
// target-only greedy for k = 1..8 and adaptive k; `coupled` sampling equal to plain sampling per seed;
// and the host waits of every step counted: exactly one (the result copy) plus the MoE layers'
// expert-union reads, which are reported. The greedy and coupled identities also under the tensor-core
// order (CudaBackendOptions::gemv_order; the pair is bf16 with hidden 256, so its attention products
// and the experts' gate/up take it). Skips without a device or without the pair.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "gtest/gtest.h"
#include "kernels/acceptance.cuh"
#include "kernels/scripted_draft.cuh"
#include "nlohmann/json.hpp"
#include "tests/common/gpu_test_env.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

constexpr int kPromptsUsed = 4;
constexpr int64_t kNewTokens = 32;

// An acceptance regime's script in device memory (kernels/scripted_draft.cuh): after `first_position`,
// the target's greedy `continuation`, proposed with probability `a` at every depth.
struct DeviceScriptTable {
  DeviceScriptTable(const std::vector<int32_t>& continuation, int64_t first_position, double a, int32_t vocab) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&tokens), sizeof(int32_t) * std::max<size_t>(continuation.size(), 1)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(tokens, continuation.data(), sizeof(int32_t) * continuation.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&profile), sizeof(double)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(profile, &a, sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
    table.continuation = tokens;
    table.first_position = first_position;
    table.length = static_cast<int64_t>(continuation.size());
    table.profile = profile;
    table.profile_len = 1;
    table.seed = 77;
    table.vocab = vocab;
  }
  ~DeviceScriptTable() {
    cudaFree(tokens);
    cudaFree(profile);
  }
  DeviceScriptTable(const DeviceScriptTable&) = delete;
  DeviceScriptTable& operator=(const DeviceScriptTable&) = delete;

  kernels::ScriptedDraftTable table;
  int32_t* tokens = nullptr;
  double* profile = nullptr;
};

// What a generation with a run-ahead setting gave.
struct AheadRun {
  std::vector<int32_t> out;
  std::vector<std::pair<int, int>> passes;  // (k, accepted)
  DraftDecodeStats d;
  StepSyncStats syncs;
};

// The draft's graph replays of a run ahead of n >= 1 drafts after every guess (`run`) against the guess
// alone (`guess`), the same guesses: each guess adds the decodes of its drafts but the last
// (drafted - guesses), each step that started from them saves the decodes of those it took but the
// last (taken - steps); y's decode is in both. A step takes at least one and at most n.
void RunAheadAccounting(const DraftDecodeStats& guess, const DraftDecodeStats& run, int n, const std::string& what) {
  EXPECT_EQ(guess.run_ahead_drafted, 0) << what;
  EXPECT_EQ(guess.run_ahead_drafts_used, 0) << what;
  EXPECT_EQ(run.run_ahead, guess.run_ahead) << what;
  EXPECT_EQ(run.run_ahead_used, guess.run_ahead_used) << what;
  EXPECT_EQ(run.graph_replays, guess.graph_replays + (run.run_ahead_drafted - run.run_ahead) -
                                   (run.run_ahead_drafts_used - run.run_ahead_used))
      << what;
  EXPECT_GE(run.run_ahead_drafts_used, run.run_ahead_used) << what;
  EXPECT_LE(run.run_ahead_drafts_used, run.run_ahead_used * n) << what;
}

class GpuBundledPair : public ::testing::Test {
 protected:
  // The backend's small-batch reduction order (GpuBundledPairTensorCores: the other one).
  virtual kernels::GemvOrder Order() const { return kernels::GemvOrder::kFma; }
  // Both models' KV cache type (GpuBundledPairF16Cache: f16, the CLI's default).
  virtual DType KvType() const { return DType::kF32; }
  // Both models' weights re-quantized to this type through a GGUF export (kF32: the files as they are).
  virtual DType WeightType() const { return DType::kF32; }

  void SetUp() override {
    SPECGEN_SKIP_WITHOUT_CUDA();
    const auto models = testing::SourceDir() / "models";
    if (!std::filesystem::exists(models / "tiny-target") || !std::filesystem::exists(models / "tiny-draft")) {
      GTEST_SKIP() << "bundled pair not present in " << models;
    }
    backend_ = testing::TestCudaBackend(size_t{1} << 30, Order());
    ASSERT_NE(backend_, nullptr);
    target_ = Load((models / "tiny-target").string());
    draft_ = Load((models / "tiny-draft").string());
    ASSERT_TRUE(target_ && draft_);
    const auto json = nlohmann::json::parse(std::ifstream(models / "pair_prompts.json"));
    prompts_ = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
    if (prompts_.size() > kPromptsUsed) prompts_.resize(kPromptsUsed);
  }
  void TearDown() override {
    target_.reset();
    draft_.reset();
    backend_.reset();
  }

  std::unique_ptr<Transformer> Load(const std::string& path) {
    auto loaded = LoadModel(path);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return nullptr;
    std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
    if (WeightType() != DType::kF32) {
      GgufExportOptions opt;
      opt.dtype = WeightType();
      const std::string gguf = ::testing::TempDir() + "/" + std::filesystem::path(path).filename().string() + "_" +
                               std::string(Name(WeightType())) + ".gguf";
      const absl::Status exported = ExportGguf(model->spec, model->weights, gguf, opt);
      EXPECT_TRUE(exported.ok()) << exported;
      auto quantized = LoadModel(gguf);
      EXPECT_TRUE(quantized.ok()) << quantized.status();
      if (!exported.ok() || !quantized.ok()) return nullptr;
      model = std::move(quantized).value();
    }
    TransformerOptions options;
    options.max_context = 256;
    options.kv_type = KvType();
    auto lm = Transformer::Create(model, backend_.get(), options);
    EXPECT_TRUE(lm.ok()) << lm.status();
    return lm.ok() ? std::move(lm).value() : nullptr;
  }

  std::vector<int32_t> Run(int k, bool adaptive, SamplingParams sampling, AcceptMode mode,
                           const std::vector<int32_t>& prompt, StepSyncStats* syncs = nullptr,
                           SpeculativeStats* stats = nullptr,
                           DraftDecodePath path = DraftDecodePath::kGraph,
                           DraftDecodeStats* draft_stats = nullptr) {
    const SpeculativeOptions o = testing::MakeSpeculativeOptions(sampling, k, adaptive, mode, kNewTokens);
    DeviceLoopHooks hooks;
    hooks.draft.path = path;
    auto dec = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(),
                                                k > 0 ? draft_.get() : nullptr, o, hooks);
    EXPECT_TRUE(dec.ok()) << dec.status();
    if (!dec.ok()) return {};
    auto out = (*dec)->Generate(prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (syncs) *syncs = (*dec)->syncs();
    if (stats) *stats = (*dec)->stats();
    if (draft_stats) *draft_stats = (*dec)->draft_decode_stats();
    return out.ok() ? *out : std::vector<int32_t>{};
  }

  // A generation of the draft against `target` with the given run-ahead (overlap on, graph path) and,
  // where set, `script`; every step waits on the host once.
  AheadRun RunWithAhead(Transformer* target, SpeculativeOptions o, RunAhead run_ahead, int drafts,
                        const DeviceScriptTable* script, const std::vector<int32_t>& prompt) {
    AheadRun r;
    DeviceLoopHooks hooks;
    hooks.draft.run_ahead = run_ahead;
    hooks.draft.run_ahead_drafts = drafts;
    if (script != nullptr) hooks.draft.script = &script->table;
    o.on_pass = [&r](int k, const AcceptResult& a) { r.passes.push_back({k, a.n_accepted}); };
    auto dec = DeviceSpeculativeDecoder::Create(backend_.get(), target, draft_.get(), o, hooks);
    EXPECT_TRUE(dec.ok()) << dec.status();
    if (!dec.ok()) return r;
    auto out = (*dec)->Generate(prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) r.out = *out;
    r.d = (*dec)->draft_decode_stats();
    r.syncs = (*dec)->syncs();
    EXPECT_EQ(r.d.path, DraftDecodePath::kGraph) << r.d.why_not_graph;
    EXPECT_GT(r.syncs.steps, 0);
    EXPECT_EQ(r.syncs.step_result, r.syncs.steps);
    EXPECT_EQ(r.syncs.other, 0);
    EXPECT_EQ(r.syncs.max_non_union_per_step, 1);
    return r;
  }

  // Greedy speculative output for k = 1..8 and adaptive k equals target-only greedy, token for token.
  void CheckGreedyEqualsTargetOnly() {
    const auto greedy = SamplingParams::Greedy();
    for (const auto& prompt : prompts_) {
      const auto plain = Run(0, false, greedy, AcceptMode::kRejection, prompt);
      ASSERT_EQ(plain.size(), static_cast<size_t>(kNewTokens));
      for (int k = 1; k <= 8; ++k) {
        SpeculativeStats stats;
        EXPECT_EQ(Run(k, false, greedy, AcceptMode::kRejection, prompt, nullptr, &stats), plain) << "k=" << k;
        if (k == 4) std::printf("greedy k=4: acceptance %.3f, tau %.2f\n", stats.acceptance_rate(),
                                stats.mean_accepted_length());
      }
      EXPECT_EQ(Run(8, true, greedy, AcceptMode::kRejection, prompt), plain) << "adaptive";
    }
  }

  // `coupled` output for a seed equals plain sampling's (k = 0) with that seed.
  void CheckCoupledEqualsPlainPerSeed() {
    for (uint64_t seed : {1ull, 2ull, 3ull}) {
      for (SamplingParams params : {SamplingParams::Plain(0.8f, seed), [&] {
                                      SamplingParams p;  // temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
                                      p.seed = seed;
                                      return p;
                                    }()}) {
        const auto plain = Run(0, false, params, AcceptMode::kCoupled, prompts_[seed % prompts_.size()]);
        for (int k : {1, 3, 6}) {
          EXPECT_EQ(Run(k, false, params, AcceptMode::kCoupled, prompts_[seed % prompts_.size()]), plain)
              << "seed " << seed << " k " << k << " top_k " << params.top_k;
        }
      }
    }
  }

  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<Transformer> target_, draft_;
  std::vector<std::vector<int32_t>> prompts_;
};

class GpuBundledPairTensorCores : public GpuBundledPair {
 protected:
  kernels::GemvOrder Order() const override { return kernels::GemvOrder::kTensorCores; }
};

// Both caches in f16 (--cache-type's default): every pass stores its rows rounded, the draft's graph
// and the target's passes alike, and the identities hold as with fp32 caches.
class GpuBundledPairF16Cache : public GpuBundledPair {
 protected:
  kernels::GemvOrder Order() const override { return kernels::GemvOrder::kTensorCores; }
  DType KvType() const override { return DType::kF16; }
};

TEST_F(GpuBundledPair, GreedyEqualsTargetOnlyGreedy) { CheckGreedyEqualsTargetOnly(); }
TEST_F(GpuBundledPairTensorCores, GreedyEqualsTargetOnlyGreedy) { CheckGreedyEqualsTargetOnly(); }
TEST_F(GpuBundledPairF16Cache, GreedyEqualsTargetOnlyGreedy) {
  ASSERT_EQ(target_->kv_cache().dtype(), DType::kF16);
  ASSERT_EQ(draft_->kv_cache().dtype(), DType::kF16);
  CheckGreedyEqualsTargetOnly();
}
TEST_F(GpuBundledPairF16Cache, CoupledEqualsPlainSamplingPerSeed) { CheckCoupledEqualsPlainPerSeed(); }

// Both models quantized to Q8_0 and kept packed (the draft through its graph on the packed fused GEMVs,
// the target's passes on the packed products), f16 caches: the identities hold.
class GpuBundledPairQ8_0 : public GpuBundledPairF16Cache {
 protected:
  DType WeightType() const override { return DType::kQ8_0; }
};
TEST_F(GpuBundledPairQ8_0, GreedyEqualsTargetOnlyGreedy) {
  ASSERT_TRUE(kernels::IsPacked(CudaBackend::Type(*draft_->layer_refs(0).q)))
      << "the backend dequantized the draft's Q8_0 weights";
  CheckGreedyEqualsTargetOnly();
}
TEST_F(GpuBundledPairQ8_0, CoupledEqualsPlainSamplingPerSeed) { CheckCoupledEqualsPlainPerSeed(); }

// The dense draft decodes its single tokens through the captured CUDA graph (the default), the same
// kernels launched eagerly, or the Transformer, and every path gives the same greedy output. For this
// draft (head_dim 32) the graph's logits equal the Transformer's bit for bit
// (tests/draft/graphed_draft_test.cc), so even the drafts agree; the graph's attention for
// head_dim 128 sums in its own order (within 1e-4 of the scale), and only the verified output is
// guaranteed equal.
TEST_F(GpuBundledPair, DraftDecodePaths) {
  const auto greedy = SamplingParams::Greedy();
  const auto& prompt = prompts_[0];
  const auto plain = Run(0, false, greedy, AcceptMode::kRejection, prompt);
  for (DraftDecodePath path : {DraftDecodePath::kGraph, DraftDecodePath::kFused, DraftDecodePath::kTransformer}) {
    SpeculativeStats stats;
    DraftDecodeStats d;
    EXPECT_EQ(Run(4, false, greedy, AcceptMode::kRejection, prompt, nullptr, &stats, path, &d), plain)
        << DraftDecodePathName(path);
    std::printf("draft path %s: %lld graph replays, %lld fused, %lld transformer passes%s%s\n",
                DraftDecodePathName(d.path), static_cast<long long>(d.graph_replays), static_cast<long long>(d.fused_steps),
                static_cast<long long>(d.transformer_passes), d.why_not_graph.empty() ? "" : "; why: ",
                d.why_not_graph.c_str());
    EXPECT_EQ(d.path, path) << d.why_not_graph;
    if (path == DraftDecodePath::kGraph) {
      EXPECT_TRUE(d.why_not_graph.empty()) << d.why_not_graph;
      EXPECT_GT(d.graph_replays, stats.passes);  // k - 1 replays per step at least
      EXPECT_EQ(d.fused_steps, 0);
    }
  }
}

// overlap_last_draft (the default) decodes each step's last draft x_k on a second stream beside the
// verification, so that a step which accepts every draft leaves the draft holding x_k; run_ahead (the
// default too) also decodes there the draft's guess of the bonus token and drafts the next step's
// proposals after it (run_ahead_drafts: 0 the guess alone, negative, the default, the whole run), so
// that a step whose bonus it was starts from them (kAlways: in every drafted step another may follow;
// kAuto, the default: pausing after late misses and shortening the run, which depends on timing). All
// must change nothing but where decodes run: the same output, the same (k, accepted) for every pass
// (a draft that missed, doubled or wrongly kept a token would propose differently), one overlapped
// decode a drafted pass, and the replays accounted for: overlap saves one after each fully accepted
// pass that another drafted pass follows (its feed is the bonus token alone) and adds one for every
// other drafted pass (x_k decoded and discarded); the guess alone adds one a guess and saves one for
// every step that started from a guess; the whole run adds a decode for each proposal drafted ahead
// but the first of a run (z_n is left undecoded, as Propose's x_k) and saves one for each taken but
// the first of a step (RunAheadAccounting).
TEST_F(GpuBundledPair, OverlappedDraftsChangeOnlyWhereTheyRun) {
  struct Pass {
    int k, accepted;
    bool operator==(const Pass&) const = default;
  };
  enum Mode { kSerial, kOverlap, kGuess, kRunAhead, kRunAheadAuto, kModes };
  int64_t used_greedy = 0, drafts_used_greedy = 0;
  // Fixed draft lengths only: the adaptive controller picks k from measured times, which differ.
  for (SamplingParams sampling : {SamplingParams::Greedy(), SamplingParams::Plain(0.8f, 5)}) {
    for (int draft_max : {2, 4}) {
      for (const auto& prompt : prompts_) {
        std::vector<int32_t> out[kModes];
        std::vector<Pass> passes[kModes];
        DraftDecodeStats d[kModes];
        for (int mode = kSerial; mode < kModes; ++mode) {
          SpeculativeOptions o = testing::MakeSpeculativeOptions(sampling, draft_max, false,
                                                                 AcceptMode::kRejection, kNewTokens);
          DeviceLoopHooks hooks;
          hooks.draft.overlap_last_draft = mode != kSerial;
          hooks.draft.run_ahead = mode == kGuess || mode == kRunAhead ? RunAhead::kAlways
                                  : mode == kRunAheadAuto             ? RunAhead::kAuto
                                                                      : RunAhead::kOff;
          hooks.draft.run_ahead_drafts = mode == kGuess ? 0 : -1;
          o.on_pass = [&, mode](int k, const AcceptResult& r) { passes[mode].push_back({k, r.n_accepted}); };
          auto dec = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(), draft_.get(), o, hooks);
          ASSERT_TRUE(dec.ok()) << dec.status();
          auto got = (*dec)->Generate(prompt);
          ASSERT_TRUE(got.ok()) << got.status();
          out[mode] = *got;
          d[mode] = (*dec)->draft_decode_stats();
          ASSERT_EQ(d[mode].path, DraftDecodePath::kGraph) << d[mode].why_not_graph;
          EXPECT_EQ((*dec)->syncs().step_result, (*dec)->syncs().steps);
          EXPECT_EQ((*dec)->syncs().other, 0);
        }
        const std::string what = std::string(sampling.greedy() ? "greedy" : "T=0.8") + " k=" + std::to_string(draft_max);
        for (int mode : {kOverlap, kGuess, kRunAhead, kRunAheadAuto}) {
          EXPECT_EQ(out[mode], out[kSerial]) << what << " mode " << mode;
          ASSERT_EQ(passes[mode], passes[kSerial]) << what << " mode " << mode << ": the draft proposed differently";
        }
        // Drafted passes; fully accepted ones that a drafted pass follows; and the guesses run-ahead
        // makes: in every drafted pass after which the generation can go on (the prompts are short,
        // so the context never ends it).
        int64_t drafted = 0, saved = 0, guesses = 0, generated = 0;
        for (size_t i = 0; i < passes[kSerial].size(); ++i) {
          const Pass& p = passes[kSerial][i];
          if (p.k > 0) {
            ++drafted;
            if (p.accepted == p.k && i + 1 < passes[kSerial].size() && passes[kSerial][i + 1].k > 0) ++saved;
            if (generated + p.k + 1 < kNewTokens) ++guesses;
          }
          generated += p.accepted + 1;
        }
        EXPECT_EQ(d[kSerial].overlapped, 0) << what;
        EXPECT_EQ(d[kSerial].run_ahead, 0) << what;
        EXPECT_EQ(d[kOverlap].overlapped, drafted) << what;
        EXPECT_EQ(d[kOverlap].run_ahead, 0) << what;
        EXPECT_EQ(d[kOverlap].graph_replays, d[kSerial].graph_replays + drafted - saved) << what;
        for (int mode : {kGuess, kRunAhead}) {
          EXPECT_EQ(d[mode].overlapped, drafted) << what << " mode " << mode;
          EXPECT_EQ(d[mode].run_ahead, guesses) << what << " mode " << mode;
          EXPECT_LE(d[mode].run_ahead_used, saved) << what << " mode " << mode;
        }
        EXPECT_EQ(d[kGuess].graph_replays, d[kOverlap].graph_replays + d[kGuess].run_ahead - d[kGuess].run_ahead_used)
            << what;
        EXPECT_EQ(d[kGuess].run_ahead_drafted, 0) << what;
        // The whole run: draft_max proposals after every guess (each decode replays a captured graph:
        // the context stays below the second shape's), its guesses the guess-only run's.
        EXPECT_EQ(d[kRunAhead].run_ahead_drafted, d[kRunAhead].run_ahead * draft_max) << what;
        EXPECT_EQ(d[kRunAhead].run_ahead_used, d[kGuess].run_ahead_used) << what;
        RunAheadAccounting(d[kGuess], d[kRunAhead], draft_max, what);
        EXPECT_EQ(d[kRunAheadAuto].overlapped, drafted) << what;
        EXPECT_LE(d[kRunAheadAuto].run_ahead, guesses) << what;
        EXPECT_LE(d[kRunAheadAuto].run_ahead_used, saved) << what;
        EXPECT_LE(d[kRunAheadAuto].run_ahead_drafted, d[kRunAheadAuto].run_ahead * draft_max) << what;
        EXPECT_LE(d[kRunAheadAuto].run_ahead_drafts_used, d[kRunAheadAuto].run_ahead_drafted) << what;
        if (sampling.greedy()) {
          used_greedy += d[kGuess].run_ahead_used;
          drafts_used_greedy += d[kRunAhead].run_ahead_drafts_used;
        }
      }
    }
  }
  // The draft's argmax is the bonus token often enough on the bundled pair (acceptance ~0.5) that
  // greedy runs start steps from a guess; none would mean the guess is never found equal.
  EXPECT_GT(used_greedy, 0);
  EXPECT_GT(drafts_used_greedy, 0);
}

// The run ahead of the next step's proposals (RunAhead::kAlways with run_ahead_drafts: guess alone,
// the whole run, or shorter runs) gives the tokens of no run-ahead, pass for pass, greedy and sampled,
// at draft lengths from 1 to the kernels' bound, with the step's one host wait, and it does engage:
// drafts are taken. Hits need a step that accepts every draft and whose bonus is the draft's argmax, so
// the pairs make them frequent: the bundled pair with a scripted draft (an acceptance regime of 0.95 a
// depth; the script stands in for the draft's draws, so the guess alone still tests the draft's state),
// and a self pair (the draft's model as the target too: every draft accepted, the guess the bonus at
// greedy, and often sampled), whose proposals come from the draft's own state, so that a cache the run
// ahead left wrong would propose differently.
TEST_F(GpuBundledPair, RunAheadOfTheNextDraftGivesTheSameTokens) {
  std::unique_ptr<Transformer> self_target = Load((testing::SourceDir() / "models" / "tiny-draft").string());
  ASSERT_NE(self_target, nullptr);
  const std::vector<std::vector<int32_t>> prompts(prompts_.begin(),
                                                  prompts_.begin() + std::min<size_t>(2, prompts_.size()));
  struct Pair {
    const char* name;
    Transformer* target;
    SamplingParams sampling;
    AcceptMode accept;
    bool scripted;
  };
  const Pair pairs[] = {
      {"bundled scripted greedy", target_.get(), SamplingParams::Greedy(), AcceptMode::kRejection, true},
      {"self greedy", self_target.get(), SamplingParams::Greedy(), AcceptMode::kRejection, false},
      {"self T=0.8 rejection", self_target.get(), SamplingParams::Plain(0.8f, 11), AcceptMode::kRejection, false},
      {"bundled T=0.8 coupled", target_.get(), SamplingParams::Plain(0.8f, 3), AcceptMode::kCoupled, false},
  };
  for (const Pair& pair : pairs) {
    int64_t drafts_used = 0, steps_used = 0;
    for (const int k : {1, 4, kernels::kAcceptMaxDraft}) {
      for (const auto& prompt : prompts) {
        std::unique_ptr<DeviceScriptTable> script;
        if (pair.scripted) {
          const std::vector<int32_t> continuation =
              Run(0, false, SamplingParams::Greedy(), AcceptMode::kRejection, prompt);
          script = std::make_unique<DeviceScriptTable>(continuation, static_cast<int64_t>(prompt.size()), 0.95,
                                                       static_cast<int32_t>(target_->vocab_size()));
        }
        const SpeculativeOptions o = testing::MakeSpeculativeOptions(pair.sampling, k, false, pair.accept, kNewTokens);
        const AheadRun off = RunWithAhead(pair.target, o, RunAhead::kOff, -1, script.get(), prompt);
        const AheadRun guess = RunWithAhead(pair.target, o, RunAhead::kAlways, 0, script.get(), prompt);
        const AheadRun whole = RunWithAhead(pair.target, o, RunAhead::kAlways, -1, script.get(), prompt);
        const std::string what = std::string(pair.name) + " k=" + std::to_string(k);
        ASSERT_EQ(off.out.size(), static_cast<size_t>(kNewTokens)) << what;
        EXPECT_EQ(guess.out, off.out) << what;
        EXPECT_EQ(whole.out, off.out) << what;
        EXPECT_EQ(guess.passes, off.passes) << what << ": the guess changed the proposals";
        EXPECT_EQ(whole.passes, off.passes) << what << ": the run ahead changed the proposals";
        EXPECT_EQ(whole.d.run_ahead_drafted, whole.d.run_ahead * k) << what;
        EXPECT_EQ(whole.d.run_ahead_used, guess.d.run_ahead_used) << what;
        RunAheadAccounting(guess.d, whole.d, k, what);
        drafts_used += whole.d.run_ahead_drafts_used;
        steps_used += whole.d.run_ahead_used;
      }
    }
    std::printf("%s: %lld steps started from drafts run ahead, %lld drafts taken\n", pair.name,
                static_cast<long long>(steps_used), static_cast<long long>(drafts_used));
    EXPECT_GT(steps_used, 0) << pair.name << ": the run ahead never engaged";
    EXPECT_GE(drafts_used, steps_used) << pair.name;
  }
}

// The next step asks for more proposals than the run ahead drafted (run_ahead_drafts below the draft
// length: the step decodes on from the last of them) or fewer (the generation's last step, whose k is
// cut to the tokens left; the adaptive controller's explorations): the same tokens and passes as
// without run-ahead, and the decodes accounted for as in OverlappedDraftsChangeOnlyWhereTheyRun.
TEST_F(GpuBundledPair, RunAheadLongerOrShorterThanTheNextDraft) {
  std::unique_ptr<Transformer> self_target = Load((testing::SourceDir() / "models" / "tiny-draft").string());
  ASSERT_NE(self_target, nullptr);
  const std::vector<std::vector<int32_t>> prompts(prompts_.begin(),
                                                  prompts_.begin() + std::min<size_t>(2, prompts_.size()));
  for (SamplingParams sampling : {SamplingParams::Greedy(), SamplingParams::Plain(0.8f, 13)}) {
    const std::string name = sampling.greedy() ? "greedy" : "T=0.8";
    // Longer next drafts: k = 6 after runs of 1, 2 and 5.
    int64_t took_all_of_short_runs = 0;
    for (const int drafts : {1, 2, 5}) {
      for (const auto& prompt : prompts) {
        const SpeculativeOptions o =
            testing::MakeSpeculativeOptions(sampling, 6, false, AcceptMode::kRejection, kNewTokens);
        const AheadRun off = RunWithAhead(self_target.get(), o, RunAhead::kOff, -1, nullptr, prompt);
        const AheadRun guess = RunWithAhead(self_target.get(), o, RunAhead::kAlways, 0, nullptr, prompt);
        const AheadRun run = RunWithAhead(self_target.get(), o, RunAhead::kAlways, drafts, nullptr, prompt);
        const std::string what = name + " k=6 after " + std::to_string(drafts);
        EXPECT_EQ(run.out, off.out) << what;
        EXPECT_EQ(run.passes, off.passes) << what;
        EXPECT_EQ(run.d.run_ahead_drafted, run.d.run_ahead * drafts) << what;
        RunAheadAccounting(guess.d, run.d, drafts, what);
        took_all_of_short_runs += run.d.run_ahead_drafts_used;
      }
    }
    EXPECT_GT(took_all_of_short_runs, 0) << name;
    // Shorter next drafts: runs of 8 (the bound) before a generation's last step, which drafts the
    // tokens left, fewer; and before the adaptive controller's steps on a modelled cost (deterministic:
    // no timing) whose best length is 2 or 3, explored around every 16 passes.
    int64_t shorter_next = 0, taken = 0, used_steps = 0;
    for (const auto& prompt : prompts) {
      for (const bool adaptive : {false, true}) {
        SpeculativeOptions o = testing::MakeSpeculativeOptions(sampling, 8, adaptive, AcceptMode::kRejection,
                                                               adaptive ? 3 * kNewTokens : kNewTokens);
        if (adaptive) o.modelled_step_seconds = [](int k) { return 1.0 + 0.1 * k * k; };
        const AheadRun off = RunWithAhead(self_target.get(), o, RunAhead::kOff, -1, nullptr, prompt);
        const AheadRun guess = RunWithAhead(self_target.get(), o, RunAhead::kAlways, 0, nullptr, prompt);
        const AheadRun whole = RunWithAhead(self_target.get(), o, RunAhead::kAlways, -1, nullptr, prompt);
        const std::string what = name + (adaptive ? " adaptive" : " k=8");
        EXPECT_EQ(whole.out, off.out) << what;
        EXPECT_EQ(whole.passes, off.passes) << what;
        RunAheadAccounting(guess.d, whole.d, 8, what);
        for (size_t i = 0; i + 1 < off.passes.size(); ++i) {
          const auto [k, accepted] = off.passes[i];
          const int next = off.passes[i + 1].first;
          if (k > 0 && accepted == k && next > 0 && next < 8) ++shorter_next;
        }
        taken += whole.d.run_ahead_drafts_used;
        used_steps += whole.d.run_ahead_used;
      }
    }
    // A fully accepted step before a shorter one happened, and steps took fewer than the run.
    EXPECT_GT(shorter_next, 0) << name;
    EXPECT_GT(used_steps, 0) << name;
    EXPECT_LT(taken, used_steps * 8) << name;
  }
}

// DeviceLoopHooks::graph_verify (the default): the target's passes replayed from CUDA graphs give the
// bits of the eager passes, so greedy and seeded rejection sampling emit the same tokens with and without
// it, pass for pass; with it every pass is a replay (none eager, no fallback), without it none.
TEST_F(GpuBundledPair, GraphedVerificationEqualsEagerPasses) {
  for (SamplingParams sampling : {SamplingParams::Greedy(), SamplingParams::Plain(0.8f, 7)}) {
    for (int k : {0, 3}) {
      for (const auto& prompt : prompts_) {
        std::vector<int32_t> out[2];
        std::vector<std::pair<int, int>> passes[2];
        VerifyPassStats v[2];
        int64_t steps[2] = {0, 0};
        for (int graphed = 0; graphed < 2; ++graphed) {
          SpeculativeOptions o =
              testing::MakeSpeculativeOptions(sampling, k, false, AcceptMode::kRejection, kNewTokens);
          DeviceLoopHooks hooks;
          hooks.graph_verify = graphed == 1;
          o.on_pass = [&, graphed](int kk, const AcceptResult& r) { passes[graphed].push_back({kk, r.n_accepted}); };
          auto dec =
              DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(), k > 0 ? draft_.get() : nullptr, o, hooks);
          ASSERT_TRUE(dec.ok()) << dec.status();
          auto got = (*dec)->Generate(prompt);
          ASSERT_TRUE(got.ok()) << got.status();
          out[graphed] = *got;
          v[graphed] = (*dec)->verify_pass_stats();
          steps[graphed] = (*dec)->syncs().steps;
          EXPECT_EQ((*dec)->syncs().max_non_union_per_step, 1);
          EXPECT_EQ((*dec)->syncs().other, 0);
        }
        const std::string what = std::string(sampling.greedy() ? "greedy" : "T=0.8") + " k=" + std::to_string(k);
        EXPECT_EQ(out[1], out[0]) << what;
        EXPECT_EQ(passes[1], passes[0]) << what;
        EXPECT_EQ(v[0].graph_replays, 0) << what;
        EXPECT_EQ(v[0].eager_passes, steps[0]) << what;
        EXPECT_EQ(v[1].why_not_graph, "") << what;
        EXPECT_EQ(v[1].eager_passes, 0) << what;
        EXPECT_EQ(v[1].graph_replays, steps[1]) << what;
        EXPECT_GE(v[1].captures, 1) << what;
      }
    }
  }
}

// keep_cache on the GPU loop (chat turns): the next turn's prompt extends the previous prompt and reply,
// and only its new tokens are fed; the reply equals a fresh decoder's. A prompt that diverges inside
// the cached part is fed from the divergence on, with the same output as a fresh decoder.
TEST_F(GpuBundledPair, KeepCacheFeedsOnlyTheNextTurnsNewTokens) {
  SpeculativeOptions o;
  o.draft_max = 4;
  o.max_new_tokens = kNewTokens;
  o.sampling = SamplingParams::Greedy();
  o.keep_cache = true;
  auto kept = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(), draft_.get(), o);
  o.keep_cache = false;
  auto fresh = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(), draft_.get(), o);
  ASSERT_TRUE(kept.ok() && fresh.ok());

  const std::vector<int32_t> turn1 = prompts_[1];
  auto reply1 = (*kept)->Generate(turn1);
  ASSERT_TRUE(reply1.ok()) << reply1.status();
  EXPECT_EQ((*kept)->last_prefill_fed(), static_cast<int64_t>(turn1.size()) - 1);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), reply1->begin(), reply1->end());
  const std::vector<int32_t> user = {1, 872, 198, 2};
  turn2.insert(turn2.end(), user.begin(), user.end());

  auto reply2 = (*kept)->Generate(turn2);
  ASSERT_TRUE(reply2.ok()) << reply2.status();
  const int64_t fed_kept = (*kept)->last_prefill_fed();
  auto expected = (*fresh)->Generate(turn2);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(*reply2, *expected);
  EXPECT_EQ((*fresh)->last_prefill_fed(), static_cast<int64_t>(turn2.size()) - 1);
  // At most the new user tokens and the reply's last token (never fed in turn 1).
  EXPECT_LE(fed_kept, static_cast<int64_t>(user.size()) + 1);
  EXPECT_GE(fed_kept, static_cast<int64_t>(user.size()));

  // Re-run turn 2 on the kept decoder (its cache holds turn 2 and its reply), then diverge at d.
  ASSERT_TRUE((*kept)->Generate(turn2).ok());
  std::vector<int32_t> turn3 = turn2;
  const size_t d = turn1.size() / 2;
  turn3[d] = turn3[d] == 7 ? 8 : 7;
  auto reply3 = (*kept)->Generate(turn3);
  ASSERT_TRUE(reply3.ok()) << reply3.status();
  EXPECT_EQ((*kept)->last_prefill_fed(), static_cast<int64_t>(turn3.size() - 1 - d));
  auto expected3 = (*fresh)->Generate(turn3);
  ASSERT_TRUE(expected3.ok()) << expected3.status();
  EXPECT_EQ(*reply3, *expected3);
}

TEST_F(GpuBundledPair, CoupledEqualsPlainSamplingPerSeed) { CheckCoupledEqualsPlainPerSeed(); }
TEST_F(GpuBundledPairTensorCores, CoupledEqualsPlainSamplingPerSeed) { CheckCoupledEqualsPlainPerSeed(); }

TEST_F(GpuBundledPair, RejectionSamplingRunsAndAccepts) {
  SpeculativeStats stats;
  const auto out = Run(4, false, SamplingParams::Plain(0.8f, 7), AcceptMode::kRejection, prompts_[0],
                       nullptr, &stats);
  EXPECT_EQ(out.size(), static_cast<size_t>(kNewTokens));
  EXPECT_GT(stats.accepted, 0);
  std::printf("rejection T=0.8 k=4: acceptance %.3f, tau %.2f\n", stats.acceptance_rate(),
              stats.mean_accepted_length());
}

TEST_F(GpuBundledPair, OneHostSyncPerStepAndNoExpertUnionReads) {
  int64_t moe_layers = 0;
  for (bool moe : target_->spec().layer_is_moe) moe_layers += moe;
  for (int k : {0, 4}) {
    for (AcceptMode mode : {AcceptMode::kRejection, AcceptMode::kCoupled}) {
      StepSyncStats s;
      Run(k, false, SamplingParams::Plain(0.8f, 5), mode, prompts_[1], &s);
      std::printf("k=%d %s: %lld steps, %lld result syncs, %lld other, %lld expert-union reads "
                  "(%.1f per step, %lld MoE layers)\n",
                  k, std::string(AcceptModeName(mode)).c_str(), static_cast<long long>(s.steps),
                  static_cast<long long>(s.step_result), static_cast<long long>(s.other),
                  static_cast<long long>(s.expert_union), s.steps ? double(s.expert_union) / s.steps : 0.0,
                  static_cast<long long>(moe_layers));
      EXPECT_GT(s.steps, 0);
      EXPECT_EQ(s.step_result, s.steps);
      EXPECT_EQ(s.other, 0);
      EXPECT_LE(s.max_non_union_per_step, 1);
      // Every expert is resident, so the target routes on the device (Backend::RouteAndRunExperts):
      // the host never reads an expert union during a step (docs/design.md §6.2); the draft is dense.
      EXPECT_GT(moe_layers, 0);
      EXPECT_EQ(s.expert_union, 0);
    }
  }
}

// --n-probs on the GPU: one entry per token, the chosen token the most probable at greedy, the same
// figures with a draft as without (each from the pass row that chose the token), and still one host
// wait a step (the logits come back with the step's result).
TEST_F(GpuBundledPair, LogprobsAreTheTargetsWithOrWithoutADraftInTheStepsOneWait) {
  auto run = [&](int k, std::vector<TokenLogprobs>* logprobs, StepSyncStats* syncs) {
    SpeculativeOptions o = testing::MakeSpeculativeOptions(SamplingParams::Greedy(), k, false,
                                                           AcceptMode::kRejection, kNewTokens);
    o.n_probs = 3;
    o.on_logprobs = [logprobs](std::span<const TokenLogprobs> step) {
      logprobs->insert(logprobs->end(), step.begin(), step.end());
    };
    auto dec = DeviceSpeculativeDecoder::Create(backend_.get(), target_.get(), k > 0 ? draft_.get() : nullptr, o);
    EXPECT_TRUE(dec.ok()) << dec.status();
    if (!dec.ok()) return std::vector<int32_t>{};
    auto out = (*dec)->Generate(prompts_[0]);
    EXPECT_TRUE(out.ok()) << out.status();
    *syncs = (*dec)->syncs();
    return out.ok() ? *out : std::vector<int32_t>{};
  };
  std::vector<TokenLogprobs> plain_lp, spec_lp;
  StepSyncStats plain_syncs, spec_syncs;
  const std::vector<int32_t> plain = run(0, &plain_lp, &plain_syncs);
  const std::vector<int32_t> spec = run(4, &spec_lp, &spec_syncs);
  ASSERT_EQ(spec, plain);
  ASSERT_EQ(plain_lp.size(), plain.size());
  ASSERT_EQ(spec_lp.size(), spec.size());
  for (const StepSyncStats* s : {&plain_syncs, &spec_syncs}) EXPECT_LE(s->max_non_union_per_step, 1);
  // A row of a 5-position pass and of a 1-position pass hold the same logits where the pass is batch
  // invariant (§6.6), and within the fp32 accumulation's rounding (hidden 256: ~1e-6 relative on logits
  // of magnitude < 30) where it is not; 1e-4 bounds either in the log-softmax.
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain_lp[i].chosen.token, plain[i]);
    EXPECT_EQ(plain_lp[i].top[0].token, plain[i]) << i;  // greedy takes the most probable
    EXPECT_NEAR(spec_lp[i].chosen.logprob, plain_lp[i].chosen.logprob, 1e-4) << i;
    ASSERT_EQ(spec_lp[i].top.size(), 3u);
    EXPECT_NEAR(spec_lp[i].top[1].logprob, plain_lp[i].top[1].logprob, 1e-4) << i;
  }
}

}  // namespace
}  // namespace specgen
