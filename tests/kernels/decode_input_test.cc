// The graphed draft's first node: LaunchDecodeInput captured into a graph, its arguments replaced for
// each replay by SetDecodeInputNodeArgs (host and device tokens, new positions): the state it sets and
// the embedding row it writes (the same bits as LaunchEmbedding's, NaN for a token outside the
// vocabulary); bad arguments refused.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/decode_fused.cuh"
#include "kernels/elementwise.cuh"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;

TEST(DecodeInputGpu, GraphNodeTakesEachReplaysArguments) {
  SPECGEN_SKIP_WITHOUT_GPU();
  constexpr int kVocab = 42, kDim = 300;  // token 42 is past the end; 300: not a multiple of the block
  auto rng = testing::FreshRng();
  DeviceBuffer<uint16_t> table(testing::ToBf16(testing::RandomNormal(rng, size_t(kVocab) * kDim)));
  DeviceBuffer<DecodeState> state(1);
  DeviceBuffer<int32_t> device_tokens(std::vector<int32_t>{41, 42});
  DeviceBuffer<float> row(static_cast<size_t>(kDim)), expected(static_cast<size_t>(kDim));
  DeviceBuffer<int32_t> id(1);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  DecodeInput in;
  in.state = state.get();
  in.host_token = 7;
  in.pos = 3;
  in.table = table.get();
  in.table_type = ElemType::kBF16;
  in.vocab = kVocab;
  in.dim = kDim;
  in.out = row.get();
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t queued = LaunchDecodeInput(in, stream);
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(queued);
  cudaGraphNode_t node = nullptr;
  size_t roots = 1;
  CUDA_OK(cudaGraphGetRootNodes(graph, &node, &roots));
  ASSERT_EQ(roots, 1u);
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  // One replay with `token` / `pos`, checked against LaunchEmbedding of `want_token`.
  const auto check = [&](const int32_t* device_token, int32_t host_token, int32_t pos, int32_t want_token) {
    in.device_token = device_token;
    in.host_token = host_token;
    in.pos = pos;
    ASSERT_EQ(SetDecodeInputNodeArgs(exec, node, in), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const DecodeState s = state.Download()[0];
    EXPECT_EQ(s.token, want_token);
    EXPECT_EQ(s.pos, pos);
    id.Upload(std::vector<int32_t>{want_token});
    ASSERT_EQ(LaunchEmbedding(table.get(), ElemType::kBF16, kVocab, kDim, id.get(), 1, expected.get(), nullptr),
              cudaSuccess);
    const auto a = row.Download(), b = expected.Download();
    if (want_token >= 0 && want_token < kVocab) {
      for (float v : a) ASSERT_TRUE(std::isfinite(v));
      EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * kDim), 0) << "token " << want_token;
    } else {
      for (float v : a) ASSERT_TRUE(std::isnan(v)) << "token " << want_token;
    }
  };
  check(nullptr, 7, 3, 7);                     // as captured
  check(nullptr, 19, 4, 19);                   // a new host token and position
  check(device_tokens.get() + 1, 0, 5, 42);    // out of the vocabulary, from device memory: NaN
  check(device_tokens.get(), 0, 6, 41);        // from device memory
  // Two updates before one launch: the last one counts.
  in.pos = 10;
  ASSERT_EQ(SetDecodeInputNodeArgs(exec, node, in), cudaSuccess);
  check(nullptr, 2, 11, 2);
  EXPECT_EQ(SetDecodeInputNodeArgs(nullptr, node, in), cudaErrorInvalidValue);
  EXPECT_EQ(SetDecodeInputNodeArgs(exec, nullptr, in), cudaErrorInvalidValue);
  in.pos = -1;
  EXPECT_EQ(SetDecodeInputNodeArgs(exec, node, in), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDecodeInput(in, stream), cudaErrorInvalidValue);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace specgen::kernels
