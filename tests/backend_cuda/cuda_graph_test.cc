// CudaGraph (engine/backend/cuda/cuda_graph.h): a capture replays what was queued, with its root
// node's arguments replaced per replay; a capture whose enqueue fails returns that error, keeps
// nothing and leaves the stream out of capture mode, so the stream takes ordinary work again; a moved
// graph is owned by its new holder only. Skips without a device.
#include "engine/backend/cuda/cuda_graph.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise.cuh"
#include "tests/common/gpu_test_env.h"

namespace specgen {
namespace {

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBackend::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_value_, sizeof(int32_t)), cudaSuccess);
  }
  void TearDown() override {
    if (d_value_ != nullptr) cudaFree(d_value_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  int32_t Value() {
    int32_t v = 0;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&v, d_value_, sizeof(v), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  cudaStream_t stream_ = nullptr;
  int32_t* d_value_ = nullptr;
};

TEST_F(CudaGraphTest, ReplaysWithItsRootsArgumentsReplaced) {
  ASSERT_EQ(cudaMemset(d_value_, 0, sizeof(int32_t)), cudaSuccess);
  absl::StatusOr<CudaGraph> g = CudaGraph::Capture(stream_, [&] {
    return absl::Status(SPECGEN_CUDA_STATUS(kernels::LaunchStoreInt32(d_value_, 7, stream_)));
  });
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Value(), 0);  // a capture queues nothing
  ASSERT_TRUE(g->Launch(stream_).ok());
  EXPECT_EQ(Value(), 7);
  absl::StatusOr<cudaGraphNode_t> root = g->SingleRoot("test graph");
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_EQ(kernels::SetStoreInt32NodeArgs(g->exec(), *root, d_value_, 11), cudaSuccess);
  ASSERT_TRUE(g->Launch(stream_).ok());
  EXPECT_EQ(Value(), 11);
  // Moved: the new holder replays it, the old one is empty and refuses to launch.
  CudaGraph moved = std::move(*g);
  EXPECT_TRUE(g->empty());
  EXPECT_FALSE(g->Launch(stream_).ok());
  ASSERT_TRUE(moved.Launch(stream_).ok());
  EXPECT_EQ(Value(), 11);
}

TEST_F(CudaGraphTest, FailedEnqueueKeepsNothingAndEndsTheCapture) {
  absl::StatusOr<CudaGraph> g = CudaGraph::Capture(stream_, [&] {
    // A launch the launcher refuses (null destination), inside the capture.
    return absl::Status(SPECGEN_CUDA_STATUS(kernels::LaunchStoreInt32(nullptr, 1, stream_)));
  });
  EXPECT_FALSE(g.ok());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(stream_, &capture), cudaSuccess);
  EXPECT_EQ(capture, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The stream takes ordinary work again.
  ASSERT_EQ(kernels::LaunchStoreInt32(d_value_, 5, stream_), cudaSuccess);
  EXPECT_EQ(Value(), 5);
}

}  // namespace
}  // namespace specgen
