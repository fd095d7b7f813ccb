// The packed block types on the device (kernels/packed.cuh) against engine/core's CPU dequantizers, on
// fresh random blocks every run (tests/common/random_blocks.h): dequantization bit
// for bit (fp32, and bf16 as the host rounds it), the embedding gather, the small-batch product against
// the CPU's dequantize-then-multiply within a bound from its reduction, batch invariance bit for bit,
// and the fused epilogues equal to the separate kernels bit for bit.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "kernels/elementwise.cuh"
#include "kernels/gemv.cuh"
#include "kernels/packed.cuh"
#include "tests/common/compare.h"
#include "tests/common/random_blocks.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllWithin;

constexpr ElemType kPackedTypes[] = {ElemType::kQ8_0, ElemType::kQ4_0, ElemType::kQ4_K, ElemType::kQ5_K,
                                     ElemType::kQ6_K};

DType ToDType(ElemType t) {
  switch (t) {
    case ElemType::kQ8_0: return DType::kQ8_0;
    case ElemType::kQ4_0: return DType::kQ4_0;
    case ElemType::kQ4_K: return DType::kQ4_K;
    case ElemType::kQ5_K: return DType::kQ5_K;
    case ElemType::kQ6_K: return DType::kQ6_K;
    default: return DType::kF32;
  }
}

std::vector<uint8_t> RandomBlocks(std::mt19937_64& rng, ElemType t, int64_t rows, int in) {
  return ::specgen::testing::RandomBlocks(rng, ToDType(t), rows, in);
}

std::vector<float> CpuDequant(ElemType t, const std::vector<uint8_t>& blocks, int64_t rows, int in) {
  std::vector<float> y(static_cast<size_t>(rows * in));
  const absl::Status s = DequantizeRows(ToDType(t), blocks.data(), rows, in, y.data());
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// A NaN-safe bitwise comparison, naming the first differing element.
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << what << ": element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(PackedGpu, DequantizeEqualsCpuBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    // 768 inputs: Q6_K rows of 630 bytes, so rows (and Q8_0/Q4_0 blocks) start 2 mod 4 as well as 0.
    for (int in : {768, 2048}) {
      const int64_t rows = 37;
      const auto blocks = RandomBlocks(rng, t, rows, in);
      const auto cpu = CpuDequant(t, blocks, rows, in);
      DeviceBuffer<uint8_t> dw(blocks);
      DeviceBuffer<float> dy(size_t(rows) * in);
      CUDA_OK(LaunchDequantizePacked(dw.get(), t, 0, rows, in, dy.get(), nullptr, nullptr));
      ExpectSameBits(dy.Download(), cpu, std::string("fp32 in=") + std::to_string(in));
      // bf16 of rows 5..: the host's rounding of the same values (what Upload stored before).
      const int64_t row0 = 5, n_rows = rows - row0;
      DeviceBuffer<uint16_t> db(size_t(n_rows) * in);
      CUDA_OK(LaunchDequantizePacked(dw.get(), t, row0, n_rows, in, nullptr, db.get(), nullptr));
      const auto bf = db.Download();
      for (size_t i = 0; i < bf.size(); ++i) {
        ASSERT_EQ(bf[i], F32ToBf16(cpu[size_t(row0) * in + i])) << "bf16 element " << i << " in=" << in;
      }
    }
  }
}

TEST(PackedGpu, EmbeddingEqualsCpuRows) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    const int64_t vocab = 301;
    const int dim = 1280;
    const auto blocks = RandomBlocks(rng, t, vocab, dim);
    const auto cpu = CpuDequant(t, blocks, vocab, dim);
    const std::vector<int32_t> ids = {0, 300, 17, 17, -1, 301, 150};
    DeviceBuffer<uint8_t> dw(blocks);
    DeviceBuffer<int32_t> did(ids);
    DeviceBuffer<float> dout(ids.size() * dim);
    CUDA_OK(LaunchPackedEmbedding(dw.get(), t, vocab, dim, did.get(), static_cast<int>(ids.size()), dout.get(),
                                  nullptr));
    const auto out = dout.Download();
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int c = 0; c < dim; ++c) {
        const float a = out[i * dim + c];
        if (ids[i] < 0 || ids[i] >= vocab) {
          ASSERT_TRUE(std::isnan(a)) << "id " << ids[i] << " col " << c;
        } else {
          const float b = cpu[size_t(ids[i]) * dim + c];
          ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "token " << i << " col " << c << ": " << a << " vs " << b;
        }
      }
    }
  }
}

