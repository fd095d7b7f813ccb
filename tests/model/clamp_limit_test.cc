// gpt-oss's clamped SwiGLU takes its limit (and alpha) from the model's config: config.json's
// swiglu_limit / swiglu_alpha (GGUF: gpt-oss.swiglu_limit, which llama.cpp does not write: 7 then).
// A config with a limit other than 7 gives, on the CPU reference, the expert output computed by hand
// with that limit.
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/io/hf_config.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::string GptOssTinyConfig() {
  std::ifstream in(std::string(SPECGEN_SOURCE_DIR) + "/tests/data/models/gptoss-tiny/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixture's config (a GptOssForCausalLM as transformers writes it) with its "swiglu_limit": 7.0
// replaced by `with`.
absl::StatusOr<ModelSpec> SpecWith(const std::string& with) {
  std::string text = GptOssTinyConfig();
  const std::string key = "\"swiglu_limit\": 7.0";
  const size_t at = text.find(key);
  if (at == std::string::npos) return absl::NotFoundError("the fixture has no swiglu_limit");
  text.replace(at, key.size(), with);
  return ModelSpecFromHfConfigText(text, "config.json");
}

TEST(ClampLimit, ReadFromTheConfig) {
  auto seven = SpecWith("\"swiglu_limit\": 7.0");
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(seven->expert_act, FfnActivation::kSwiGluClamped);
  EXPECT_EQ(seven->swiglu_limit, 7.0f);
  EXPECT_EQ(seven->swiglu_alpha, 1.702f);  // transformers' GptOssExperts default; the config has none
  auto other = SpecWith("\"swiglu_limit\": 2.5, \"swiglu_alpha\": 1.5");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->swiglu_limit, 2.5f);
  EXPECT_EQ(other->swiglu_alpha, 1.5f);
  auto absent = SpecWith("\"unused\": 0");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->swiglu_limit, 7.0f);
  // A limit that clamps nothing sensibly is refused, naming the key.
  auto bad = SpecWith("\"swiglu_limit\": -1.0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("swiglu_limit"), std::string::npos) << bad.status();
}

class ClampedExpert : public ::testing::Test {
 protected:
  std::unique_ptr<Buffer> Buf(int64_t rows, int64_t cols, const std::vector<float>& data) {
    auto b = be_.NewBuffer(rows, cols).value();
    EXPECT_TRUE(be_.Write(data, b.get()).ok());
    return b;
  }
  // An f32 weight read in place: `data` must outlive it.
  std::unique_ptr<Weight> Wt(int64_t rows, int64_t cols, const std::vector<float>& data) {
    TensorView t;
    t.dtype = DType::kF32;
    t.ndim = rows == 1 ? 1 : 2;
    t.shape = {rows == 1 ? cols : rows, rows == 1 ? 0 : cols};
    t.data = data.data();
    t.bytes = data.size() * sizeof(float);
    return be_.Upload(t, "test").value();
  }
  CpuBackend be_{1};
};

// One token, two experts of hidden 2 and width 2, top-1 (gpt-oss's top-k then softmax: the one weight
// is 1). Expert 0, chosen by the router logits {3, 0}:
//   gate = I·x + (0.5, 0)       = (4.5, −3)        for x = (4, −3)
//   up   = diag(1, −1)·x + (0, 0.25) = (4, 3.25)
//   limit 2.5: gate → min(gate, 2.5) = (2.5, −3); up → clamp(up, ±2.5) = (2.5, 2.5)
//   act  = (up + 1) · gate · σ(α·gate), α = 1.5
//   out  = diag(1, 2)·act + (0.1, −0.1)
// Expert 1 holds other values, so choosing it would show.
TEST_F(ClampedExpert, NonSevenLimitGivesTheHandComputedOutput) {
  auto spec = SpecWith("\"swiglu_limit\": 2.5, \"swiglu_alpha\": 1.5");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<float> gate0 = {1, 0, 0, 1}, up0 = {1, 0, 0, -1}, down0 = {1, 0, 0, 2};
  const std::vector<float> gb0 = {0.5f, 0}, ub0 = {0, 0.25f}, db0 = {0.1f, -0.1f};
  const std::vector<float> gate1 = {2, 2, 2, 2}, up1 = {3, 3, 3, 3}, down1 = {5, 5, 5, 5};
  const std::vector<float> zero2 = {0, 0};
  std::vector<std::unique_ptr<Weight>> keep;
  auto w = [&](int64_t rows, int64_t cols, const std::vector<float>& d) {
    keep.push_back(Wt(rows, cols, d));
    return keep.back().get();
  };
  ExpertWeights ew;
  ew.gate = {w(2, 2, gate0), w(2, 2, gate1)};
  ew.up = {w(2, 2, up0), w(2, 2, up1)};
  ew.down = {w(2, 2, down0), w(2, 2, down1)};
  ew.gate_bias = {w(1, 2, gb0), w(1, 2, zero2)};
  ew.up_bias = {w(1, 2, ub0), w(1, 2, zero2)};
  ew.down_bias = {w(1, 2, db0), w(1, 2, zero2)};
  auto x = Buf(1, 2, {4.0f, -3.0f});
  auto logits = Buf(1, 2, {3.0f, 0.0f});
  auto xe = be_.NewBuffer(1, 2).value(), ye = be_.NewBuffer(1, 2).value();
  auto ge = be_.NewBuffer(1, 2).value(), ue = be_.NewBuffer(1, 2).value();
  auto out = be_.NewBuffer(1, 2).value();
  RouterParams router;
  router.norm = spec->router_norm;
  ASSERT_EQ(router.norm, RouterNorm::kTopKThenSoftmax);
  // The options as Transformer::MoeFfnGeneral builds them from the spec.
  ExpertFfnOptions ffn;
  ffn.act = spec->expert_act;
  ffn.alpha = spec->swiglu_alpha;
  ffn.limit = spec->swiglu_limit;
  ASSERT_TRUE(RunRoutedExperts(be_, *x, *logits, 1, router, ffn, ew, {xe.get(), ye.get(), ge.get(), ue.get()},
                               out.get())
                  .ok());
  std::vector<float> got(2);
  ASSERT_TRUE(be_.Read(*out, got).ok());
  auto sig = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  const double act0 = (2.5 + 1.0) * 2.5 * sig(1.5 * 2.5);
  const double act1 = (2.5 + 1.0) * -3.0 * sig(1.5 * -3.0);
  const double want[2] = {act0 + 0.1, 2.0 * act1 - 0.1};
  // fp32 against double: a handful of roundings of values below 10 (the sigmoid's exp, three
  // products, two sums): 1e-5 relative is ~100 ulps of room.
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << i;

  // The same expert under the default limit 7 (nothing clamped here but nothing else changed) gives a
  // different output: the limit read is the one used.
  ffn.limit = 7.0f;
  ASSERT_TRUE(RunRoutedExperts(be_, *x, *logits, 1, router, ffn, ew, {xe.get(), ye.get(), ge.get(), ue.get()},
                               out.get())
                  .ok());
  std::vector<float> unclamped(2);
  ASSERT_TRUE(be_.Read(*out, unclamped).ok());
  const double u0 = (4.0 + 1.0) * 4.5 * sig(1.5 * 4.5), u1 = (3.25 + 1.0) * -3.0 * sig(1.5 * -3.0);
  EXPECT_NEAR(unclamped[0], u0 + 0.1, 1e-5 * std::abs(u0 + 0.1));
  EXPECT_NEAR(unclamped[1], 2.0 * u1 - 0.1, 1e-5 * std::abs(2.0 * u1 - 0.1));
}

}  // namespace
}  // namespace specgen
