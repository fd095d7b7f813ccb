// The host-routed split path (engine/model/split_routed_experts.h) on the CPU backend, where the very
// same code runs as on the GPU: a test StreamedExperts over CPU-uploaded packed experts (Stage gives the
// resident refs, HostView their stored bytes) and the real host path (moe/host/streamed_host_path.h).
//  - RunSplitRoutedExperts equals RunRoutedExperts bit for bit, for Q4_K/Q6_K, Q8_0 and MXFP4 experts,
//    n = 1..16 positions, host shares of none, some and all (forced) and the auto split.
//  - A Transformer whose experts "stream" through the test streaming with a host path (only; auto with
//    a forced share) gives the resident model's logits bit for bit, and its stats count the host's work.
//  - Experts the host has no kernel for: the Transformer runs without the path and says why.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/core/packed_product.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "engine/model/split_routed_experts.h"
#include "engine/model/transformer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moe/host/streamed_host_path.h"
#include "tests/common/random_blocks.h"

namespace specgen {
namespace {

using moe_host::HostMode;
using moe_host::StreamedHostPath;

// Bits equal, NaN equal to NaN (random packed blocks may give them; payloads: host_packed_rows_test).
std::string FirstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
    }
  }
  return "";
}

class NoExpertSet : public ExpertSet {};

// Streamed experts held on the CPU: each matrix uploaded (the CPU reads packed weights in place) from a
// host view that stays valid, Stage counting like the CUDA one.
class CpuTestStreamedExperts : public StreamedExperts {
 public:
  absl::Status Add(Backend& be, const ExpertViews& v) {
    Layer l;
    for (size_t e = 0; e < v.gate.size(); ++e) {
      auto g = be.Upload(v.gate[e], "gate");
      auto u = be.Upload(v.up[e], "up");
      auto d = be.Upload(v.down[e], "down");
      if (!g.ok()) return g.status();
      if (!u.ok()) return u.status();
      if (!d.ok()) return d.status();
      l.gate.push_back(std::move(*g));
      l.up.push_back(std::move(*u));
      l.down.push_back(std::move(*d));
    }
    l.views = v;
    layers_.push_back(std::move(l));
    return absl::OkStatus();
  }
  const ExpertSet& layer(size_t) const override { return set_; }
  absl::StatusOr<ExpertRefs> Stage(size_t i, int e) override {
    ++staged_;
    const Layer& l = layers_.at(i);
    return ExpertRefs{l.gate.at(e).get(), l.up.at(e).get(), l.down.at(e).get()};
  }
  absl::StatusOr<ExpertStreamStats> Stats() override {
    ExpertStreamStats s;
    s.staged = staged_;
    return s;
  }
  absl::Status EmptyCache() override { return absl::OkStatus(); }
  absl::StatusOr<ExpertHostView> HostView(size_t i, int e) const override {
    const ExpertViews& v = layers_.at(i).views;
    const TensorView &g = v.gate.at(e), &u = v.up.at(e), &d = v.down.at(e);
    for (const TensorView* t : {&g, &d}) {
      if (!packed_product::Covers(t->dtype)) {
        return absl::UnimplementedError(std::string("experts of ") + std::string(Name(t->dtype)));
      }
    }
    ExpertHostView h;
    h.type = g.dtype, h.down_type = d.dtype;
    h.ffn = g.shape[0], h.hidden = g.shape[1];
    h.gate = static_cast<const uint8_t*>(g.data);
    h.up = static_cast<const uint8_t*>(u.data);
    h.down = static_cast<const uint8_t*>(d.data);
    return h;
  }
  int64_t staged() const { return staged_; }

 private:
  struct Layer {
    std::vector<std::unique_ptr<Weight>> gate, up, down;
    ExpertViews views;
  };
  std::vector<Layer> layers_;
  NoExpertSet set_;
  int64_t staged_ = 0;
};

