// Which passes of a streamed target take the host-routed split path (moe/host/streamed_decision.h), on
// a cost model of round numbers: experts of 1 MB, a link of 1 GB/s (an expert a millisecond), a host
// that computes 1000 experts a second (the link's rate), activations free (hidden 0).
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moe/host/streamed_decision.h"

namespace specgen::moe_host {
namespace {

using ::testing::HasSubstr;

Calibration Host(double experts_per_second) {
  Calibration c;
  c.isa = "avx2";
  c.threads = 8;
  c.hidden = 2048, c.ffn = 768, c.expert_bytes = 1'000'000;
  c.experts_per_second.fill(experts_per_second);
  return c;
}

HostPath Path(HostMode mode, std::optional<Calibration> c) {
  HostPath p;
  p.mode = mode;
  p.calibration = std::move(c);
  return p;
}

// Passes n = 1..16 with `distinct` distinct experts a layer, `missed(n)` of them missed.
StreamedDecisionInput Input(double distinct, double (*missed)(int), int64_t slots = 64) {
  StreamedDecisionInput in;
  for (int n = 1; n <= 16; ++n) in.passes.push_back({n, distinct, missed(n)});
  in.expert_bytes = 1'000'000;
  in.hidden = 0;
  in.top_k = 4;
  in.n_experts = 128;
  in.cache_slots = slots;
  in.default_link_bytes_per_second = 1e9;
  in.host_wait_seconds = 1e-4;
  return in;
}

TEST(StreamedDecision, OffTakesNoPassAndOnlyTakesEvery) {
  const StreamedDecisionInput in = Input(10, [](int) { return 9.0; });
  const StreamedHostDecision off = DecideStreamedHostPath(Path(HostMode::kOff, Host(1000)), in);
  EXPECT_FALSE(off.any());
  EXPECT_THAT(off.note, HasSubstr("--moe-host off"));
  const StreamedHostDecision only = DecideStreamedHostPath(Path(HostMode::kOnly, std::nullopt), in);
  for (bool t : only.takes) EXPECT_TRUE(t);
  EXPECT_THAT(only.note, HasSubstr("every routed expert on the host CPU"));
  EXPECT_THAT(only.note, HasSubstr("bypassed"));
}

TEST(StreamedDecision, AutoWithoutACalibrationKeepsTheDevicePath) {
  const StreamedHostDecision d =
      DecideStreamedHostPath(Path(HostMode::kAuto, std::nullopt), Input(10, [](int) { return 9.0; }));
  EXPECT_FALSE(d.any());
  EXPECT_THAT(d.note, HasSubstr("no calibration"));
}

TEST(StreamedDecision, AutoTakesThePathOnlyWhereItBeatsTheCache) {
  const HostPath p = Path(HostMode::kAuto, Host(1000));
  // The cache catches most experts: 2 of 10 missed (2 ms) beats splitting all 10 (5 ms + the wait).
  const StreamedHostDecision hits = DecideStreamedHostPath(p, Input(10, [](int) { return 2.0; }));
  EXPECT_FALSE(hits.any());
  ASSERT_EQ(hits.passes.size(), 16u);
  EXPECT_DOUBLE_EQ(hits.passes[0].device_seconds, 2e-3);
  EXPECT_EQ(hits.passes[0].split.host, 5);
  EXPECT_DOUBLE_EQ(hits.passes[0].split_seconds, 5e-3 + 1e-4);
  EXPECT_THAT(hits.note, HasSubstr("every pass takes the device path"));
  // It misses nearly everything: 9 ms through the cache against 5.1 ms split.
  const StreamedHostDecision misses = DecideStreamedHostPath(p, Input(10, [](int) { return 9.0; }));
  for (bool t : misses.takes) EXPECT_TRUE(t);
  // Misses growing with n: the small passes keep the cache, the large ones split.
  const StreamedHostDecision mixed = DecideStreamedHostPath(p, Input(10, [](int n) { return n < 8 ? 3.0 : 8.0; }));
  for (int n = 1; n <= 16; ++n) EXPECT_EQ(mixed.takes[n - 1], n >= 8) << "n = " << n;
  EXPECT_THAT(mixed.note, HasSubstr("passes of n = 8-16 route on the host"));
  EXPECT_THAT(mixed.note, HasSubstr("n = 1-7 take the device path"));
  // A host far slower than the link never takes a share, so the split path is never taken.
  const StreamedHostDecision crawl = DecideStreamedHostPath(Path(HostMode::kAuto, Host(10)), Input(10, [](int) { return 9.0; }));
  EXPECT_FALSE(crawl.any());
}

TEST(StreamedDecision, PassesTheCacheCannotTakeAreStagedAnyway) {
  // 4 slots: a pass of n >= 2 (8 ids) may not fit, so the device path stages every distinct expert
  // and waits for the host too; the split path wins there even where the cache would have hit.
  const StreamedHostDecision d =
      DecideStreamedHostPath(Path(HostMode::kAuto, Host(1000)), Input(10, [](int) { return 1.0; }, 4));
  EXPECT_FALSE(d.takes[0]) << "n = 1 fits the slots: 1 ms through the cache";
  for (int n = 2; n <= 16; ++n) EXPECT_TRUE(d.takes[n - 1]) << "n = " << n;
  EXPECT_DOUBLE_EQ(d.passes[1].device_seconds, 10e-3 + 1e-4);
}

}  // namespace
}  // namespace specgen::moe_host
