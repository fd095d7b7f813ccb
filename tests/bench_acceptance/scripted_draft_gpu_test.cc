// The device script (kernels/scripted_draft.cuh) against the host's (bench/acceptance): for every
// profile, base position and depth, the kernel writes the token AcceptanceScript::Token gives, reading
// the base from device memory, also when replayed from a CUDA graph at a new base.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench/acceptance/acceptance_script.h"
#include "bench/acceptance/scripted_draft.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "tests/common/gpu_test_env.h"
#include "gtest/gtest.h"
#include "kernels/scripted_draft.cuh"

namespace specgen::bench {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <typename T>
T* Upload(const std::vector<T>& v) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(T) * std::max<size_t>(v.size(), 1)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

TEST(ScriptedDraftGpuTest, KernelWritesTheHostScriptsTokens) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  constexpr int32_t kVocab = 151936;
  constexpr int64_t kPrompt = 37, kLength = 300;
  constexpr int kN = 16;
  std::mt19937 rng(5);
  std::vector<int32_t> continuation(kLength);
  for (int32_t& t : continuation) t = static_cast<int32_t>(rng() % kVocab);
  int32_t* d_continuation = Upload(continuation);
  int32_t* d_base = Upload(std::vector<int32_t>{0});
  int32_t* d_tokens = Upload(std::vector<int32_t>(kN, 0));
  for (const char* name : {"typical", "flat:0.6", "flat:0.9"}) {
    const moe::AcceptanceProfile profile = *moe::ParseAcceptance(name);
    AcceptanceScript script(profile, 1234, kVocab);
    ASSERT_TRUE(script.SetContinuation(kPrompt, continuation, 3).ok());
    double* d_profile = Upload(profile.by_depth);
    kernels::ScriptedDraftTable table;
    table.continuation = d_continuation;
    table.first_position = kPrompt;
    table.length = kLength;
    table.profile = d_profile;
    table.profile_len = static_cast<int>(profile.by_depth.size());
    table.seed = script.key_seed();
    table.vocab = kVocab;
    // Bases before the continuation (tokens left as drawn), inside it, and running past its end.
    for (int32_t base = kPrompt - 4; base < kPrompt + kLength + 2; base += 7) {
      for (const int depth0 : {0, 3}) {
        std::vector<int32_t> drawn(kN);
        for (int32_t& t : drawn) t = static_cast<int32_t>(rng() % kVocab);
        ASSERT_EQ(cudaMemcpy(d_tokens, drawn.data(), sizeof(int32_t) * kN, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_base, &base, sizeof base, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(kernels::LaunchScriptedDraft(table, d_base, 0, depth0, kN, d_tokens, nullptr), cudaSuccess);
        std::vector<int32_t> got(kN);
        ASSERT_EQ(cudaMemcpy(got.data(), d_tokens, sizeof(int32_t) * kN, cudaMemcpyDeviceToHost), cudaSuccess);
        // The eager form: no device base, the position given.
        ASSERT_EQ(cudaMemcpy(d_tokens, drawn.data(), sizeof(int32_t) * kN, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(kernels::LaunchScriptedDraft(table, nullptr, base, depth0, kN, d_tokens, nullptr), cudaSuccess);
        std::vector<int32_t> eager(kN);
        ASSERT_EQ(cudaMemcpy(eager.data(), d_tokens, sizeof(int32_t) * kN, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(eager, got);
        for (int t = 0; t < kN; ++t) {
          ASSERT_EQ(got[t], script.Token(base + t, depth0 + t, drawn[t]))
              << name << " base " << base << " depth " << depth0 + t;
        }
      }
    }
    // Captured once, replayed at new bases: the base is read at replay.
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(kernels::LaunchScriptedDraft(table, d_base, 0, 0, kN, d_tokens, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int32_t base : {kPrompt, kPrompt + 100}) {
      const std::vector<int32_t> drawn(kN, 7);
      ASSERT_EQ(cudaMemcpy(d_tokens, drawn.data(), sizeof(int32_t) * kN, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_base, &base, sizeof base, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<int32_t> got(kN);
      ASSERT_EQ(cudaMemcpy(got.data(), d_tokens, sizeof(int32_t) * kN, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int t = 0; t < kN; ++t) EXPECT_EQ(got[t], script.Token(base + t, t, 7)) << name << " replay " << base;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    cudaFree(d_profile);
  }
  cudaFree(d_continuation);
  cudaFree(d_base);
  cudaFree(d_tokens);
}


std::unique_ptr<Transformer> LoadOn(CudaBackend* backend, const std::string& path) {
  auto loaded = LoadModel(path);
  EXPECT_TRUE(loaded.ok()) << path << ": " << loaded.status();
  if (!loaded.ok()) return nullptr;
  TransformerOptions options;
  options.max_context = 256;
  auto lm = Transformer::Create(std::move(loaded).value(), backend, options);
  EXPECT_TRUE(lm.ok()) << path << ": " << lm.status();
  return lm.ok() ? std::move(lm).value() : nullptr;
}

TEST(ScriptedDraftGpuTest, TheGpuLoopAcceptsWhatTheScriptDecided) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  std::unique_ptr<CudaBackend> backend = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(backend, nullptr);
  const std::string models = (testing::SourceDir() / "models").string();
  std::unique_ptr<Transformer> target = LoadOn(backend.get(), models + "/tiny-target");
  std::unique_ptr<Transformer> draft = LoadOn(backend.get(), models + "/tiny-draft");
  ASSERT_TRUE(target && draft);
  constexpr int64_t kNew = 64;
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42}, {5, 250, 3, 99, 7}, {33}};
  for (const char* name : {"typical", "flat:0.6"}) {
    const moe::AcceptanceProfile profile = *moe::ParseAcceptance(name);
    AcceptanceScript script(profile, 9, static_cast<int32_t>(target->vocab_size()));
    for (const bool adaptive : {false, true}) {
      SpeculativeOptions o;
      o.sampling = SamplingParams::Greedy();
      o.max_new_tokens = kNew;
      o.draft_max = 4;
      o.adaptive = adaptive;
      const std::vector<int32_t>* plain = nullptr;
      int64_t first = 0, emitted = 0;
      o.on_pass = [&](int k, const AcceptResult& r) {
        int expected = 0;
        while (expected < k && ScriptedDraftToken(script.key_seed(), first + emitted + expected, expected,
                                                  profile.at(expected), (*plain)[emitted + expected],
                                                  script.vocab()) == (*plain)[emitted + expected]) {
          ++expected;
        }
        EXPECT_EQ(r.n_accepted, expected) << name << " at position " << first + emitted;
        emitted += static_cast<int64_t>(r.tokens.size());
      };
      auto loop = MakeScriptedLoop(backend.get(), target.get(), draft.get(), o, &script);
      ASSERT_TRUE(loop.ok()) << loop.status();
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto continuation = GreedyContinuation(backend.get(), target.get(), prompts[i], kNew);
        ASSERT_TRUE(continuation.ok()) << continuation.status();
        ASSERT_TRUE(script.SetContinuation(static_cast<int64_t>(prompts[i].size()), *continuation, i).ok());
        plain = &script.continuation();
        first = static_cast<int64_t>(prompts[i].size());
        emitted = 0;
        auto out = (*loop)->Generate(prompts[i]);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(*out, *plain) << name << (adaptive ? " adaptive" : " fixed");
      }
    }
  }
}

}  // namespace
}  // namespace specgen::bench
