// The general MoE models' experts routed on the device (issue 45: Backend::RouteAndRunExperts with
// RouterParams and ExpertFfnOptions, biases in the expert set's tables) against host routing on the same
// backend (RunRoutedExperts: RouteWith read by the host, then per expert GatherRows, MatMul, AddBias,
// SwiGlu or SwiGluClamped, MatMul, AddBias, ScatterAddScaled), bit for bit, no tolerance, in variants:
//  - gpt-oss: biases on gate, up and down, the clamped SwiGLU, top-k then softmax;
//  - GLM-4.5: sigmoid routing with a selection bias, expert groups and a routed scale, plain SwiGLU
//    (the plain kernels behind a sigmoid router);
//  - bf16 biases under a softmax router with a routed scale (the plan kernel's multiply);
//  - a down bias alone with the clamp, sigmoid routing without renormalization.
// The clamp limit is taken from the gate products' own scale, so that it cuts some activations and not
// others (checked), and biases are of the products' size: a device path that dropped or misplaced any
// of them would differ. Every packed type (gate, up and down of it; MXFP4 included) under both layouts
// of the packed products (kernels::PackedLayout) for n = 1..16 tokens; f32, f16 and bf16 under each
// reduction order, in shapes that take the GEMV, the row kernel and the tensor-core tiles. Also: the
// device path waits for nothing, and `accumulate` adds Add's bits. Skips without a device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "gtest/gtest.h"
#include "kernels/gemv.cuh"
#include "kernels/packed.cuh"
#include "kernels/routed_experts.cuh"
#include "tests/common/gpu_test_env.h"
#include "tests/common/random_blocks.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen {
namespace {

constexpr DType kPacked[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

struct Variant {
  const char* name;
  bool bias[3];  // gate, up, down
  DType bias_type;
  bool clamped;
  RouterNorm norm;
  bool selection_bias;
  int groups, groups_used;
  float scale;
  int k;
};
constexpr Variant kVariants[] = {
    {"gpt-oss", {true, true, true}, DType::kF32, true, RouterNorm::kTopKThenSoftmax, false, 1, 1, 1.0f, 4},
    {"glm-4.5", {false, false, false}, DType::kF32, false, RouterNorm::kSigmoidTopKRenormalize, true, 4, 2, 2.5f, 4},
    {"bf16 biases, scaled softmax", {true, true, true}, DType::kBF16, false, RouterNorm::kSoftmaxTopKRenormalize,
     false, 1, 1, 1.5f, 3},
    {"down bias, clamped, sigmoid", {false, false, true}, DType::kF32, true, RouterNorm::kSigmoidTopK, false, 1, 1,
     1.0f, 2},
};
constexpr int kExperts = 8;

std::vector<float> Normal(std::mt19937_64& rng, size_t n, float sd = 1.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Host bytes of uploaded weights (kept alive beside them) and the uploads.
struct Uploads {
  std::deque<std::vector<uint8_t>> bytes;
  std::vector<std::unique_ptr<Weight>> weights;

  // A [rows, cols] (rows 1: a vector) f32, f16 or bf16 weight of `values` rounded to `t`.
  const Weight* Plain(CudaBackend& be, DType t, int64_t rows, int64_t cols, const std::vector<float>& values) {
    std::vector<uint8_t>& b = bytes.emplace_back(values.size() * (t == DType::kF32 ? 4 : 2));
    for (size_t i = 0; i < values.size(); ++i) {
      if (t == DType::kF32) {
        std::memcpy(b.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = t == DType::kBF16 ? F32ToBf16(values[i]) : F32ToF16(values[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
    return Add(be, t, rows, cols, b);
  }
  const Weight* Packed(CudaBackend& be, std::mt19937_64& rng, DType t, int64_t rows, int64_t cols) {
    return Add(be, t, rows, cols, bytes.emplace_back(testing::RandomBlocks(rng, t, rows, cols)));
  }
  const Weight* Add(CudaBackend& be, DType t, int64_t rows, int64_t cols, const std::vector<uint8_t>& b) {
    TensorView v;
    v.dtype = t;
    v.ndim = rows == 1 ? 1 : 2;
    v.shape[0] = rows == 1 ? cols : rows;
    v.shape[1] = cols;
    v.data = b.data();
    v.bytes = b.size();
    auto w = be.Upload(v, "w");
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return nullptr;
    weights.push_back(std::move(*w));
    return weights.back().get();
  }
};

std::unique_ptr<Buffer> GpuBuffer(CudaBackend& be, int64_t rows, int64_t cols, const std::vector<float>& v) {
  auto b = *be.NewBuffer(rows, cols);
  EXPECT_TRUE(be.Write(v, b.get()).ok());
  return b;
}

std::vector<float> Read(CudaBackend& be, const Buffer& b) {
  std::vector<float> v(b.rows() * b.cols());
  EXPECT_TRUE(be.Read(b, v).ok());
  return v;
}

// "" when a and b have the same bits and a is finite throughout, else the first difference.
std::string Difference(const std::vector<float>& a, const std::vector<float>& b, int64_t cols) {
  if (a.size() != b.size()) return "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || std::memcmp(&a[i], &b[i], 4) != 0) {
      return "first at [" + std::to_string(i / cols) + ", " + std::to_string(i % cols) +
             "]: device " + std::to_string(a[i]) + ", host " + std::to_string(b[i]);
    }
  }
  return "";
}

// Every variant on one layer's matrices (gate/up [ffn, hidden], down [hidden, ffn] for kExperts experts),
// for each n of `ns`.
void CheckVariants(CudaBackend& gpu, std::mt19937_64& rng, Uploads& up, const ExpertWeights& matrices, int hidden,
                   int ffn, const std::vector<int>& ns, const std::string& what) {
  // The clamp limit: the median |gate product| over 16 random tokens of expert 0 (random blocks'
  // scales spread over 2^14, so a median, not an RMS), so that both sides of it occur; biases are of
  // that size too.
  float limit = 0.f;
  {
    auto x = GpuBuffer(gpu, 16, hidden, Normal(rng, size_t(16) * hidden));
    auto g = *gpu.NewBuffer(16, ffn);
    ASSERT_TRUE(gpu.MatMul(*x, *matrices.gate[0], g.get()).ok());
    const std::vector<float> gv = Read(gpu, *g);
    std::vector<float> mag(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) mag[i] = std::fabs(gv[i]);
    std::nth_element(mag.begin(), mag.begin() + mag.size() / 2, mag.end());
    limit = mag[mag.size() / 2];
    ASSERT_GT(limit, 0.f) << what;
    const auto above = std::count_if(gv.begin(), gv.end(), [&](float v) { return v > limit; });
    ASSERT_GT(above, static_cast<long>(gv.size() / 20)) << what << ": the clamp would not engage";
    ASSERT_LT(above, static_cast<long>(gv.size() * 19 / 20)) << what << ": the clamp would cut everything";
  }
  for (const Variant& v : kVariants) {
    ExpertWeights refs = matrices;
    std::vector<const Weight*>* lists[3] = {&refs.gate_bias, &refs.up_bias, &refs.down_bias};
    for (int role = 0; role < 3; ++role) {
      if (!v.bias[role]) continue;
      const int len = role == 2 ? hidden : ffn;
      for (int e = 0; e < kExperts; ++e) {
        lists[role]->push_back(up.Plain(gpu, v.bias_type, 1, len, Normal(rng, len, limit)));
      }
    }
    RouterParams router;
    router.norm = v.norm;
    router.selection_bias = v.selection_bias ? up.Plain(gpu, DType::kF32, 1, kExperts, Normal(rng, kExperts, 0.5f))
                                             : nullptr;
    router.n_groups = v.groups;
    router.groups_used = v.groups_used;
    router.scale = v.scale;
    ExpertFfnOptions fo;
    if (v.clamped) {
      fo.act = FfnActivation::kSwiGluClamped;
      fo.alpha = 1.702f;
      fo.limit = limit;
    }
    auto set = gpu.PrepareExperts(refs);
    ASSERT_TRUE(set.ok()) << set.status();
    ASSERT_NE(*set, nullptr) << what << " " << v.name << ": these experts must take the device path";
    for (int n : ns) {
      const std::string at = what + " " + v.name + " n=" + std::to_string(n);
      const std::vector<float> nan(size_t(n) * hidden, std::nanf(""));
      auto x = GpuBuffer(gpu, n, hidden, Normal(rng, size_t(n) * hidden));
      auto logits = GpuBuffer(gpu, n, kExperts, Normal(rng, size_t(n) * kExperts, 2.f));
      auto host_out = GpuBuffer(gpu, n, hidden, nan), dev_out = GpuBuffer(gpu, n, hidden, nan);
      auto xe = *gpu.NewBuffer(n, hidden), ye = *gpu.NewBuffer(n, hidden);
      auto ge = *gpu.NewBuffer(n, ffn), ue = *gpu.NewBuffer(n, ffn);
      const absl::Status host = RunRoutedExperts(gpu, *x, *logits, v.k, router, fo, refs,
                                                 {xe.get(), ye.get(), ge.get(), ue.get()}, host_out.get());
      ASSERT_TRUE(host.ok()) << at << ": " << host;
      const SyncCounts before = gpu.syncs();
      auto ran = gpu.RouteAndRunExperts(*x, *logits, v.k, router, fo, **set, dev_out.get(), false);
      ASSERT_TRUE(ran.ok()) << at << ": " << ran.status();
      ASSERT_TRUE(*ran) << at;
      EXPECT_EQ(gpu.syncs().expert_union, before.expert_union) << at << ": the device path read routing";
      EXPECT_EQ(gpu.syncs().other, before.other) << at << ": the device path waited";
      const std::vector<float> d = Read(gpu, *dev_out);
      ASSERT_EQ(Difference(d, Read(gpu, *host_out), hidden), "") << at;
      if (n == 1 || n == 16) {  // accumulate: the sum added to a residual, Add's bits
        const std::vector<float> resid = Normal(rng, nan.size());
        auto added = GpuBuffer(gpu, n, hidden, resid), acc = GpuBuffer(gpu, n, hidden, resid);
        ASSERT_TRUE(gpu.Add(*dev_out, added.get()).ok());
        auto ran_acc = gpu.RouteAndRunExperts(*x, *logits, v.k, router, fo, **set, acc.get(), true);
        ASSERT_TRUE(ran_acc.ok() && *ran_acc) << at;
        EXPECT_EQ(Difference(Read(gpu, *acc), Read(gpu, *added), hidden), "") << at << ": accumulate != Add";
      }
    }
  }
}

std::vector<int> OneToSixteen() {
  std::vector<int> ns;
  for (int n = 1; n <= kernels::kRoutedExpertsMaxTokens; ++n) ns.push_back(n);
  return ns;
}

// Restores the process-wide packed layout when the test ends, failed or not.
struct LayoutGuard {
  ~LayoutGuard() { kernels::SetPackedLayout(kernels::PackedLayout::kAuto); }
};

TEST(CudaGeneralExperts, PackedEqualHostRoutingInBothLayouts) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto gpu = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(gpu, nullptr);
  std::mt19937_64 rng = kernels::testing::FreshRng();
  const int hidden = 512, ffn = 256;  // whole K-quant blocks; hidden != ffn places each bias by its length
  LayoutGuard guard;
  for (DType t : kPacked) {
    Uploads up;
    ExpertWeights m;
    for (int e = 0; e < kExperts; ++e) {
      m.gate.push_back(up.Packed(*gpu, rng, t, ffn, hidden));
      m.up.push_back(up.Packed(*gpu, rng, t, ffn, hidden));
      m.down.push_back(up.Packed(*gpu, rng, t, hidden, ffn));
    }
    for (kernels::PackedLayout layout : {kernels::PackedLayout::kRows, kernels::PackedLayout::kTiles}) {
      kernels::SetPackedLayout(layout);
      CheckVariants(*gpu, rng, up, m, hidden, ffn, OneToSixteen(),
                    std::string(Name(t)) + " " + kernels::PackedLayoutName(layout));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

class CudaGeneralExpertsPlain : public ::testing::TestWithParam<kernels::GemvOrder> {};

TEST_P(CudaGeneralExpertsPlain, EqualHostRouting) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto gpu = testing::TestCudaBackend(size_t{1} << 30, GetParam());
  ASSERT_NE(gpu, nullptr);
  std::mt19937_64 rng = kernels::testing::FreshRng();
  struct Shape {
    int hidden, ffn;
  };
  // {64, 40}: the GEMV over hidden (16-bit types), the row kernel over ffn; {44, 36}: the row kernel
  // throughout; {256, 512}: inputs that are multiples of 32, split over parts in the tensor-core order.
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Shape s : {Shape{64, 40}, Shape{44, 36}, Shape{256, 512}}) {
      Uploads up;
      ExpertWeights m;
      for (int e = 0; e < kExperts; ++e) {
        m.gate.push_back(up.Plain(*gpu, t, s.ffn, s.hidden, Normal(rng, size_t(s.ffn) * s.hidden, 0.2f)));
        m.up.push_back(up.Plain(*gpu, t, s.ffn, s.hidden, Normal(rng, size_t(s.ffn) * s.hidden, 0.2f)));
        m.down.push_back(up.Plain(*gpu, t, s.hidden, s.ffn, Normal(rng, size_t(s.hidden) * s.ffn, 0.2f)));
      }
      CheckVariants(*gpu, rng, up, m, s.hidden, s.ffn, {1, 2, 5, 8, 9, 16},
                    std::string(Name(t)) + " hidden " + std::to_string(s.hidden) + " ffn " + std::to_string(s.ffn));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GemvOrders, CudaGeneralExpertsPlain, ::testing::ValuesIn(kernels::kGemvOrders),
                         [](const ::testing::TestParamInfo<kernels::GemvOrder>& info) {
                           return std::string(kernels::GemvOrderName(info.param));
                         });

// Biases of mixed element types, or packed: no device set (the caller routes on the host, which takes
// any mix), not a wrong launch; biases for some experts only: an error.
TEST(CudaGeneralExperts, BiasesTheTablesCannotHoldAreRefused) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto gpu = testing::TestCudaBackend(size_t{256} << 20);
  ASSERT_NE(gpu, nullptr);
  std::mt19937_64 rng = kernels::testing::FreshRng();
  Uploads up;
  ExpertWeights m;
  for (int e = 0; e < 2; ++e) {
    m.gate.push_back(up.Plain(*gpu, DType::kBF16, 32, 64, Normal(rng, 32 * 64)));
    m.up.push_back(up.Plain(*gpu, DType::kBF16, 32, 64, Normal(rng, 32 * 64)));
    m.down.push_back(up.Plain(*gpu, DType::kBF16, 64, 32, Normal(rng, 64 * 32)));
  }
  ExpertWeights mixed = m;
  mixed.gate_bias = {up.Plain(*gpu, DType::kF32, 1, 32, Normal(rng, 32)), up.Plain(*gpu, DType::kF32, 1, 32, Normal(rng, 32))};
  mixed.down_bias = {up.Plain(*gpu, DType::kBF16, 1, 64, Normal(rng, 64)),
                     up.Plain(*gpu, DType::kBF16, 1, 64, Normal(rng, 64))};
  auto set = gpu->PrepareExperts(mixed);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(*set, nullptr);
  ExpertWeights partial = m;
  partial.up_bias = {up.Plain(*gpu, DType::kF32, 1, 32, Normal(rng, 32))};
  EXPECT_FALSE(gpu->PrepareExperts(partial).ok());
  ExpertWeights wrong_length = m;
  wrong_length.down_bias = {up.Plain(*gpu, DType::kF32, 1, 32, Normal(rng, 32)),
                            up.Plain(*gpu, DType::kF32, 1, 32, Normal(rng, 32))};  // down's is [hidden]
  EXPECT_FALSE(gpu->PrepareExperts(wrong_length).ok());
}

}  // namespace
}  // namespace specgen