class CpuTestStreaming : public WeightStreaming {
 public:
  explicit CpuTestStreaming(Backend* be) : be_(be) {}
  absl::StatusOr<std::unique_ptr<StreamedExperts>> PrepareExperts(std::span<const ExpertViews> layers,
                                                                  const ExpertStreamingOptions&) override {
    auto s = std::make_unique<CpuTestStreamedExperts>();
    for (const ExpertViews& v : layers) {
      absl::Status ok = s->Add(*be_, v);
      if (!ok.ok()) return ok;
    }
    return std::unique_ptr<StreamedExperts>(std::move(s));
  }
  absl::StatusOr<std::unique_ptr<StreamedLayers>> PrepareLayers(std::span<const LayerViews>,
                                                                const LayerStreamingOptions&) override {
    return absl::UnimplementedError("no dense layer streaming in this test");
  }

 private:
  Backend* be_;
};

TensorView MatrixView(DType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  TensorView v;
  v.dtype = t, v.ndim = 2, v.shape = {rows, cols, 0, 0};
  v.data = bytes.data(), v.bytes = bytes.size();
  return v;
}

StreamedHostPath::Options HostOptions(HostMode mode, int64_t forced) {
  StreamedHostPath::Options o;
  o.mode = mode;
  o.takes.fill(true);
  o.threads = 2;
  o.pin = false;
  o.force_host_experts = forced;
  return o;
}

// ---------------------------------------------------------------- the split against RunRoutedExperts

struct Types {
  DType gate_up, down;
};

void CheckSplitEqualsRoutedExperts(Types types) {
  SCOPED_TRACE(std::string(Name(types.gate_up)) + " gate/up, " + std::string(Name(types.down)) + " down");
  constexpr int64_t kHidden = 256, kFfn = 256, kExperts = 16, kK = 4;
  std::mt19937_64 rng(4402 + static_cast<int>(types.gate_up));
  CpuBackend be(2);
  // One layer's experts, host bytes kept here.
  std::vector<std::vector<uint8_t>> bytes;
  ExpertViews views;
  views.name = "test layer";
  for (int e = 0; e < kExperts; ++e) {
    bytes.push_back(testing::RandomBlocks(rng, types.gate_up, kFfn, kHidden));
    views.gate.push_back(MatrixView(types.gate_up, bytes.back(), kFfn, kHidden));
    bytes.push_back(testing::RandomBlocks(rng, types.gate_up, kFfn, kHidden));
    views.up.push_back(MatrixView(types.gate_up, bytes.back(), kFfn, kHidden));
    bytes.push_back(testing::RandomBlocks(rng, types.down, kHidden, kFfn));
    views.down.push_back(MatrixView(types.down, bytes.back(), kHidden, kFfn));
  }
  CpuTestStreamedExperts streamed;
  ASSERT_TRUE(streamed.Add(be, views).ok());
  auto buf = [&](int64_t rows, int64_t cols) { return std::move(be.NewBuffer(rows, cols)).value(); };
  const int64_t max_n = HostExpertPath::kMaxPositions;
  auto x = buf(max_n, kHidden), logits = buf(max_n, kExperts), want = buf(max_n, kHidden), got = buf(max_n, kHidden);
  auto xe = buf(max_n, kHidden), ye = buf(max_n, kHidden), ge = buf(max_n, kFfn), ue = buf(max_n, kFfn);
  auto z = buf(max_n * kK, kHidden), y = buf(max_n * kK, kHidden);
  const HostRoutingScratch hs{xe.get(), ye.get(), ge.get(), ue.get()};
  const SplitRoutingScratch ss{hs, z.get(), y.get()};
  std::normal_distribution<float> normal(0.f, 1.f);
  // Forced shares: none, one, some, all; then auto with a calibration that makes the host cheap.
  for (int64_t forced : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
    StreamedHostPath path(HostOptions(HostMode::kAuto, forced));
    ASSERT_TRUE(path.Bind(streamed, 1, kExperts).ok());
    for (int64_t n = 1; n <= max_n; ++n) {
      SCOPED_TRACE("host share " + std::to_string(forced) + ", n " + std::to_string(n));
      for (Buffer* b : {x.get(), logits.get(), want.get(), got.get()}) ASSERT_TRUE(b->set_rows(n).ok());
      std::vector<float> xv(static_cast<size_t>(n * kHidden)), lv(static_cast<size_t>(n * kExperts));
      for (float& v : xv) v = normal(rng);
      for (float& v : lv) v = normal(rng);
      ASSERT_TRUE(be.Write(xv, x.get()).ok());
      ASSERT_TRUE(be.Write(lv, logits.get()).ok());
      ASSERT_TRUE(RunRoutedExperts(be, *x, *logits, kK, RouterNorm::kSoftmaxTopKRenormalize, kExperts,
                                   [&](int e) { return streamed.Stage(0, e); }, hs, want.get())
                      .ok());
      const HostExpertStats before = path.Stats();
      const int64_t staged_before = streamed.staged();
      absl::Status st = RunSplitRoutedExperts(be, *x, *logits, kK, RouterNorm::kSoftmaxTopKRenormalize, kExperts, 0, streamed,
                                              path, ss, got.get());
      ASSERT_TRUE(st.ok()) << st;
      std::vector<float> a(static_cast<size_t>(n * kHidden)), b(a.size());
      ASSERT_TRUE(be.Read(*want, a).ok());
      ASSERT_TRUE(be.Read(*got, b).ok());
      ASSERT_EQ(FirstDifference(a, b), "");
      const HostExpertStats after = path.Stats();
      const int64_t host = after.experts - before.experts, link = streamed.staged() - staged_before;
      EXPECT_EQ(host, std::min<int64_t>(forced, host + link)) << "the forced share";
      EXPECT_GE(host + link, std::min<int64_t>(kK, kExperts)) << "every distinct expert once";
      if (host > 0) {
        EXPECT_GT(after.activation_bytes, before.activation_bytes);
        EXPECT_GE(after.seconds, before.seconds);
      } else {
        EXPECT_EQ(after.activation_bytes, before.activation_bytes) << "nothing crossed for the host";
      }
    }
  }
}

