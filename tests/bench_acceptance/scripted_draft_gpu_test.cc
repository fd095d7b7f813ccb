// The device script (kernels/scripted_draft.cuh) against the host's (bench/acceptance): for every
// profile, base position and depth, the kernel writes the token AcceptanceScript::Token gives, reading
// the base from device memory, also when replayed from a CUDA graph at a new base.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench/acceptance/acceptance_script.h"
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
    script.SetContinuation(kPrompt, continuation, 3);
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

}  // namespace
}  // namespace specgen::bench
