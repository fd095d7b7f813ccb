// TransformerOptions::expert_cache_slots on a backend without streaming (the CPU, whose weights are host
// memory already): the experts are uploaded as usual, the model says it does not stream, its stats
// call is an error, and its logits are the resident model's bit for bit.
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

TEST(ExpertCacheSlotsOption, CpuBackendKeepsExpertsResident) {
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kF32, 5);
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const LoadedModel> model = std::move(w).value();
  CpuBackend be(1);
  TransformerOptions o;
  o.max_context = 64;
  auto resident = Transformer::Create(model, &be, o);
  o.expert_cache_slots = 2;
  auto streamed = Transformer::Create(model, &be, o);
  ASSERT_TRUE(resident.ok() && streamed.ok());
  EXPECT_FALSE((*streamed)->streams_experts());
  EXPECT_FALSE((*streamed)->expert_stream_stats().ok());
  const std::vector<int32_t> ids = {5, 17, 200, 3, 3, 99, 250, 1, 42};
  std::vector<float> a, b;
  ASSERT_TRUE((*resident)->Forward(ids, &a).ok());
  ASSERT_TRUE((*streamed)->Forward(ids, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// The same for the general MoE models (issue 45): a layer marked to stream uploads its expert biases
// first (they stay resident where experts do stream); with no streaming the experts follow, each
// bias once, and the logits are the resident model's. Host routing asked for explicitly
// (device_routed_experts = false) is the CPU's only routing anyway: the same bits again.
TEST(ExpertCacheSlotsOption, CpuBackendKeepsGeneralMoeExpertsResident) {
  for (const char* preset : {"tiny-gptoss", "tiny-glm4moe"}) {
    auto spec = SynthSpec(preset);
    ASSERT_TRUE(spec.ok());
    auto w = SynthWeights(*spec, DType::kF32, 5);
    ASSERT_TRUE(w.ok()) << w.status();
    std::shared_ptr<const LoadedModel> model = std::move(w).value();
    CpuBackend be(1);
    TransformerOptions o;
    o.max_context = 64;
    auto resident = Transformer::Create(model, &be, o);
    o.expert_cache_slots = 2;
    auto streamed = Transformer::Create(model, &be, o);
    o.expert_cache_slots = -1;
    o.device_routed_experts = false;
    auto host = Transformer::Create(model, &be, o);
    ASSERT_TRUE(resident.ok()) << resident.status();
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_FALSE((*streamed)->streams_experts());
    // Every weight once: the same resident bytes.
    EXPECT_EQ((*streamed)->resident_bytes(), (*resident)->resident_bytes()) << preset;
    const std::vector<int32_t> ids = {5, 17, 200, 3, 3, 99, 250, 1, 42};
    std::vector<float> a, b, c;
    ASSERT_TRUE((*resident)->Forward(ids, &a).ok());
    ASSERT_TRUE((*streamed)->Forward(ids, &b).ok());
    ASSERT_TRUE((*host)->Forward(ids, &c).ok());
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << preset;
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0) << preset;
  }
}

}  // namespace
}  // namespace specgen