// Against the CPU's dequantized weights multiplied in double. Both sides multiply the very same
// dequantized values (the test above), so only the GPU's fp32 accumulation differs: |error| <=
// in · 2^-24 · Σ_k |w_k x_k| bounds any order of summing in fp32 (each of the in − 1 additions and the
// fmaf roundings contributes at most 2^-24 of a partial sum, itself at most Σ|w x|). A wrong element,
// scale or sub-block errs by about |w x| for a term, far above it.
void CheckPackedGemv(std::mt19937_64& rng, ElemType t, int n, int out, int in) {
  const auto blocks = RandomBlocks(rng, t, out, in);
  const auto w = CpuDequant(t, blocks, out, in);
  const auto x = testing::RandomNormal(rng, size_t(n) * in);
  std::vector<double> ref(size_t(n) * out, 0.0), abs_sum(size_t(n) * out, 0.0);
  for (int tok = 0; tok < n; ++tok)
    for (int o = 0; o < out; ++o) {
      double s = 0, a = 0;
      for (int k = 0; k < in; ++k) {
        const double p = double(w[size_t(o) * in + k]) * x[size_t(tok) * in + k];
        s += p;
        a += std::fabs(p);
      }
      ref[size_t(tok) * out + o] = s;
      abs_sum[size_t(tok) * out + o] = a;
    }
  DeviceBuffer<uint8_t> dw(blocks);
  DeviceBuffer<float> dx(x), dy(size_t(n) * out);
  CUDA_OK(LaunchGemv(dw.get(), t, dx.get(), dy.get(), n, out, in, nullptr));
  ExpectAllWithin(dy.Download(), ref, [&](size_t i) { return in * 0x1p-24 * abs_sum[i]; },
                  std::string("packed gemv ") + ElemTypeName(t) + " n=" + std::to_string(n) +
                      " in=" + std::to_string(in));
}

TEST(PackedGpu, GemvMatchesCpuDequantizedProduct) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    for (int n : {1, 2, 4, 7, 16}) CheckPackedGemv(rng, t, n, 133, 2048);
    CheckPackedGemv(rng, t, 3, 61, 768);    // fewer chunks than lanes; Q6_K rows 2 mod 4
    CheckPackedGemv(rng, t, 16, 40, 5120);  // a lane's chunks over several steps, a partial last step
    if (BlockElems(t) == 32) CheckPackedGemv(rng, t, 5, 50, 96);  // three blocks a row
  }
}

// docs/design.md §6.6: a row's result must not depend on how many tokens share the call, nor on the
// kernel the batch size picks (1, up to 4, up to 16 tokens).
TEST(PackedGpu, BatchInvariantBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    const int out = 300, in = 2304;
    DeviceBuffer<uint8_t> dw(RandomBlocks(rng, t, out, in));
    DeviceBuffer<float> dx(testing::RandomNormal(rng, size_t(kGemvMaxTokens) * in));
    DeviceBuffer<float> dy(size_t(kGemvMaxTokens) * out);
    CUDA_OK(LaunchGemv(dw.get(), t, dx.get(), dy.get(), kGemvMaxTokens, out, in, nullptr));
    const auto full = dy.Download();
    for (int n = 1; n <= kGemvMaxTokens; ++n) {
      for (int t0 : {0, kGemvMaxTokens - n}) {
        dy.Poison();
        CUDA_OK(LaunchGemv(dw.get(), t, dx.get() + size_t(t0) * in, dy.get(), n, out, in, nullptr,
                           GemvOrder::kTensorCores));  // packed weights have one order under either
        const auto part = dy.Download();
        for (int r = 0; r < n; ++r)
          for (int o = 0; o < out; ++o) {
            const float a = part[size_t(r) * out + o], b = full[size_t(t0 + r) * out + o];
            ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "n=" << n << " row " << t0 + r << " out " << o;
          }
      }
    }
  }
}

