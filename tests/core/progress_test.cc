// ProgressBar driven by a fake clock and a captured stream: what it draws, when, and how often.
#include "engine/core/progress.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Harness {
  double now = 100.0;
  std::vector<std::string> writes;
  ProgressBar::Options Options(bool terminal, ProgressBar::Unit unit = ProgressBar::Unit::kBytes) {
    ProgressBar::Options o;
    o.unit = unit;
    o.terminal = terminal ? 1 : 0;
    o.clock = [this] { return now; };
    o.write = [this](std::string_view s) { writes.emplace_back(s); };
    o.bar_width = 10;
    return o;
  }
  std::string All() const {
    std::string s;
    for (const std::string& w : writes) s += w;
    return s;
  }
};

TEST(ProgressBar, RendersPercentAmountsRateAndEta) {
  Harness h;
  ProgressBar bar("loading x", 1000 * 1024 * 1024, h.Options(true));
  h.now += 2.0;
  bar.Update(250 * 1024 * 1024);
  // 250 MiB of 1000 in 2 s: 25 %, 125 MiB/s, 750 MiB left at that rate = 6 s.
  EXPECT_EQ(bar.Render(h.now), "loading x [##........]  25%  250 MiB / 1000 MiB  125 MiB/s  ETA 6s");
  bar.SetDetail("layer 3/28");
  EXPECT_THAT(bar.Render(h.now), HasSubstr("ETA 6s  layer 3/28"));
}

TEST(ProgressBar, ItemsAndLongEtas) {
  Harness h;
  ProgressBar bar("converting", 48, h.Options(true, ProgressBar::Unit::kItems));
  h.now += 10.0;
  bar.Update(2);  // 0.2 items/s: 46 left take 230 s
  EXPECT_THAT(bar.Render(h.now), HasSubstr("2/48"));
  EXPECT_THAT(bar.Render(h.now), HasSubstr("ETA 3m50s"));
  EXPECT_THAT(bar.Render(h.now), HasSubstr("  4%"));
}

TEST(ProgressBar, SilentForShortWork) {
  Harness h;
  {
    ProgressBar bar("quick", 100, h.Options(true));
    h.now += 0.5;
    bar.Update(50);
    h.now += 0.4;
    bar.Update(100);
  }  // finished within the 1 s delay
  EXPECT_TRUE(h.writes.empty()) << h.All();
  {
    ProgressBar bar("quick", 100, h.Options(false));
    h.now += 0.9;
    bar.Update(100);
  }
  EXPECT_TRUE(h.writes.empty()) << h.All();
}

TEST(ProgressBar, RedrawsAtMostTenTimesASecondOnATerminal) {
  Harness h;
  ProgressBar bar("big", 10000, h.Options(true));
  h.now += 1.0;  // past the delay
  for (int i = 1; i <= 1000; ++i) {
    h.now += 0.002;  // 1000 updates over 2 s
    bar.Update(i * 10);
  }
  // A redraw needs 0.1 s since the previous one: at most 2 s / 0.1 s + 1 draws.
  EXPECT_GE(h.writes.size(), 19u);
  EXPECT_LE(h.writes.size(), 21u);
  for (const std::string& w : h.writes) EXPECT_EQ(w[0], '\r');  // in place
  bar.Finish();
  EXPECT_EQ(h.writes.back(), "\n");
  EXPECT_THAT(h.writes[h.writes.size() - 2], HasSubstr("100%"));
  const size_t n = h.writes.size();
  bar.Finish();  // idempotent
  EXPECT_EQ(h.writes.size(), n);
}

TEST(ProgressBar, ShorterLinesBlankTheRest) {
  Harness h;
  ProgressBar bar("b", 100, h.Options(true, ProgressBar::Unit::kItems));
  h.now += 1.0;
  bar.SetDetail("a long detail text");
  h.now += 0.2;
  bar.SetDetail("");
  ASSERT_EQ(h.writes.size(), 2u);
  EXPECT_EQ(h.writes[1].size(), h.writes[0].size());
  EXPECT_EQ(h.writes[1].back(), ' ');
}

TEST(ProgressBar, OneFinalLineWhenNotATerminal) {
  Harness h;
  {
    ProgressBar bar("loading t", 3 * 1024 * 1024, h.Options(false));
    for (int i = 1; i <= 30; ++i) {
      h.now += 0.1;
      bar.Update(i * 1024 * 1024 / 10);
    }
  }
  ASSERT_EQ(h.writes.size(), 1u) << h.All();
  EXPECT_EQ(h.writes[0], "loading t: 3.00 MiB in 3.0 s (1.00 MiB/s)\n");
  EXPECT_THAT(h.writes[0], Not(HasSubstr("\r")));
}

TEST(ProgressBar, IncompleteWorkLeavesNoSummaryButEndsTheLine) {
  Harness h;
  {
    ProgressBar bar("failing", 100, h.Options(false));
    h.now += 5;
    bar.Update(40);
  }
  EXPECT_TRUE(h.writes.empty());
  {
    ProgressBar bar("failing", 100, h.Options(true));
    h.now += 5;
    bar.Update(40);
  }
  ASSERT_FALSE(h.writes.empty());
  EXPECT_EQ(h.writes.back(), "\n");  // the shell prompt starts on a fresh line
}

TEST(ProgressBar, NotesBlankTheBarAndItIsRedrawn) {
  Harness h;
  ProgressBar bar("n", 100, h.Options(true, ProgressBar::Unit::kItems));
  h.now += 1.0;
  bar.Update(10);
  ASSERT_EQ(h.writes.size(), 1u);
  const size_t width = h.writes[0].size() - 1;  // without the \r
  bar.Note("note: something");
  EXPECT_EQ(h.writes[1], "\r" + std::string(width, ' ') + "\rnote: something\n");
  h.now += 0.01;  // within the redraw interval, yet the bar comes back at once
  bar.Update(11);
  ASSERT_EQ(h.writes.size(), 3u);
  EXPECT_THAT(h.writes[2], HasSubstr("11/100"));
  // Before any bar, or off a terminal, a note is just its line.
  Harness plain;
  ProgressBar quiet("q", 100, plain.Options(false));
  quiet.Note("note: x");
  EXPECT_EQ(plain.All(), "note: x\n");
}

TEST(ProgressBar, CallbackSetsTotalAndDone) {
  Harness h;
  ProgressBar bar("cb", 0, h.Options(true));
  std::function<void(size_t, size_t)> cb = bar.Callback();
  h.now += 2;
  cb(512, 2048);
  EXPECT_THAT(bar.Render(h.now), HasSubstr(" 25%"));
  EXPECT_THAT(bar.Render(h.now), HasSubstr("512 B / 2.00 KiB"));
}

}  // namespace
}  // namespace specgen
