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

}  // namespace
}  // namespace specgen
