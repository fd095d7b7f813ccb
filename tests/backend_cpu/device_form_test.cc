// engine/backend/device_form.h: the bytes a streamed weight is copied in. f32/f16/bf16 and matrices of
// the packed block types are the stored bytes; any other quantized tensor becomes bf16 of its
// dequantized values (what CudaBackend::Upload keeps), element for element; a malformed view is an
// error naming the tensor.
#include "engine/backend/device_form.h"

#include <cstring>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

TensorView View(DType t, int64_t rows, int64_t cols, const void* data, size_t bytes) {
  TensorView v;
  v.dtype = t;
  v.ndim = 2;
  v.shape = {rows, cols, 0, 0};
  v.data = data;
  v.bytes = bytes;
  return v;
}

TEST(DeviceForm, PlainTypesAreTheStoredBytes) {
  std::vector<uint16_t> bf16(6 * 40);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(i * 7919u);
  for (DType t : {DType::kBF16, DType::kF16}) {
    const TensorView v = View(t, 6, 40, bf16.data(), bf16.size() * 2);
    auto f = DeviceFormOf(v, "w");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->rows, 6);
    EXPECT_EQ(f->cols, 40);
    EXPECT_EQ(f->bytes, bf16.size() * 2);
    EXPECT_EQ(f->type, t == DType::kBF16 ? kernels::ElemType::kBF16 : kernels::ElemType::kF16);
    std::vector<uint16_t> out(bf16.size(), 0xAAAA);
    ASSERT_TRUE(WriteDeviceForm(v, "w", out.data()).ok());
    EXPECT_EQ(out, bf16);
  }
  std::vector<float> f32(3 * 8);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const TensorView v = View(DType::kF32, 3, 8, f32.data(), f32.size() * 4);
  std::vector<float> out(f32.size());
  ASSERT_TRUE(WriteDeviceForm(v, "w", out.data()).ok());
  EXPECT_EQ(std::memcmp(out.data(), f32.data(), f32.size() * 4), 0);
}

TEST(DeviceForm, PackedBlockTypesAreTheStoredBytes) {
  const int64_t rows = 5, cols = 512;
  std::mt19937 rng(5);
  std::vector<float> src(rows * cols);
  for (float& x : src) x = std::uniform_real_distribution<float>(-2, 2)(rng);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kMXFP4}) {
    auto bytes = TensorBytes(t, cols, rows);
    ASSERT_TRUE(bytes.ok());
    std::vector<uint8_t> q(*bytes);
    const int64_t row_bytes = static_cast<int64_t>(*bytes) / rows;
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(QuantizeRow(t, src.data() + r * cols, cols, q.data() + r * row_bytes).ok());
    }
    const TensorView v = View(t, rows, cols, q.data(), q.size());
    auto f = DeviceFormOf(v, "w");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->type, *PackedDeviceType(t)) << Name(t);
    EXPECT_TRUE(kernels::IsPacked(f->type)) << Name(t);
    EXPECT_EQ(f->bytes, q.size()) << Name(t);
    std::vector<uint8_t> out(q.size(), 0xAA);
    ASSERT_TRUE(WriteDeviceForm(v, "w", out.data()).ok());
    EXPECT_EQ(out, q) << Name(t);
  }
}

TEST(DeviceForm, OtherQuantizedTypesBecomeBf16OfTheDequantizedValues) {
  // Q4_1 blocks (f16 d, f16 m, 16 bytes of nibbles) written by hand with finite scales; enough rows
  // that the writer's row chunks (65536 / cols rows a chunk) split the tensor.
  const int64_t rows = 300, cols = 256;
  auto bytes = TensorBytes(DType::kQ4_1, cols, rows);
  ASSERT_TRUE(bytes.ok());
  std::vector<uint8_t> q(*bytes);
  std::mt19937 rng(3);
  const size_t block = *bytes / static_cast<size_t>(rows * cols / 32);
  for (size_t b = 0; b < q.size() / block; ++b) {
    uint8_t* p = q.data() + b * block;
    const uint16_t d = F32ToF16(std::uniform_real_distribution<float>(0.01f, 0.1f)(rng));
    const uint16_t m = F32ToF16(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
    std::memcpy(p, &d, 2);
    std::memcpy(p + 2, &m, 2);
    for (size_t i = 4; i < block; ++i) p[i] = static_cast<uint8_t>(rng());
  }
  const TensorView v = View(DType::kQ4_1, rows, cols, q.data(), q.size());
  auto f = DeviceFormOf(v, "w");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->type, kernels::ElemType::kBF16);
  EXPECT_EQ(f->bytes, static_cast<size_t>(rows * cols * 2));
  std::vector<uint16_t> out(rows * cols);
  ASSERT_TRUE(WriteDeviceForm(v, "w", out.data()).ok());
  std::vector<float> deq(rows * cols);
  ASSERT_TRUE(DequantizeRows(DType::kQ4_1, q.data(), rows, cols, deq.data()).ok());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(out[i], F32ToBf16(deq[i])) << "element " << i;
}

TEST(DeviceForm, MalformedViewsNameTheTensor) {
  std::vector<uint16_t> small(10);
  const TensorView v = View(DType::kBF16, 4, 8, small.data(), small.size() * 2);  // needs 64 bytes
  auto f = DeviceFormOf(v, "blk.0.expert.3.gate");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("blk.0.expert.3.gate"), std::string::npos) << f.status();
  std::vector<uint16_t> out(32);
  EXPECT_FALSE(WriteDeviceForm(v, "x", out.data()).ok());
}

}  // namespace
}  // namespace specgen
