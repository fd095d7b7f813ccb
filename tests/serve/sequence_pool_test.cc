// SequencePool on the CPU reference with synthetic models (tiny-moe target, tiny-dense draft, one
// vocabulary): requests run at once give exactly the tokens each gives alone (greedy, and `coupled`
// sampling by seed; batch invariance), their target passes are shared (more sequences than passes),
// a between-steps stop ends one request early without disturbing the others, and the queue's bound
// refuses with Unavailable.
#include "engine/serve/sequence_pool.h"

#include <memory>
#include <thread>
#include <vector>

#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/synth.h"
#include "engine/speculative/speculative_decoder.h"
#include "gtest/gtest.h"

namespace specgen::serve {
namespace {

constexpr int64_t kContext = 128;

std::unique_ptr<Transformer> Make(const char* preset, uint64_t seed, CpuBackend* backend) {
  auto m = SynthWeights(SynthSpec(preset).value(), DType::kF32, seed, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  TransformerOptions o;
  o.max_context = kContext;
  auto t = Transformer::Create(std::shared_ptr<const LoadedModel>(std::move(m).value()), backend, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

struct Request {
  std::vector<int32_t> prompt;
  SpeculativeOptions options;
};

std::vector<Request> Requests() {
  std::vector<Request> out;
  for (int i = 0; i < 6; ++i) {
    Request r;
    for (int j = 0; j < 3 + 2 * i; ++j) r.prompt.push_back((j * 31 + i * 17 + 5) % 300);
    r.options.max_new_tokens = 12 + 3 * i;
    r.options.draft_max = 1 + i % 4;
    r.options.adaptive = false;
    r.options.accept = AcceptMode::kCoupled;
    // Even: greedy; odd: sampled, its text fixed by its seed under `coupled`.
    r.options.sampling = i % 2 == 0 ? SamplingParams::Greedy() : SamplingParams::Plain(0.9f, 40 + i);
    out.push_back(r);
  }
  return out;
}

class SequencePoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = Make("tiny-moe", 3, &backend_);
    draft_ = Make("tiny-dense", 4, &backend_);
  }
  // The request on its own models, no pool: the reference.
  std::vector<int32_t> Alone(const Request& r) {
    auto target = Make("tiny-moe", 3, &backend_);
    auto draft = Make("tiny-dense", 4, &backend_);
    SpeculativeDecoder loop(target.get(),
                            std::make_unique<ModelProposer>(draft.get(), 300, r.options.sampling, r.options.accept),
                            r.options);
    auto out = loop.Generate(r.prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<int32_t>{};
  }

  CpuBackend backend_{1};
  std::unique_ptr<Transformer> target_, draft_;
};

TEST_F(SequencePoolTest, ConcurrentRequestsEqualThemAloneAndSharePasses) {
  const std::vector<Request> requests = Requests();
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : requests) alone.push_back(Alone(r));

  auto pool = SequencePool::Create(nullptr, target_.get(), draft_.get(), {.parallel = 4, .queue = 8});
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<std::vector<int32_t>> got(requests.size());
  std::vector<absl::Status> status(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      auto admission = (*pool)->Admit();
      if (!admission.ok()) {
        status[i] = admission.status();
        return;
      }
      SequencePool::Job job{requests[i].prompt, requests[i].options, nullptr, nullptr};
      auto out = (*pool)->Run(**admission, job, nullptr);
      status[i] = out.status();
      if (out.ok()) got[i] = *out;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(status[i].ok()) << i << ": " << status[i];
    EXPECT_EQ(got[i], alone[i]) << "request " << i;
  }
  const PassBatcher::Counters c = (*pool)->pass_counters();
  EXPECT_GT(c.sequences, c.passes) << "no target pass verified two sequences";
  EXPECT_EQ((*pool)->load().running, 0);
  EXPECT_EQ(target_->n_past(), 0);  // the models' own caches are never used on this path
  EXPECT_EQ(draft_->n_past(), 0);
}

TEST_F(SequencePoolTest, StopBetweenStepsEndsOneRequestOnly) {
  const std::vector<Request> requests = Requests();
  const std::vector<int32_t> expected = Alone(requests[2]);
  auto pool = SequencePool::Create(nullptr, target_.get(), draft_.get(), {.parallel = 2, .queue = 0});
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int32_t> stopped, full;
  std::thread a([&] {
    auto admission = (*pool)->Admit();
    ASSERT_TRUE(admission.ok());
    int steps = 0;
    SequencePool::Job job{requests[5].prompt, requests[5].options, nullptr, [&] { return ++steps > 2; }};
    SpeculativeStats stats;
    auto out = (*pool)->Run(**admission, job, &stats);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(stats.stop_reason, StopReason::kStopped);
    EXPECT_EQ(stats.passes, 2);
    stopped = *out;
  });
  std::thread b([&] {
    auto admission = (*pool)->Admit();
    ASSERT_TRUE(admission.ok());
    SequencePool::Job job{requests[2].prompt, requests[2].options, nullptr, nullptr};
    auto out = (*pool)->Run(**admission, job, nullptr);
    ASSERT_TRUE(out.ok()) << out.status();
    full = *out;
  });
  a.join();
  b.join();
  EXPECT_FALSE(stopped.empty());
  EXPECT_LT(stopped.size(), static_cast<size_t>(requests[5].options.max_new_tokens));
  EXPECT_EQ(full, expected);
}

TEST_F(SequencePoolTest, PastTheQueueIsUnavailable) {
  auto pool = SequencePool::Create(nullptr, target_.get(), draft_.get(), {.parallel = 1, .queue = 1});
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto first = (*pool)->Admit();
  auto second = (*pool)->Admit();
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = (*pool)->Admit();
  EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*pool)->load().waiting, 2);
  first->reset();
  EXPECT_TRUE((*pool)->Admit().ok());
}

TEST(SequencePoolCreate, BadOptionsAreRefused) {
  CpuBackend backend{1};
  auto target = Make("tiny-moe", 3, &backend);
  EXPECT_EQ(SequencePool::Create(nullptr, nullptr, nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SequencePool::Create(nullptr, target.get(), nullptr, {.parallel = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SequencePool::Create(nullptr, target.get(), nullptr, {.parallel = 1, .queue = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace specgen::serve
