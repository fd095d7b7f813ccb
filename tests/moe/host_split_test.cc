// The split of a layer's missed experts between the host and the link (moe/host/host_split.h) on a CPU
// cost model: a host that computes 1000 experts a second, a link that fetches one expert a millisecond.
#include <random>

#include "gtest/gtest.h"
#include "moe/host/host_path.h"
#include "moe/host/host_split.h"

namespace specgen::moe_host {
namespace {

constexpr size_t kExpertBytes = 1'000'000;

Calibration Host(double experts_per_second) {
  Calibration c;
  c.isa = "avx2";
  c.threads = 8;
  c.hidden = 2048, c.ffn = 768, c.expert_bytes = kExpertBytes;
  c.experts_per_second.fill(experts_per_second);
  return c;
}

SplitInput Layer(int64_t missed, int n = 1, int64_t hidden = 0) {
  return {missed, n, kExpertBytes, hidden, /*link: one expert a ms*/ 1e9};
}

TEST(HostSplit, EqualRatesSplitInHalf) {
  const Calibration c = Host(1000);
  const Split s = ChooseSplit(HostMode::kAuto, &c, Layer(10));
  EXPECT_EQ(s.host, 5);
  EXPECT_EQ(s.link, 5);
  EXPECT_DOUBLE_EQ(s.seconds(), 5e-3);
  EXPECT_EQ(s.link_bytes, 5 * kExpertBytes);
  // Half the host's rate: a third of the experts (time 6.67 ms rounds to h = 3: 6 ms host, 7 ms link).
  const Calibration slow = Host(500);
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, &slow, Layer(10)).host, 3);
}

TEST(HostSplit, ModesAndMissingCalibration) {
  const Calibration c = Host(1000);
  EXPECT_EQ(ChooseSplit(HostMode::kOff, &c, Layer(10)).host, 0);
  EXPECT_EQ(ChooseSplit(HostMode::kOnly, &c, Layer(10)).host, 10);
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, nullptr, Layer(10)).host, 0);  // auto without calibration: off
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, &c, Layer(0)).host, 0);
  // A host slower than the link by far never takes one: 1 expert = 100 ms on the host.
  const Calibration crawl = Host(10);
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, &crawl, Layer(10)).host, 0);
  // One missed expert, host as fast as the link: a tie keeps it on the GPU path.
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, &c, Layer(1)).host, 0);
  EXPECT_TRUE(ParseHostMode("auto").ok());
  EXPECT_EQ(ParseHostMode("sometimes").status().message(), "--moe-host must be auto, off or only, got 'sometimes'");
}

TEST(HostSplit, ActivationsCrossTheLinkBothWays) {
  const Calibration c = Host(1000);
  // 4 tokens of 1024 floats: 16 KiB to the host and back per host expert.
  const Split s = SplitAt(2, &c, Layer(6, 4, 1024));
  const double act = 4.0 * 1024 * 4;
  EXPECT_EQ(s.link_bytes, 4 * kExpertBytes + 2 * static_cast<size_t>(2 * act));
  EXPECT_DOUBLE_EQ(s.link_seconds, (4 * 1e6 + 2 * act) / 1e9);
  EXPECT_DOUBLE_EQ(s.host_seconds, 2 * act / 1e9 + 2e-3);
}

TEST(HostSplit, MoreTokensAnExpertShiftWorkToTheLink) {
  Calibration c = Host(1000);
  for (int i = 0; i < kCalibratedTokens; ++i) c.experts_per_second[i] = 1000.0 / (1 + i);  // time grows with n
  int64_t last = 1 << 30;
  for (int n = 1; n <= 16; ++n) {
    const int64_t h = ChooseSplit(HostMode::kAuto, &c, Layer(40, n)).host;
    EXPECT_LE(h, last) << "n=" << n;
    last = h;
  }
  EXPECT_EQ(ChooseSplit(HostMode::kAuto, &c, Layer(40, 1)).host, 20);
}

// The choice is the least max(host, link) over every h, the smallest h among equals.
TEST(HostSplit, ChoosesTheLeastTimeOfEverySplit) {
  std::mt19937_64 rng(4404);
  std::uniform_real_distribution<double> rate(10, 20000);
  std::uniform_int_distribution<int64_t> missed(0, 128);
  std::uniform_int_distribution<int> n(1, 16);
  for (int trial = 0; trial < 500; ++trial) {
    const Calibration c = Host(rate(rng));
    const SplitInput in{missed(rng), n(rng), kExpertBytes / 2, 2048, rate(rng) * 1e6};
    const Split best = ChooseSplit(HostMode::kAuto, &c, in);
    for (int64_t h = 0; h <= in.missed; ++h) {
      const Split s = SplitAt(h, &c, in);
      if (h < best.host) {
        EXPECT_GT(s.seconds(), best.seconds()) << "trial " << trial << " h=" << h;
      } else {
        EXPECT_GE(s.seconds(), best.seconds()) << "trial " << trial << " h=" << h;
      }
    }
  }
}

// --moe-host and --calibration resolved (ResolveHostPath): the default follows the file's presence.
TEST(HostPath, ModeFollowsTheCalibration) {
  const std::string dir = ::testing::TempDir() + "/host_path";
  const std::string file = dir + "/c.json", missing = dir + "/none.json";
  ASSERT_TRUE(WriteCalibration(Host(1000), file).ok());
  EXPECT_EQ(ResolveHostPath("", file)->mode, HostMode::kAuto);
  EXPECT_TRUE(ResolveHostPath("", file)->calibration.has_value());
  EXPECT_EQ(ResolveHostPath("off", file)->mode, HostMode::kOff);
  // A --calibration file that does not exist is an error; a broken one names its field.
  EXPECT_EQ(ResolveHostPath("", missing).status().code(), absl::StatusCode::kNotFound);
  const std::string bad = dir + "/bad.json";
  {
    Calibration c = Host(1000);
    c.threads = 0;  // written as 0: refused when read
    ASSERT_TRUE(WriteCalibration(c, bad).ok());
  }
  EXPECT_NE(ResolveHostPath("auto", bad).status().message().find("'host.threads'"), std::string::npos);
  EXPECT_FALSE(ResolveHostPath("always", file).ok());
}

// The rows `specgen plan` prints: tokens per expert from n·k over the union, the split of the rounded misses.
TEST(HostPath, RowsOfAPlan) {
  HostPath path;
  path.mode = HostMode::kAuto;
  path.calibration = Host(1000);
  const auto rows = HostPathRows(path, {{1, 8, 6.4}, {4, 20, 16.2}}, kExpertBytes, 0, 8, 1e9);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].tokens_per_expert, 1);
  EXPECT_EQ(rows[0].split.host + rows[0].split.link, 6);
  EXPECT_EQ(rows[0].split.host, 3);
  EXPECT_EQ(rows[0].host_weight_bytes, 3 * kExpertBytes);
  EXPECT_EQ(rows[1].tokens_per_expert, 2);  // 32 token-experts over 20 experts
  EXPECT_EQ(rows[1].split.host + rows[1].split.link, 16);
  EXPECT_DOUBLE_EQ(rows[1].all_link_seconds, 16e-3);
}

}  // namespace
}  // namespace specgen::moe_host
