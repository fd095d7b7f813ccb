// Router softmax → top-k → weights in its three conventions, against a CPU loop.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/router.cuh"
#include "tests/common/compare.h"
#include "tests/kernels/gpu_test_util.h"

namespace specgen::kernels {
namespace {

using testing::DeviceBuffer;
using ::specgen::testing::ExpectAllClose;

void CheckRouter(int n, int experts, int k, RouterMode mode, bool with_ties) {
  auto rng = testing::FreshRng();
  auto logits = testing::RandomNormal(rng, size_t(n) * experts, 2.f);
  if (with_ties) {  // coarse values: many exact ties, which must go to the lower expert index
    for (auto& x : logits) x = std::round(x);
  }
  std::vector<double> ref_w(size_t(n) * k);
  std::vector<int32_t> ref_id(size_t(n) * k);
  for (int t = 0; t < n; ++t) {
    const float* l = &logits[size_t(t) * experts];
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    const double m = *std::max_element(l, l + experts);
    double z = 0, zk = 0, sel = 0;
    for (int e = 0; e < experts; ++e) z += std::exp(l[e] - m);
    for (int r = 0; r < k; ++r) {
      zk += std::exp(double(l[order[r]]) - l[order[0]]);
      sel += std::exp(l[order[r]] - m) / z;
    }
    for (int r = 0; r < k; ++r) {
      const double p = std::exp(l[order[r]] - m) / z;
      ref_id[size_t(t) * k + r] = order[r];
      ref_w[size_t(t) * k + r] = mode == RouterMode::kSoftmaxTopK        ? p
                                 : mode == RouterMode::kSoftmaxTopKRenorm ? p / sel
                                 : std::exp(double(l[order[r]]) - l[order[0]]) / zk;
    }
  }
  DeviceBuffer<float> dl(logits), dw(size_t(n) * k);
  DeviceBuffer<int32_t> di(size_t(n) * k);
  CUDA_OK(LaunchRouterTopK(dl.get(), n, experts, k, mode, dw.get(), di.get(), nullptr));
  EXPECT_EQ(di.Download(), ref_id) << "chosen experts (ties to the lower index)";
  // fp32 softmax: the sum over E terms errs relatively by <= E u, expf and the divisions by a few
  // u; renormalization over k more terms adds k u.
  const double rtol = (experts + k + 8) * 0x1p-24;
  ExpectAllClose(dw.Download(), ref_w, 0.0, rtol, "router weights");
}

TEST(RouterGpu, ThreeModes) {
  SPECGEN_SKIP_WITHOUT_GPU();
  CheckRouter(9, 128, 8, RouterMode::kSoftmaxTopK, false);
  CheckRouter(9, 128, 8, RouterMode::kSoftmaxTopKRenorm, false);
  CheckRouter(9, 8, 2, RouterMode::kTopKSoftmax, false);
  CheckRouter(4, 160, 6, RouterMode::kSoftmaxTopKRenorm, true);
  CheckRouter(3, 64, 8, RouterMode::kTopKSoftmax, true);
}

}  // namespace
}  // namespace specgen::kernels
