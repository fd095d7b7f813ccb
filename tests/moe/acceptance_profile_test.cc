// The acceptance profiles and their parser: the named forms, lists by depth, and errors that name the
// flag and the bad value.
#include "moe/acceptance_profile.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

TEST(AcceptanceProfileTest, FlatAndListForms) {
  absl::StatusOr<AcceptanceProfile> flat = ParseAcceptance("flat:0.6");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->name, "flat:0.6");
  EXPECT_EQ(flat->by_depth, std::vector<double>{0.6});
  EXPECT_DOUBLE_EQ(flat->at(9), 0.6);
  EXPECT_EQ(FlatAcceptance(0.9).name, "flat:0.9");
  EXPECT_EQ(ParseAcceptance("0.9")->by_depth, FlatAcceptance(0.9).by_depth);
  absl::StatusOr<AcceptanceProfile> list = ParseAcceptance("0.9,0.5,0.25");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->by_depth, (std::vector<double>{0.9, 0.5, 0.25}));
  EXPECT_DOUBLE_EQ(list->at(7), 0.25);  // the last value holds deeper
  // 1 + 0.9 + 0.9·0.5 + 0.9·0.5·0.25 + 0.9·0.5·0.25·0.25 at k = 4.
  EXPECT_NEAR(TokensPerPass(*list, 4), 1 + 0.9 + 0.45 + 0.1125 + 0.028125, 1e-12);
  EXPECT_EQ(ParseAcceptance("typical")->by_depth, TypicalAcceptance().by_depth);
}

TEST(AcceptanceProfileTest, ErrorsNameTheSourceAndTheValue) {
  for (const char* bad : {"flat:", "flat:0", "flat:0.5,0.4", "0.9,,0.3", "0.9,1.2", "0.9,x", "flat:nan"}) {
    absl::StatusOr<AcceptanceProfile> a = ParseAcceptance(bad, "acceptance");
    ASSERT_FALSE(a.ok()) << bad;
    const std::string m(a.status().message());
    EXPECT_EQ(m.rfind(std::string("acceptance '") + bad + "'", 0), 0u) << m;
  }
  const std::string m(ParseAcceptance("0.9,1.2").status().message());
  EXPECT_NE(m.find("value 2 ('1.2')"), std::string::npos) << m;
}

}  // namespace
}  // namespace specgen::moe
