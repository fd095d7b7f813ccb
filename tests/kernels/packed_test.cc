// The packed block types on the device (kernels/packed.cuh) against engine/core's CPU dequantizers, on
// fresh random blocks every run (tests/common/random_blocks.h): dequantization bit
// for bit (fp32, and bf16 as the host rounds it), the embedding gather, the packed product equal to the
// CPU's definition bit for bit for 1..64 tokens in either layout, batch invariance bit for bit, the
// fused epilogues equal to the separate kernels bit for bit, and routed experts alike in either layout.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "engine/core/packed_product.h"
#include "engine/core/quant.h"
#include "kernels/elementwise.cuh"
#include "kernels/gemv.cuh"
#include "kernels/packed.cuh"
#include "kernels/routed_experts.cuh"
#include "kernels/router.cuh"
#include "tests/common/compare.h"
#include "tests/common/random_blocks.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllWithin;

constexpr ElemType kPackedTypes[] = {ElemType::kQ8_0, ElemType::kQ4_0, ElemType::kQ4_K, ElemType::kQ5_K,
                                     ElemType::kQ6_K, ElemType::kMXFP4};

DType ToDType(ElemType t) {
  switch (t) {
    case ElemType::kQ8_0: return DType::kQ8_0;
    case ElemType::kQ4_0: return DType::kQ4_0;
    case ElemType::kQ4_K: return DType::kQ4_K;
    case ElemType::kQ5_K: return DType::kQ5_K;
    case ElemType::kQ6_K: return DType::kQ6_K;
    case ElemType::kMXFP4: return DType::kMXFP4;
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

// A bitwise comparison, naming the first differing element; any NaN equals any NaN (a NaN's payload
// is the device's: the definition says only that the result is NaN).
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << what << ": element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(PackedGpu, DequantizeEqualsCpuBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    // 768 inputs: Q6_K rows of 630 bytes, so rows (and Q8_0/Q4_0 blocks) start 2 mod 4 as well as 0;
    // MXFP4's 17-byte blocks start at every byte alignment.
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

// The packed product's one definition (engine/core/packed_product.h): the GPU's products equal the
// CPU's bit for bit, for every token of any n up to 64 (so batch invariance follows: each token's
// bits are the CPU's for that token alone). The CPU definition's accuracy is tested in
// tests/core/packed_product_test.cc.
void CheckAgainstCpuDefinition(std::mt19937_64& rng, ElemType t, int n, int out, int in,
                               PackedLayout layout = PackedLayout::kAuto) {
  const auto blocks = RandomBlocks(rng, t, out, in);
  auto x = testing::RandomNormal(rng, size_t(n) * in);
  if (n > 2) {
    for (int k = 0; k < 32; ++k) x[size_t(1) * in + k] = 0.f;  // a zero block
    x[size_t(2) * in + 5] = NAN;                                 // a NaN block: that token's row is NaN
  }
  const int nb = in / 32;
  const int64_t row_bytes = PackedRowBytes(t, in);
  std::vector<int8_t> q(size_t(n) * in);
  std::vector<float> d(size_t(n) * nb);
  std::vector<int32_t> sum(size_t(n) * nb);
  for (int tok = 0; tok < n; ++tok) {
    packed_product::QuantizeActivations(&x[size_t(tok) * in], in, &q[size_t(tok) * in], &d[size_t(tok) * nb],
                                        &sum[size_t(tok) * nb]);
  }
  std::vector<float> want(size_t(n) * out);
  for (int o = 0; o < out; ++o) {
    packed_product::UnpackedRow row;
    row.Unpack(ToDType(t), blocks.data() + o * row_bytes, in);
    for (int tok = 0; tok < n; ++tok) {
      want[size_t(tok) * out + o] = row.Product(&q[size_t(tok) * in], &d[size_t(tok) * nb], &sum[size_t(tok) * nb]);
    }
  }
  DeviceBuffer<uint8_t> dw(blocks);
  DeviceBuffer<float> dx(x), dy(size_t(n) * out);
  dy.Poison();
  const GemvSegment seg{dw.get(), dy.get(), out};
  CUDA_OK(LaunchPackedGemvSegments(&seg, 1, t, dx.get(), n, in, GemvEpilogue::kStore, nullptr, layout));
  ExpectSameBits(dy.Download(), want, std::string(ElemTypeName(t)) + " n=" + std::to_string(n) + " out=" +
                                          std::to_string(out) + " in=" + std::to_string(in) + " " +
                                          PackedLayoutName(layout));
}

TEST(PackedGpu, ProductEqualsTheCpuDefinitionBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    for (int n : {1, 2, 3, 5, 8, 9, 16, 17, 31, 64}) CheckAgainstCpuDefinition(rng, t, n, 133, 2048);
    CheckAgainstCpuDefinition(rng, t, 3, 61, 768);    // 24 blocks: slices of 6
    CheckAgainstCpuDefinition(rng, t, 16, 40, 5120);  // long rows
    if (BlockElems(t) == 32) CheckAgainstCpuDefinition(rng, t, 5, 50, 96);  // three blocks: an empty slice
  }
}

// Both layouts (a half-warp a row; tensor-core tiles), forced, at every token bound either takes.
TEST(PackedGpu, BothLayoutsEqualTheCpuDefinitionBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    for (PackedLayout layout : {PackedLayout::kRows, PackedLayout::kTiles}) {
      for (int n : {1, 2, 3, 4, 5, 8, 9, 16, 40}) CheckAgainstCpuDefinition(rng, t, n, 70, 2048, layout);
      CheckAgainstCpuDefinition(rng, t, 6, 37, 768, layout);
      if (BlockElems(t) == 32) CheckAgainstCpuDefinition(rng, t, 3, 19, 96, layout);
    }
  }
}

