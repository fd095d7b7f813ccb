// The host side of the dense-layer ring (docs/design.md §12): where a streamed layer's weights sit in
// the pinned host arena and in a ring buffer (moe/layer_ring_layout.h), and what the
// Transformer does with TransformerOptions::streamed_dense_layers on a backend that keeps every weight
// resident (the CPU): bad lists are errors naming the layer, good ones upload as usual with the same
// logits. The GPU side is tests/backend_cuda/streamed_layers_test.cc.
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "moe/layer_ring_layout.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

constexpr size_t kA = LayerRingLayout::kAlignment;

TEST(LayerRingLayoutTest, LayersAreContiguousRunsWithAlignedWeights) {
  const std::vector<std::vector<size_t>> bytes = {{100, 256, 7}, {512}, {1, 1}, {300, 300, 300}};
  absl::StatusOr<LayerRingLayout> l = MakeLayerRingLayout(bytes, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->layers.size(), 4u);
  // Layer 0: 100 bytes at 0, 256 at 256, 7 at 512: one copy of 519 bytes.
  EXPECT_EQ(l->layers[0].base, 0u);
  EXPECT_EQ(l->layers[0].offsets, (std::vector<size_t>{0, kA, 2 * kA}));
  EXPECT_EQ(l->layers[0].bytes, 2 * kA + 7);
  // Each layer starts on the alignment after the previous one's end.
  EXPECT_EQ(l->layers[1].base, 3 * kA);
  EXPECT_EQ(l->layers[1].bytes, 512u);
  EXPECT_EQ(l->layers[2].base, 5 * kA);
  EXPECT_EQ(l->layers[2].offsets, (std::vector<size_t>{0, kA}));
  EXPECT_EQ(l->layers[2].bytes, kA + 1);
  EXPECT_EQ(l->layers[3].base, 7 * kA);
  EXPECT_EQ(l->layers[3].offsets, (std::vector<size_t>{0, 2 * kA, 4 * kA}));
  EXPECT_EQ(l->layers[3].bytes, 4 * kA + 300);
  EXPECT_EQ(l->host_bytes, 7 * kA + 6 * kA) << "the last layer padded to the alignment too";
  EXPECT_EQ(l->buffer_bytes, 4 * kA + 300) << "a buffer holds the largest layer";
  EXPECT_EQ(l->PassBytes(), (2 * kA + 7) + 512 + (kA + 1) + (4 * kA + 300));
  // Every weight of every layer inside its layer's run and the arena, none overlapping the next.
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (size_t t = 0; t < bytes[i].size(); ++t) {
      EXPECT_EQ(l->layers[i].offsets[t] % kA, 0u);
      EXPECT_LE(l->layers[i].offsets[t] + bytes[i][t], l->layers[i].bytes);
      if (t + 1 < bytes[i].size()) {
        EXPECT_LE(l->layers[i].offsets[t] + bytes[i][t], l->layers[i].offsets[t + 1]);
      }
    }
    EXPECT_EQ(l->layers[i].base % kA, 0u);
    EXPECT_LE(l->layers[i].base + l->layers[i].bytes, l->host_bytes);
  }
  // Layer i uses buffer i mod ring.
  EXPECT_EQ(l->ring, 2);
  EXPECT_EQ(l->BufferOf(0), 0);
  EXPECT_EQ(l->BufferOf(1), 1);
  EXPECT_EQ(l->BufferOf(2), 0);
  EXPECT_EQ(l->BufferOf(3), 1);
}

TEST(LayerRingLayoutTest, TheRingHasAtMostOneBufferPerLayer) {
  const std::vector<std::vector<size_t>> bytes = {{10}, {20}, {30}};
  for (const auto& [asked, got] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{3, 3}, std::pair{8, 3}}) {
    absl::StatusOr<LayerRingLayout> l = MakeLayerRingLayout(bytes, asked);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->ring, got) << "asked for " << asked;
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(l->BufferOf(i), static_cast<int>(i) % got);
  }
}

