// The graphed draft's kernels on weights kept packed in a GGUF block type: LaunchFusedGemv (norm
// prologue, one to three matrices, each epilogue) against LaunchRmsNorm + LaunchGemvSegments (+ LaunchAdd
// / LaunchSwiGlu), the Backend ops it stands for, bit for bit whatever the grid bound; and the decode
// step's input kernel gathering a packed embedding row with LaunchPackedEmbedding's bits. Random blocks
// on every run (tests/common/random_blocks.h).
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/decode_fused.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemv.cuh"
#include "kernels/norm.cuh"
#include "kernels/packed.cuh"
#include "tests/common/random_blocks.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;

ElemType KernelType(DType t) {
  switch (t) {
    case DType::kQ8_0: return ElemType::kQ8_0;
    case DType::kQ4_0: return ElemType::kQ4_0;
    case DType::kQ4_K: return ElemType::kQ4_K;
    case DType::kQ5_K: return ElemType::kQ5_K;
    case DType::kMXFP4: return ElemType::kMXFP4;
    default: return ElemType::kQ6_K;
  }
}

void CheckPackedFusedGemv(DType dtype, int in, std::vector<int> rows, GemvEpilogue epi, bool norm, int max_blocks) {
  auto rng = ::specgen::kernels::testing::FreshRng();
  const ElemType type = KernelType(dtype);
  // Inputs of the size a decode step's residual has; the random blocks' scales keep the products finite.
  const auto x = testing::RandomNormal(rng, size_t(in));
  const auto norm_w = testing::ToBf16(testing::RandomNormal(rng, size_t(in)));
  DeviceBuffer<float> dx(x), dxn(static_cast<size_t>(in));
  DeviceBuffer<uint16_t> dnorm(norm_w);
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> w;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> y_ref, y_fused;
  for (int r : rows) {
    w.push_back(std::make_unique<DeviceBuffer<uint8_t>>(::specgen::testing::RandomBlocks(rng, dtype, r, in)));
    const auto start = testing::RandomNormal(rng, size_t(r));  // kAddTo: the residual both start from
    y_ref.push_back(std::make_unique<DeviceBuffer<float>>(start));
    y_fused.push_back(std::make_unique<DeviceBuffer<float>>(start));
  }
  const float eps = 1e-6f;
  const float* xin = dx.get();
  if (norm) {
    CUDA_OK(LaunchRmsNorm(dx.get(), dnorm.get(), ElemType::kBF16, dxn.get(), 1, in, eps, nullptr));
    xin = dxn.get();
  }
  std::vector<GemvSegment> segs;
  for (size_t i = 0; i < rows.size(); ++i) {
    DeviceBuffer<float> tmp(static_cast<size_t>(rows[i]));
    const GemvSegment one{w[i]->get(), tmp.get(), rows[i]};
    CUDA_OK(LaunchGemvSegments(&one, 1, type, xin, 1, in, GemvEpilogue::kStore, nullptr));
    if (epi == GemvEpilogue::kAddTo) {
      CUDA_OK(LaunchAdd(y_ref[i]->get(), tmp.get(), y_ref[i]->get(), rows[i], nullptr));
    } else {
      CUDA_OK(cudaMemcpy(y_ref[i]->get(), tmp.get(), sizeof(float) * rows[i], cudaMemcpyDeviceToDevice));
    }
    segs.push_back({w[i]->get(), y_fused[i]->get(), rows[i]});
  }
  if (epi == GemvEpilogue::kSwiGlu) {
    CUDA_OK(LaunchSwiGlu(y_ref[0]->get(), y_ref[1]->get(), y_ref[0]->get(), rows[0], nullptr));
    segs[1].y = y_fused[0]->get();  // the product lands in the gate's output
  }
  CUDA_OK(LaunchFusedGemv(dx.get(), norm ? dnorm.get() : nullptr, ElemType::kBF16, eps, segs.data(),
                          static_cast<int>(segs.size()), type, in, epi, max_blocks, nullptr, false, 1));
  const std::string what = std::string("packed fused gemv ") + ElemTypeName(type) + " in=" + std::to_string(in) +
                           " epi=" + std::to_string(int(epi)) + (norm ? " norm" : "") +
                           " max_blocks=" + std::to_string(max_blocks);
  const size_t outputs = epi == GemvEpilogue::kSwiGlu ? 1 : rows.size();
  for (size_t i = 0; i < outputs; ++i) {
    const auto a = y_ref[i]->Download(), b = y_fused[i]->Download();
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << what << " (reference)";
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << what << " segment " << i;
  }
}

TEST(DecodeFusedPackedGpu, FusedGemvEqualsNormPlusPackedGemv) {
  SPECGEN_SKIP_WITHOUT_GPU();
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}) {
    CheckPackedFusedGemv(t, 1024, {2048, 1024, 1024}, GemvEpilogue::kStore, true, 1056);  // qwen3-0.6b QKV
    CheckPackedFusedGemv(t, 2048, {1024}, GemvEpilogue::kAddTo, false, 1056);             // O + residual
    CheckPackedFusedGemv(t, 1024, {3072, 3072}, GemvEpilogue::kSwiGlu, true, 1056);       // gate/up + SwiGLU
    CheckPackedFusedGemv(t, 3072, {1024}, GemvEpilogue::kAddTo, false, 7);                // down, few blocks
    CheckPackedFusedGemv(t, 1024, {4096}, GemvEpilogue::kStore, true, 5);                 // a head, grid-stride
  }
  CheckPackedFusedGemv(DType::kQ8_0, 96, {40, 8}, GemvEpilogue::kStore, true, 3);  // a partial staged batch
}

// LaunchDecodeInput with a packed table: the token's row as LaunchPackedEmbedding gives it (the CPU's
// dequantized bits), and NaN for a token outside the vocabulary.
TEST(DecodeFusedPackedGpu, DecodeInputGathersAPackedRow) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = ::specgen::kernels::testing::FreshRng();
  const int vocab = 37, dim = 1024;
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const ElemType type = KernelType(t);
    DeviceBuffer<uint8_t> table(::specgen::testing::RandomBlocks(rng, t, vocab, dim));
    DeviceBuffer<int32_t> ids(std::vector<int32_t>{29});
    DeviceBuffer<float> want(static_cast<size_t>(dim)), got(static_cast<size_t>(dim));
    DeviceBuffer<DecodeState> state(1);
    CUDA_OK(LaunchPackedEmbedding(table.get(), type, vocab, dim, ids.get(), 1, want.get(), nullptr));
    DecodeInput in;
    in.state = state.get();
    in.host_token = 29;
    in.pos = 4;
    in.table = table.get();
    in.table_type = type;
    in.vocab = vocab;
    in.dim = dim;
    in.out = got.get();
    CUDA_OK(LaunchDecodeInput(in, nullptr));
    const auto a = want.Download(), b = got.Download();
    for (float v : a) ASSERT_TRUE(std::isfinite(v)) << ElemTypeName(type);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0) << ElemTypeName(type);
    in.host_token = vocab;  // outside the table: NaN, as LaunchEmbedding
    CUDA_OK(LaunchDecodeInput(in, nullptr));
    for (float v : got.Download()) ASSERT_TRUE(std::isnan(v)) << ElemTypeName(type);
  }
}

}  // namespace
}  // namespace specgen::kernels