TEST(SplitRoutedExperts, EqualsRunRoutedExpertsBitForBitQ4KWithQ6KDown) {
  CheckSplitEqualsRoutedExperts({DType::kQ4_K, DType::kQ6_K});
}
TEST(SplitRoutedExperts, EqualsRunRoutedExpertsBitForBitQ8_0) { CheckSplitEqualsRoutedExperts({DType::kQ8_0, DType::kQ8_0}); }
TEST(SplitRoutedExperts, EqualsRunRoutedExpertsBitForBitMxfp4) {
  CheckSplitEqualsRoutedExperts({DType::kMXFP4, DType::kMXFP4});
}

TEST(SplitRoutedExperts, RefusesPassesBeyondSixteenPositions) {
  CpuBackend be(1);
  CpuTestStreamedExperts streamed;
  StreamedHostPath path(HostOptions(HostMode::kOnly, -1));
  auto x = *be.NewBuffer(17, 32), l = *be.NewBuffer(17, 4), out = *be.NewBuffer(17, 32);
  const SplitRoutingScratch s{};
  absl::Status st = RunSplitRoutedExperts(be, *x, *l, 2, RouterNorm::kSoftmaxTopKRenormalize, 4, 0, streamed, path, s, out.get());
  EXPECT_THAT(st.message(), ::testing::HasSubstr("a pass of 17 positions"));
}

// ---------------------------------------------------------------- a whole model

