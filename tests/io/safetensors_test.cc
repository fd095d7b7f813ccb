#include "engine/io/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/io/test_bytes.h"

namespace specgen {
namespace {

using ::specgen::testing::Bytes;
using ::specgen::testing::TempDir;
using ::specgen::testing::WriteFile;
using ::testing::HasSubstr;

// A safetensors image: u64 header length, the JSON header, then `data`.
std::vector<uint8_t> Image(std::string_view header, const std::vector<uint8_t>& data) {
  Bytes b;
  b.U64(header.size()).Raw(header);
  b.vec().insert(b.vec().end(), data.begin(), data.end());
  return b.vec();
}

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

constexpr std::string_view kGood =
    R"({"__metadata__":{"format":"pt"},)"
    R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("h":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},)"
    R"("b":{"dtype":"BF16","shape":[2,1,2],"data_offsets":[32,40]},)"
    R"("s":{"dtype":"F32","shape":[],"data_offsets":[40,44]},)"
    R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[44,44]}}  )";  // trailing pad spaces

TEST(Safetensors, ParsesSingleImage) {
  const std::vector<uint8_t> data = Iota(44);
  const std::vector<uint8_t> image = Image(kGood, data);
  auto set = SafetensorsSet::Parse(image.data(), image.size(), "m.safetensors");
  ASSERT_TRUE(set.ok()) << set.status();
  const SafetensorsSet& s = **set;
  EXPECT_EQ(s.tensors().size(), 5u);
  EXPECT_EQ(s.metadata().at("format"), "pt");
  const size_t buffer = 8 + kGood.size();
  const SafetensorsTensor* w = s.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->bytes, 24u);
  EXPECT_EQ(w->data, image.data() + buffer);
  EXPECT_EQ(w->file, "m.safetensors");
  EXPECT_EQ(s.Find("h")->dtype, DType::kF16);
  EXPECT_EQ(s.Find("h")->data, image.data() + buffer + 24);
  EXPECT_EQ(s.Find("b")->dtype, DType::kBF16);
  EXPECT_EQ(s.Find("b")->shape, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_TRUE(s.Find("s")->shape.empty());  // a scalar: one element
  EXPECT_EQ(s.Find("s")->bytes, 4u);
  EXPECT_EQ(s.Find("e")->bytes, 0u);
  EXPECT_EQ(s.Find("missing"), nullptr);
}

TEST(Safetensors, OpensFileAndDirectory) {
  TempDir dir;
  const std::vector<uint8_t> data = Iota(44);
  const std::vector<uint8_t> image = Image(kGood, data);
  WriteFile(dir.File("model.safetensors"), image.data(), image.size());
  for (const std::string& path : {dir.File("model.safetensors"), dir.path()}) {
    auto set = SafetensorsSet::Open(path);
    ASSERT_TRUE(set.ok()) << set.status();
    const SafetensorsTensor* h = (*set)->Find("h");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(0, std::memcmp(h->data, data.data() + 24, 8));
    EXPECT_EQ(h->file, dir.File("model.safetensors"));
  }
}

// Two shards and an index, as transformers saves large checkpoints.
void WriteSharded(const TempDir& dir, std::string_view index) {
  const std::vector<uint8_t> a = Image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Iota(8));
  const std::vector<uint8_t> b = Image(
      R"({"y":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"z":{"dtype":"F16","shape":[1],"data_offsets":[6,8]}})",
      Iota(8));
  WriteFile(dir.File("model-00001-of-00002.safetensors"), a.data(), a.size());
  WriteFile(dir.File("model-00002-of-00002.safetensors"), b.data(), b.size());
  WriteFile(dir.File("model.safetensors.index.json"), index);
}

constexpr std::string_view kIndex =
    R"({"metadata":{"total_size":22},"weight_map":{"x":"model-00001-of-00002.safetensors",)"
    R"("y":"model-00002-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})";

TEST(Safetensors, OpensShardedSetByIndexOrDirectory) {
  TempDir dir;
  WriteSharded(dir, kIndex);
  for (const std::string& path : {dir.File("model.safetensors.index.json"), dir.path()}) {
    auto set = SafetensorsSet::Open(path);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ((*set)->tensors().size(), 3u);
    EXPECT_EQ((*set)->Find("x")->file, dir.File("model-00001-of-00002.safetensors"));
    EXPECT_EQ((*set)->Find("y")->file, dir.File("model-00002-of-00002.safetensors"));
    EXPECT_EQ((*set)->Find("z")->dtype, DType::kF16);
    EXPECT_EQ(0, std::memcmp((*set)->Find("z")->data, Iota(8).data() + 6, 2));
  }
}

