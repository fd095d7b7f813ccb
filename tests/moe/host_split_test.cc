// The split of a layer's missed experts between the host and the link (moe/host/host_split.h) on a CPU
// cost model: a host that computes 1000 experts a second, a link that fetches one expert a millisecond.
#include <random>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace specgen::moe_host
