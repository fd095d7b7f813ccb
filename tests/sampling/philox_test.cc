#include "engine/sampling/philox.h"

#include <set>

#include "engine/sampling/keyed_random.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

void ExpectPhilox(PhiloxCounter c, PhiloxKey k, PhiloxCounter expected) {
  const PhiloxCounter out = Philox4x32x10(c, k);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], expected.v[i]) << "word " << i;
}

// Random123's known-answer vectors (tests/kat_vectors), the contract a CUDA twin must also meet.
TEST(Philox, Random123KnownAnswers) {
  ExpectPhilox({{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  ExpectPhilox({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
               {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  ExpectPhilox({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
               {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(KeyedRandom, UniformIsInsideTheOpenInterval) {
  EXPECT_GT(BitsToOpenUnit(0), 0.0);
  EXPECT_LT(BitsToOpenUnit(0xffffffffu), 1.0);
}

TEST(KeyedRandom, SeedPositionAndPurposeEachChangeTheDraw) {
  std::set<double> draws;
  for (uint64_t seed : {0ull, 1ull, 1ull << 40}) {
    for (int64_t pos : {0ll, 1ll, 1ll << 33}) {
      for (auto purpose : {RandomPurpose::kTargetSample, RandomPurpose::kDraftSample,
                           RandomPurpose::kAcceptUniform, RandomPurpose::kResidual}) {
        draws.insert(KeyedUniform(seed, pos, purpose));
      }
    }
  }
  EXPECT_EQ(draws.size(), 3u * 3u * 4u);
}

TEST(KeyedRandom, GumbelOfAnIdIsStableAcrossCalls) {
  // Pure function of its key: what lets a GPU kernel and the CPU agree.
  EXPECT_EQ(KeyedGumbel(7, 12, RandomPurpose::kTargetSample, 13),
            KeyedGumbel(7, 12, RandomPurpose::kTargetSample, 13));
  EXPECT_NE(KeyedGumbel(7, 12, RandomPurpose::kTargetSample, 13),
            KeyedGumbel(7, 12, RandomPurpose::kTargetSample, 14));
}

}  // namespace
}  // namespace specgen
