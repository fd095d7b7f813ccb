// The host expert path on the GPU (docs/design.md §12.1): a streamed target whose passes of at most 16
// positions route on the host and split their experts between the host CPU (moe/host/
// streamed_host_path.h, reading the pinned arena through CudaStreamedExperts::HostView) and the link
// (staged), engine/model/split_routed_experts.h. Skips without a device.
//  - --moe-host only (every expert on the host) and auto with a forced share (some on the host, the
//    rest staged) give the resident model's logits bit for bit: a prefill (the staged path), passes of
//    1..16 positions, greedy decoding; on synth tiny-moe in Q8_0 and in q4_k_m (Q4_K gate/up, Q6_K down
//    in some layers), and the stats count the host's experts, time and activations.
//  - The speculative loop with such a target: greedy output equals the resident target's alone.
//  - Experts the host cannot compute (bf16): the model runs without the path and says why.
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moe/cuda/cuda_streaming.h"
#include "moe/host/streamed_host_path.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/streamed_equality.h"

namespace specgen {
namespace {

using moe_host::HostMode;
using moe_host::StreamedHostPath;

std::shared_ptr<const LoadedModel> TinyMoe(const char* type, uint64_t seed, bool rows_of_256) {
  auto spec = SynthSpec("tiny-moe");
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return nullptr;
  if (rows_of_256) {  // the K-quants' block
    spec->hidden = 256;
    spec->expert_ffn_dim = 256;
    spec->ffn_dim = 256;
    spec->n_heads = 4;
    spec->n_kv_heads = 2;
    spec->head_dim = 64;
  }
  auto mix = ParseExportType(type);
  EXPECT_TRUE(mix.ok()) << mix.status();
  if (!mix.ok()) return nullptr;
  auto m = SynthWeights(*spec, *mix, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::shared_ptr<const LoadedModel>(std::move(m).value()) : nullptr;
}

std::shared_ptr<StreamedHostPath> HostPath(HostMode mode, int64_t forced) {
  StreamedHostPath::Options o;
  o.mode = mode;
  o.takes.fill(true);  // auto forced to split every pass, whatever a calibration would say
  o.force_host_experts = forced;
  return std::make_shared<StreamedHostPath>(std::move(o));
}

absl::StatusOr<std::unique_ptr<Transformer>> Streamed(std::shared_ptr<const LoadedModel> model, CudaBackend* be,
                                                      int64_t slots, std::shared_ptr<HostExpertPath> host,
                                                      int64_t context = 160) {
  TransformerOptions o;
  o.max_context = context;
  o.expert_cache_slots = slots;
  o.streaming = std::make_shared<CudaWeightStreaming>(be);
  o.host_experts = std::move(host);
  return Transformer::Create(std::move(model), be, o);
}

void CheckSplitEqualsResident(const char* what, std::shared_ptr<const LoadedModel> model) {
  ASSERT_NE(model, nullptr);
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions ro;
  ro.max_context = 160;
  auto resident = Transformer::Create(model, be.get(), ro);
  ASSERT_TRUE(resident.ok()) << resident.status();
  struct Case {
    HostMode mode;
    int64_t forced;
    const char* name;
  };
  for (const Case c : {Case{HostMode::kOnly, -1, "only"}, Case{HostMode::kAuto, 2, "auto, 2 experts forced"}}) {
    SCOPED_TRACE(std::string(what) + ", " + c.name);
    auto streamed = Streamed(model, be.get(), model->spec.n_experts_used, HostPath(c.mode, c.forced));
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    Transformer* s = streamed->get();
    ASSERT_TRUE(s->uses_host_experts()) << s->host_experts_note();
    ASSERT_TRUE((*resident)->Truncate(0).ok());
    const int passes[] = {37, 1, 4, 16, 2, 1, 8, 3, 16, 5, 1};
    testing::ExpectSamePasses(**resident, *s, passes);
    if (::testing::Test::HasFatalFailure()) return;
    testing::ExpectSameGreedy(**resident, *s, 12);
    auto stats = s->expert_stream_stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    std::printf("%s, %s: %lld host experts (%.3f ms, %lld activation bytes), %lld staged, %lld layer passes\n", what,
                c.name, static_cast<long long>(stats->host_experts), 1e3 * stats->host_seconds,
                static_cast<long long>(stats->host_activation_bytes), static_cast<long long>(stats->staged),
                static_cast<long long>(stats->layer_passes));
    EXPECT_GT(stats->host_experts, 0);
    EXPECT_GT(stats->host_seconds, 0.0);
    EXPECT_GT(stats->host_activation_bytes, 0);
    EXPECT_GT(stats->staged, 0) << "the 37-position prefill stages its experts";
  }
}

TEST(StreamedHostSplit, EqualsResidentQ8_0) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  CheckSplitEqualsResident("synth tiny-moe q8_0", TinyMoe("q8_0", 4, false));
}

TEST(StreamedHostSplit, EqualsResidentQ4KM) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  CheckSplitEqualsResident("synth tiny-moe (D=F=256) q4_k_m", TinyMoe("q4_k_m", 5, true));
}

TEST(StreamedHostSplit, SpeculativeGreedyEqualsTargetAlone) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto target = TinyMoe("q8_0", 6, false);
  ASSERT_NE(target, nullptr);
  auto draft_spec = SynthSpec("tiny-dense");
  ASSERT_TRUE(draft_spec.ok());
  ASSERT_EQ(draft_spec->vocab_size, target->spec.vocab_size);
  auto dw = SynthWeights(*draft_spec, DType::kBF16, 7);
  ASSERT_TRUE(dw.ok()) << dw.status();
  std::shared_ptr<const LoadedModel> draft_model(std::move(dw).value());
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions o;
  o.max_context = 256;
  auto resident = Transformer::Create(target, be.get(), o);
  auto draft = Transformer::Create(draft_model, be.get(), o);
  ASSERT_TRUE(resident.ok() && draft.ok());
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42, 99, 3}, {250, 7, 7, 120}};
  const auto plain = testing::DeviceGreedyTokens(be.get(), resident->get(), nullptr, 0, prompts);
  ASSERT_FALSE(plain.empty());
  for (const auto& [mode, forced] : {std::pair{HostMode::kOnly, int64_t{-1}}, std::pair{HostMode::kAuto, int64_t{1}}}) {
    SCOPED_TRACE(std::string(moe_host::HostModeName(mode)));
    auto streamed = Streamed(target, be.get(), target->spec.n_experts_used, HostPath(mode, forced), 256);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_TRUE((*streamed)->uses_host_experts()) << (*streamed)->host_experts_note();
    EXPECT_EQ(testing::DeviceGreedyTokens(be.get(), streamed->get(), nullptr, 0, prompts), plain) << "target alone";
    EXPECT_EQ(testing::DeviceGreedyTokens(be.get(), streamed->get(), draft->get(), 3, prompts), plain)
        << "speculative, draft 3";
    auto stats = (*streamed)->expert_stream_stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_GT(stats->host_experts, 0);
  }
}

TEST(StreamedHostSplit, Bf16ExpertsRunWithoutThePathAndSayWhy) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kBF16, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const LoadedModel> model(std::move(w).value());
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto streamed = Streamed(model, be.get(), model->spec.n_experts_used, HostPath(HostMode::kOnly, -1));
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_FALSE((*streamed)->uses_host_experts());
  EXPECT_THAT((*streamed)->host_experts_note(), ::testing::HasSubstr("bf16"));
  EXPECT_FALSE((*streamed)->StreamsOnHost(1)) << "without the path, a decode pass goes through the cache";
}

}  // namespace
}  // namespace specgen