TEST(Safetensors, DirectoryWithoutIndexTakesEveryShard) {
  TempDir dir;
  WriteSharded(dir, kIndex);
  std::filesystem::remove(dir.File("model.safetensors.index.json"));
  auto set = SafetensorsSet::Open(dir.path());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->tensors().size(), 3u);
}

TEST(Safetensors, ShardErrors) {
  TempDir dir;
  WriteSharded(dir, kIndex);
  std::filesystem::remove(dir.File("model-00002-of-00002.safetensors"));
  auto missing = SafetensorsSet::Open(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing"));

  TempDir d2;
  WriteSharded(d2, R"({"weight_map":{"x":"model-00002-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
  auto wrong = SafetensorsSet::Open(d2.path());
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("tensor 'x'"));

  TempDir d3;
  WriteSharded(d3, R"({"weight_map":{"x":"../model-00001-of-00002.safetensors"}})");
  auto escape = SafetensorsSet::Open(d3.path());
  ASSERT_FALSE(escape.ok());
  EXPECT_THAT(std::string(escape.status().message()), HasSubstr("not a file name"));

  TempDir d4;
  WriteSharded(d4, "not json");
  auto bad_json = SafetensorsSet::Open(d4.path());
  ASSERT_FALSE(bad_json.ok());
  EXPECT_THAT(std::string(bad_json.status().message()), HasSubstr("model.safetensors.index.json"));

  TempDir d5;  // the same tensor in two shards
  const std::vector<uint8_t> a = Image(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Iota(4));
  WriteFile(d5.File("a.safetensors"), a.data(), a.size());
  WriteFile(d5.File("b.safetensors"), a.data(), a.size());
  auto dup = SafetensorsSet::Open(d5.path());
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("'x' also appears in"));

  TempDir empty;
  auto none = SafetensorsSet::Open(empty.path());
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no model.safetensors"));
}

void ExpectBad(std::string_view header, size_t data_bytes, std::string_view what) {
  const std::vector<uint8_t> image = Image(header, Iota(data_bytes));
  auto set = SafetensorsSet::Parse(image.data(), image.size(), "bad.safetensors");
  ASSERT_FALSE(set.ok()) << "expected an error about: " << what;
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("bad.safetensors"));
  EXPECT_THAT(std::string(set.status().message()), HasSubstr(std::string(what)));
}

TEST(SafetensorsBadInput, HeaderErrors) {
  ExpectBad("[1,2]", 0, "not a JSON object");
  ExpectBad("{\"a\":", 0, "not valid JSON");
  ExpectBad("", 0, "not a JSON object");
  ExpectBad(R"({"__metadata__":{"k":1}})", 0, "__metadata__ value 'k' is not a string");
  ExpectBad(R"({"__metadata__":[]})", 0, "__metadata__ is not a JSON object");

  Bytes too_long;
  too_long.U64(100'000'001).Raw("{}");
  auto a = SafetensorsSet::Parse(too_long.data(), too_long.size(), "bad.safetensors");
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("exceeds the limit"));
  Bytes past_end;
  past_end.U64(1000).Raw("{}");
  auto b = SafetensorsSet::Parse(past_end.data(), past_end.size(), "bad.safetensors");
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("truncated"));
  Bytes tiny;
  tiny.Raw("abc");
  auto c = SafetensorsSet::Parse(tiny.data(), tiny.size(), "bad.safetensors");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("truncated"));
}

TEST(SafetensorsBadInput, TensorErrors) {
  ExpectBad(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4, "tensor 'w' has dtype I8");
  ExpectBad(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4, "not supported");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,20]}})", 20, "need 4 x 4");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "outside the data buffer");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "outside the data buffer");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, "not a non-negative integer");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})", 0, "not a non-negative integer");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflows");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "data_offsets");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4, "not non-negative");
  ExpectBad(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, "lacks a string dtype");
  ExpectBad(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, "lacks a shape");
  ExpectBad(R"({"w":[1]})", 4, "'w' is not a JSON object");
  ExpectBad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12, "tensors 'a' and 'b' overlap");
  ExpectBad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4,
            "outside the data buffer");
}

// Every truncation of a valid file fails cleanly (the data buffer shrinks under the offsets).
TEST(SafetensorsBadInput, EveryTruncationFails) {
  const std::vector<uint8_t> image = Image(kGood, Iota(44));
  for (size_t n = 0; n < image.size(); ++n) {
    std::vector<uint8_t> prefix(image.begin(), image.begin() + n);
    auto set = SafetensorsSet::Parse(prefix.data(), prefix.size(), "cut.safetensors");
    ASSERT_FALSE(set.ok()) << n;
    EXPECT_THAT(std::string(set.status().message()), HasSubstr("cut.safetensors"));
  }
}

}  // namespace
}  // namespace specgen