// LaunchGemvSegments on packed weights against LaunchGemv per matrix (+ LaunchAdd / LaunchSwiGlu).
TEST(PackedGpu, SegmentsEqualSeparateKernelsBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    const int in = 1024, rows[3] = {96, 32, 33};
    DeviceBuffer<uint8_t> w0(RandomBlocks(rng, t, rows[0], in)), w1(RandomBlocks(rng, t, rows[1], in)),
        w2(RandomBlocks(rng, t, rows[2], in)), wu(RandomBlocks(rng, t, rows[0], in));
    for (int n : {1, 3, 16}) {
      DeviceBuffer<float> dx(testing::RandomNormal(rng, size_t(n) * in));
      // kStore over three matrices.
      DeviceBuffer<float> y0(size_t(n) * rows[0]), y1(size_t(n) * rows[1]), y2(size_t(n) * rows[2]);
      const GemvSegment segs[3] = {{w0.get(), y0.get(), rows[0]}, {w1.get(), y1.get(), rows[1]},
                                   {w2.get(), y2.get(), rows[2]}};
      CUDA_OK(LaunchGemvSegments(segs, 3, t, dx.get(), n, in, GemvEpilogue::kStore, nullptr));
      const void* ws[3] = {w0.get(), w1.get(), w2.get()};
      const DeviceBuffer<float>* ys[3] = {&y0, &y1, &y2};
      for (int i = 0; i < 3; ++i) {
        DeviceBuffer<float> one(size_t(n) * rows[i]);
        CUDA_OK(LaunchGemv(ws[i], t, dx.get(), one.get(), n, rows[i], in, nullptr));
        ExpectSameBits(ys[i]->Download(), one.Download(), "segment " + std::to_string(i) + " n=" + std::to_string(n));
      }
      // kAddTo: y + W x against LaunchGemv then LaunchAdd.
      const auto base = testing::RandomNormal(rng, size_t(n) * rows[0]);
      DeviceBuffer<float> acc(base), sep(base), prod(size_t(n) * rows[0]);
      const GemvSegment add{w0.get(), acc.get(), rows[0]};
      CUDA_OK(LaunchGemvSegments(&add, 1, t, dx.get(), n, in, GemvEpilogue::kAddTo, nullptr));
      CUDA_OK(LaunchGemv(w0.get(), t, dx.get(), prod.get(), n, rows[0], in, nullptr));
      CUDA_OK(LaunchAdd(sep.get(), prod.get(), sep.get(), int64_t(n) * rows[0], nullptr));
      ExpectSameBits(acc.Download(), sep.Download(), "add n=" + std::to_string(n));
      // kSwiGlu: silu(gate x) * (up x) against two LaunchGemv and LaunchSwiGlu.
      DeviceBuffer<float> fused(size_t(n) * rows[0]), g(size_t(n) * rows[0]), u(size_t(n) * rows[0]),
          gu(size_t(n) * rows[0]);
      const GemvSegment sw[2] = {{w0.get(), fused.get(), rows[0]}, {wu.get(), fused.get(), rows[0]}};
      CUDA_OK(LaunchGemvSegments(sw, 2, t, dx.get(), n, in, GemvEpilogue::kSwiGlu, nullptr));
      CUDA_OK(LaunchGemv(w0.get(), t, dx.get(), g.get(), n, rows[0], in, nullptr));
      CUDA_OK(LaunchGemv(wu.get(), t, dx.get(), u.get(), n, rows[0], in, nullptr));
      CUDA_OK(LaunchSwiGlu(g.get(), u.get(), gu.get(), int64_t(n) * rows[0], nullptr));
      ExpectSameBits(fused.Download(), gu.Download(), "swiglu n=" + std::to_string(n));
    }
  }
}

TEST(PackedGpu, RejectsRowsOfPartialBlocks) {
  SPECGEN_SKIP_WITHOUT_GPU();
  DeviceBuffer<uint8_t> dw(size_t{4096});
  DeviceBuffer<float> dx(size_t{512}), dy(size_t{64});
  EXPECT_EQ(LaunchGemv(dw.get(), ElemType::kQ4_K, dx.get(), dy.get(), 1, 4, 128, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDequantizePacked(dw.get(), ElemType::kQ8_0, 0, 1, 48, dy.get(), nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDequantizePacked(dw.get(), ElemType::kBF16, 0, 1, 64, dy.get(), nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace specgen::kernels