TEST(LayerRingLayoutTest, BadInputIsAnErrorNamingIt) {
  const std::vector<std::vector<size_t>> none;
  EXPECT_THAT(MakeLayerRingLayout(none, 2).status().message(), HasSubstr("no layers"));
  const std::vector<std::vector<size_t>> empty_layer = {{10}, {}};
  EXPECT_THAT(MakeLayerRingLayout(empty_layer, 2).status().message(), HasSubstr("streamed layer 1: no weights"));
  const std::vector<std::vector<size_t>> zero = {{10, 0}};
  EXPECT_THAT(MakeLayerRingLayout(zero, 2).status().message(), HasSubstr("layer 0: weight 1 has 0 bytes"));
  const std::vector<std::vector<size_t>> fine = {{10}};
  EXPECT_THAT(MakeLayerRingLayout(fine, 0).status().message(), HasSubstr("a ring of 0 buffers"));
}

// tiny-moe's shape with six layers, four of them dense (0, 2, 3, 5): streamed layers that are not
// consecutive, beside MoE layers.
std::shared_ptr<const LoadedModel> MixedModel() {
  auto spec = SynthSpec("tiny-moe");
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return nullptr;
  spec->n_layers = 6;
  spec->layer_is_moe = {false, true, false, false, true, false};
  auto w = SynthWeights(*spec, DType::kBF16, 7);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::shared_ptr<const LoadedModel>(std::move(w).value()) : nullptr;
}

TEST(StreamedDenseLayersTest, BadListsAreErrorsNamingTheLayer) {
  auto model = MixedModel();
  ASSERT_NE(model, nullptr);
  CpuBackend be(2);
  auto error = [&](std::vector<int> layers, int ring) {
    TransformerOptions o;
    o.max_context = 32;
    o.streamed_dense_layers = std::move(layers);
    o.dense_ring_layers = ring;
    auto t = Transformer::Create(model, &be, o);
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(error({0, 6}, 2), HasSubstr("streamed dense layer 6 is outside the model's 6 layers"));
  EXPECT_THAT(error({-1}, 2), HasSubstr("streamed dense layer -1"));
  EXPECT_THAT(error({0, 1}, 2), HasSubstr("layer 1 is an MoE layer"));
  EXPECT_THAT(error({3, 0, 3}, 2), HasSubstr("dense layer 3 listed twice"));
  EXPECT_THAT(error({0, 2}, 0), HasSubstr("a ring of 0 layer buffers"));
}

TEST(StreamedDenseLayersTest, ABackendWithoutStreamingUploadsThemWithTheSameLogits) {
  auto model = MixedModel();
  ASSERT_NE(model, nullptr);
  CpuBackend be(2);
  TransformerOptions o;
  o.max_context = 32;
  size_t resident_total = 0;
  o.upload_progress = [&](size_t, size_t total) { resident_total = total; };
  auto resident = Transformer::Create(model, &be, o);
  ASSERT_TRUE(resident.ok()) << resident.status();
  o.streamed_dense_layers = {5, 0, 2, 3};  // any order
  size_t asked_total = 0;
  o.upload_progress = [&](size_t, size_t total) { asked_total = total; };
  auto asked = Transformer::Create(model, &be, o);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_FALSE((*asked)->streams_dense_layers()) << "the CPU keeps every weight resident";
  EXPECT_FALSE((*asked)->dense_stream_stats().ok());
  EXPECT_EQ(asked_total, resident_total) << "every weight uploaded";
  EXPECT_EQ((*asked)->resident_bytes(), (*resident)->resident_bytes());
  for (int l : {0, 2, 3, 5}) EXPECT_NE((*asked)->layer_refs(l).gate, nullptr) << "layer " << l;
  const std::vector<int32_t> ids = {5, 17, 42, 99, 3};
  std::vector<float> a, b;
  ASSERT_TRUE((*resident)->Forward(ids, &a).ok());
  ASSERT_TRUE((*asked)->Forward(ids, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace specgen