// tiny-moe with rows of 256 (the K-quants' block) in `type`.
std::shared_ptr<const LoadedModel> PackedTinyMoe(const char* type, uint64_t seed) {
  auto spec = SynthSpec("tiny-moe");
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return nullptr;
  spec->hidden = 256;
  spec->expert_ffn_dim = 256;
  spec->ffn_dim = 256;
  spec->n_heads = 4;
  spec->n_kv_heads = 2;
  spec->head_dim = 64;
  auto mix = ParseExportType(type);
  EXPECT_TRUE(mix.ok()) << mix.status();
  if (!mix.ok()) return nullptr;
  auto m = SynthWeights(*spec, *mix, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::shared_ptr<const LoadedModel>(std::move(m).value()) : nullptr;
}

void CheckModelWithHostPath(const char* what, std::shared_ptr<const LoadedModel> model) {
  ASSERT_NE(model, nullptr);
  SCOPED_TRACE(what);
  CpuBackend be(2);
  TransformerOptions ro;
  ro.max_context = 128;
  auto resident = Transformer::Create(model, &be, ro);
  ASSERT_TRUE(resident.ok()) << resident.status();
  struct Case {
    HostMode mode;
    int64_t forced;
  };
  for (const Case c : {Case{HostMode::kOnly, -1}, Case{HostMode::kAuto, 1}}) {
    SCOPED_TRACE(std::string(moe_host::HostModeName(c.mode)) + ", forced " + std::to_string(c.forced));
    TransformerOptions so = ro;
    so.expert_cache_slots = model->spec.n_experts_used;
    so.streaming = std::make_shared<CpuTestStreaming>(&be);
    so.host_experts = std::make_shared<StreamedHostPath>(HostOptions(c.mode, c.forced));
    auto streamed = Transformer::Create(model, &be, so);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    Transformer& s = **streamed;
    ASSERT_TRUE(s.streams_experts());
    ASSERT_TRUE(s.uses_host_experts()) << s.host_experts_note();
    EXPECT_TRUE(s.StreamsOnHost(1)) << "a pass the host path takes is not captured";
    ASSERT_TRUE((*resident)->Truncate(0).ok());
    // A prefill of more than 16 (the staged path), then passes of 1..16 (the split path).
    const int sizes[] = {21, 1, 4, 16, 2, 7, 1, 3};
    const int64_t vocab = model->spec.vocab_size;
    for (int n : sizes) {
      std::vector<int32_t> ids(n);
      for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((131 * (s.n_past() + i) + 17) % vocab);
      std::vector<float> a, b;
      ASSERT_TRUE((*resident)->Forward(ids, &a).ok());
      absl::Status st = s.Forward(ids, &b);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(FirstDifference(a, b), "") << "a pass of " << n;
    }
    auto stats = s.expert_stream_stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_GT(stats->host_experts, 0);
    EXPECT_GT(stats->host_seconds, 0.0);
    EXPECT_GT(stats->host_activation_bytes, 0);
    EXPECT_GT(stats->layer_passes, 0);
    EXPECT_GT(stats->staged, 0) << "the prefill stages every routed expert";
  }
}

TEST(SplitRoutedExperts, ModelWithHostPathEqualsResidentQ4KM) {
  CheckModelWithHostPath("tiny-moe q4_k_m", PackedTinyMoe("q4_k_m", 5));
}
TEST(SplitRoutedExperts, ModelWithHostPathEqualsResidentQ8_0) {
  CheckModelWithHostPath("tiny-moe q8_0", PackedTinyMoe("q8_0", 6));
}

TEST(SplitRoutedExperts, ExpertsTheHostCannotComputeRunWithoutThePathAndSayWhy) {
  auto spec = SynthSpec("tiny-moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kBF16, 3);
  ASSERT_TRUE(w.ok());
  std::shared_ptr<const LoadedModel> model(std::move(w).value());
  CpuBackend be(2);
  TransformerOptions o;
  o.max_context = 64;
  o.expert_cache_slots = 2;
  o.streaming = std::make_shared<CpuTestStreaming>(&be);
  o.host_experts = std::make_shared<StreamedHostPath>(HostOptions(HostMode::kOnly, -1));
  auto t = Transformer::Create(model, &be, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->uses_host_experts());
  EXPECT_THAT((*t)->host_experts_note(), ::testing::HasSubstr("every missed expert crosses the link"));
  EXPECT_THAT((*t)->host_experts_note(), ::testing::HasSubstr("bf16"));
  const int32_t id = 5;
  std::vector<float> logits;
  ASSERT_TRUE((*t)->Forward({&id, 1}, &logits).ok());
  auto stats = (*t)->expert_stream_stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->host_experts, 0);
}

TEST(SplitRoutedExperts, IssueFortyFiveLayersRunWithoutThePathAndSayWhy) {
  auto spec = SynthSpec("tiny-glm4moe");
  ASSERT_TRUE(spec.ok());
  auto w = SynthWeights(*spec, DType::kQ8_0, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const LoadedModel> model(std::move(w).value());
  CpuBackend be(2);
  TransformerOptions o;
  o.max_context = 64;
  o.expert_cache_slots = 2;
  o.streaming = std::make_shared<CpuTestStreaming>(&be);
  o.host_experts = std::make_shared<StreamedHostPath>(HostOptions(HostMode::kOnly, -1));
  auto t = Transformer::Create(model, &be, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->uses_host_experts());
  EXPECT_THAT((*t)->host_experts_note(), ::testing::HasSubstr("glm4moe experts"));
}

}  // namespace
}  // namespace specgen
