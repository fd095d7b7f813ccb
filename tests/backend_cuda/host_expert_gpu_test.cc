// The host expert path against the GPU (issue 44): one routed expert computed on the host CPU
// (moe/host/host_expert.h) equals, bit for bit, the GPU's per-expert ops (MatMul gate, MatMul up,
// SwiGlu, MatMul down: the host-routed path, itself tested bit for bit against the device-routed
// kernels in cuda_backend_packed_test) for packed gate/up and down types and n = 1..16; and the GPU's
// SwiGLU equals the host's portable silu (engine/core/portable_silu.h) on a sweep of the float range.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/portable_silu.h"
#include "gtest/gtest.h"
#include "moe/host/host_expert.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/random_blocks.h"

namespace specgen {
namespace {

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;  // NaN payloads are the compiler's (design §12.1)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

class HostExpertGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECGEN_SKIP_WITHOUT_CUDA();
    gpu_ = testing::TestCudaBackend(size_t{1} << 30);
    ASSERT_NE(gpu_, nullptr);
  }
  std::vector<float> Run(const Buffer& b) {
    std::vector<float> v(b.rows() * b.cols());
    EXPECT_TRUE(gpu_->Read(b, v).ok());
    return v;
  }
  std::unique_ptr<CudaBackend> gpu_;
  std::mt19937_64 rng_{4405};
};

TensorView View(const moe_host::PackedMatrix& m) {
  TensorView t;
  t.dtype = m.type, t.ndim = 2, t.shape = {m.rows, m.cols, 0, 0};
  t.data = m.data, t.bytes = moe_host::PackedRowBytes(m) * static_cast<size_t>(m.rows);
  return t;
}

TEST_F(HostExpertGpu, HostExpertEqualsTheGpusPerExpertOps) {
  const int64_t hidden = 1024, ffn = 512;
  moe_host::HostPool pool;
  struct Types { DType gate_up, down; };
  for (Types types : {Types{DType::kQ4_K, DType::kQ6_K}, Types{DType::kQ8_0, DType::kQ8_0},
                      Types{DType::kQ5_K, DType::kQ4_0}, Types{DType::kQ6_K, DType::kQ5_K},
                      Types{DType::kMXFP4, DType::kMXFP4}}) {
    const auto gate = testing::RandomBlocks(rng_, types.gate_up, ffn, hidden);
    const auto up = testing::RandomBlocks(rng_, types.gate_up, ffn, hidden);
    const auto down = testing::RandomBlocks(rng_, types.down, hidden, ffn);
    const moe_host::HostExpert e{{types.gate_up, gate.data(), ffn, hidden}, {types.gate_up, up.data(), ffn, hidden},
                                 {types.down, down.data(), hidden, ffn}};
    auto wg = *gpu_->Upload(View(e.gate), "gate");
    auto wu = *gpu_->Upload(View(e.up), "up");
    auto wd = *gpu_->Upload(View(e.down), "down");
    for (int n = 1; n <= 16; ++n) {
      std::normal_distribution<float> normal(0.f, 1.f);
      std::vector<float> x(static_cast<size_t>(n * hidden));
      for (float& v : x) v = normal(rng_);
      auto xb = *gpu_->NewBuffer(n, hidden), g = *gpu_->NewBuffer(n, ffn), u = *gpu_->NewBuffer(n, ffn);
      auto y = *gpu_->NewBuffer(n, hidden);
      ASSERT_TRUE(gpu_->Write(x, xb.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*xb, *wg, g.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*xb, *wu, u.get()).ok());
      ASSERT_TRUE(gpu_->SwiGlu(*g, *u, g.get()).ok());
      ASSERT_TRUE(gpu_->MatMul(*g, *wd, y.get()).ok());
      const std::vector<float> want = Run(*y);
      for (moe_host::Isa isa : moe_host::SupportedIsas()) {
        moe_host::HostExpertRunner runner(pool, isa);
        std::vector<float> got(want.size());
        ASSERT_TRUE(runner.Run(e, x.data(), n, got.data()).ok());
        ExpectSameBits(got, want, std::string(Name(types.gate_up)) + "/" + std::string(Name(types.down)) +
                                      " n=" + std::to_string(n) + " " + std::string(moe_host::IsaName(isa)));
      }
    }
  }
}

TEST_F(HostExpertGpu, SwiGluEqualsThePortableSiluOnTheHost) {
  // Every 4099th float bit pattern (both signs: normal, subnormal, ±inf, NaN) as g, u = 1.5.
  std::vector<float> g;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
    const uint32_t bits = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &bits, 4);
    g.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> u(g.size(), 1.5f);
  auto gb = *gpu_->NewBuffer(1, n), ub = *gpu_->NewBuffer(1, n);
  ASSERT_TRUE(gpu_->Write(g, gb.get()).ok());
  ASSERT_TRUE(gpu_->Write(u, ub.get()).ok());
  ASSERT_TRUE(gpu_->SwiGlu(*gb, *ub, gb.get()).ok());
  std::vector<float> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = portable::SiluMul(g[i], u[i]);
  ExpectSameBits(Run(*gb), want, "SwiGlu");
}

}  // namespace
}  // namespace specgen