// Every n from 1 to 64: each token's outputs equal those of the same token computed alone.
TEST(PackedGpu, BatchInvariantUpTo64Tokens) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  constexpr int kMax = kPackedProductMaxTokens;
  for (ElemType t : kPackedTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    const int out = 72, in = 1024;
    DeviceBuffer<uint8_t> dw(RandomBlocks(rng, t, out, in));
    DeviceBuffer<float> dx(testing::RandomNormal(rng, size_t(kMax) * in)), dy(size_t(kMax) * out);
    std::vector<float> alone(size_t(kMax) * out);
    for (int tok = 0; tok < kMax; ++tok) {
      const GemvSegment seg{dw.get(), dy.get(), out};
      CUDA_OK(LaunchPackedGemvSegments(&seg, 1, t, dx.get() + size_t(tok) * in, 1, in, GemvEpilogue::kStore, nullptr));
      const auto one = dy.Download();
      std::copy_n(one.begin(), out, alone.begin() + size_t(tok) * out);
    }
    for (int n = 1; n <= kMax; ++n) {
      dy.Poison();
      const GemvSegment seg{dw.get(), dy.get(), out};
      CUDA_OK(LaunchPackedGemvSegments(&seg, 1, t, dx.get(), n, in, GemvEpilogue::kStore, nullptr));
      auto got = dy.Download();
      got.resize(size_t(n) * out);
      ExpectSameBits(got, std::vector<float>(alone.begin(), alone.begin() + size_t(n) * out), "n=" + std::to_string(n));
    }
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

// The routed experts' two layouts (LaunchRoutedExperts: a half-warp a row; tensor-core tiles) give the
// same bits for every token count they share, with gate/up and down of different packed types. (That
// the product equals MatMul on the gathered rows is CudaPacked.RoutedExpertsWithPerRoleTypesEqualHostRouting.)
TEST(PackedGpu, RoutedExpertsLayoutsAgreeBitForBit) {
  SPECGEN_SKIP_WITHOUT_GPU();
  auto rng = testing::FreshRng();
  const int experts = 12, hidden = 512, ffn = 256, k = 4;
  struct Roles { ElemType gate_up, down; };
  for (Roles roles : {Roles{ElemType::kQ4_K, ElemType::kQ6_K}, Roles{ElemType::kQ8_0, ElemType::kQ4_0},
                      Roles{ElemType::kQ5_K, ElemType::kQ5_K}, Roles{ElemType::kMXFP4, ElemType::kMXFP4}}) {
    const std::string types = std::string(ElemTypeName(roles.gate_up)) + "/" + ElemTypeName(roles.down);
    std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> mats;
    std::vector<const void*> table(3 * size_t(experts));
    for (int m = 0; m < 3 * experts; ++m) {
      const bool down = m >= 2 * experts;
      mats.push_back(std::make_unique<DeviceBuffer<uint8_t>>(down ? RandomBlocks(rng, roles.down, hidden, ffn)
                                                                  : RandomBlocks(rng, roles.gate_up, ffn, hidden)));
      table[m] = mats.back()->get();
    }
    DeviceBuffer<const void*> dtable(table);
    ExpertTables tab;
    tab.gate = dtable.get();
    tab.up = dtable.get() + experts;
    tab.down = dtable.get() + 2 * experts;
    tab.experts = experts;
    tab.hidden = hidden;
    tab.ffn = ffn;
    tab.type = roles.gate_up;
    tab.down_type = roles.down;
    for (int n : {1, 2, 3, 5, 8, 9, 16}) {
      DeviceBuffer<float> x(testing::RandomNormal(rng, size_t(n) * hidden));
      DeviceBuffer<float> logits(testing::RandomNormal(rng, size_t(n) * experts, 2.f));
      DeviceBuffer<float> w(size_t(n) * k);
      DeviceBuffer<int32_t> ids(size_t(n) * k);
      CUDA_OK(LaunchRouterTopK(logits.get(), n, experts, k, RouterMode::kSoftmaxTopKRenorm, w.get(), ids.get(), nullptr));
      const size_t ws_bytes = RoutedExpertsWorkspaceBytes(n, k, hidden, ffn);
      DeviceBuffer<uint8_t> ws(ws_bytes);
      std::vector<float> got[2];
      int i = 0;
      for (PackedLayout layout : {PackedLayout::kRows, PackedLayout::kTiles}) {
        DeviceBuffer<float> out(size_t(n) * hidden);
        CUDA_OK(LaunchRoutedExperts(tab, x.get(), n, ids.get(), w.get(), k, ws.get(), ws_bytes, out.get(), false,
                                    nullptr, kDefaultGemvOrder, layout));
        got[i++] = out.Download();
      }
      for (float v : got[0]) ASSERT_TRUE(std::isfinite(v)) << types << " n=" << n << ": every output written";
      ExpectSameBits(got[0], got[1], types + " n=" + std::to_string(n) + ": rows against tiles");
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
