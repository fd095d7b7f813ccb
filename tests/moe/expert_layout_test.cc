// moe/expert_layout.h: every expert's three matrices lie inside its own stride, aligned, experts of a
// layer one after another, layers one after another, nothing overlapping, and a slot fits any expert.
#include "moe/expert_layout.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace specgen {
namespace {

TEST(ExpertLayout, ExpertsAreContiguousAlignedAndDisjoint) {
  // Odd sizes on purpose (not multiples of the alignment), layers of different shapes.
  const std::vector<ExpertLayerSize> sizes = {
      {4, 1000, 1000, 1002}, {3, 4096, 4096, 4096}, {5, 17, 33, 65}, {2, 9437184, 9437184, 9437184}};
  auto lay = MakeExpertLayout(sizes);
  ASSERT_TRUE(lay.ok()) << lay.status();
  ASSERT_EQ(lay->layers.size(), sizes.size());
  std::vector<std::pair<size_t, size_t>> ranges;  // every matrix's [begin, end)
  size_t max_stride = 0, end_of_last = 0;
  for (size_t l = 0; l < sizes.size(); ++l) {
    const ExpertLayout::Layer& L = lay->layers[l];
    EXPECT_EQ(L.experts, sizes[l].experts);
    EXPECT_EQ(L.base, end_of_last) << "layer " << l << " starts where the previous ends";
    EXPECT_EQ(L.stride % ExpertLayout::kAlignment, 0u);
    EXPECT_EQ(L.gate, 0u);
    for (size_t off : {L.gate, L.up, L.down}) EXPECT_EQ(off % ExpertLayout::kAlignment, 0u) << "layer " << l;
    EXPECT_LE(L.down + sizes[l].down_bytes, L.stride);
    // Tight: the stride is the three matrices each rounded up to the alignment.
    auto up = [](size_t b) { return (b + 255) / 256 * 256; };
    EXPECT_EQ(L.stride, up(sizes[l].gate_bytes) + up(sizes[l].up_bytes) + up(sizes[l].down_bytes));
    for (int64_t e = 0; e < L.experts; ++e) {
      const size_t at = lay->ExpertOffset(l, e);
      EXPECT_EQ(at, L.base + e * L.stride);
      ranges.push_back({at + L.gate, at + L.gate + sizes[l].gate_bytes});
      ranges.push_back({at + L.up, at + L.up + sizes[l].up_bytes});
      ranges.push_back({at + L.down, at + L.down + sizes[l].down_bytes});
    }
    end_of_last = L.base + L.stride * L.experts;
    max_stride = std::max(max_stride, L.stride);
  }
  EXPECT_EQ(lay->total_bytes, end_of_last);
  EXPECT_EQ(lay->slot_bytes, max_stride);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "matrices " << i - 1 << " and " << i << " overlap";
  }
  EXPECT_LE(ranges.back().second, lay->total_bytes);
}

TEST(ExpertLayout, EmptyLayersAreErrors) {
  for (const ExpertLayerSize& bad : {ExpertLayerSize{0, 16, 16, 16}, ExpertLayerSize{4, 16, 0, 16}}) {
    const std::vector<ExpertLayerSize> sizes = {{2, 16, 16, 16}, bad};
    auto lay = MakeExpertLayout(sizes);
    ASSERT_FALSE(lay.ok());
    EXPECT_NE(lay.status().message().find("layer 1"), std::string::npos) << lay.status();
  }
}

}  // namespace
}  // namespace specgen
