#include "engine/io/gguf.h"

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/io/test_bytes.h"

namespace specgen {
namespace {

using ::specgen::testing::Bytes;
using ::specgen::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint32_t kMagic = 0x46554747;

GgufValue Int(GgufType t, int64_t v) {
  GgufValue g;
  g.type = t;
  g.v = v;
  return g;
}
GgufValue UInt(GgufType t, uint64_t v) {
  GgufValue g;
  g.type = t;
  g.v = v;
  return g;
}
GgufValue Flt(GgufType t, double v) {
  GgufValue g;
  g.type = t;
  g.v = v;
  return g;
}
GgufValue Str(std::string s) {
  GgufValue g;
  g.type = GgufType::kString;
  g.v = std::move(s);
  return g;
}
GgufValue Arr(GgufType elem, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem;
  a->items = std::move(items);
  GgufValue g;
  g.type = GgufType::kArray;
  g.v = std::move(a);
  return g;
}

// Deterministic filler bytes so a misplaced tensor cannot compare equal by accident.
std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 8));
  return v;
}

TEST(GgufRoundTrip, EveryMetadataType) {
  TempDir dir;
  GgufWriter w;
  w.Set("t.u8", UInt(GgufType::kU8, 255));
  w.Set("t.i8", Int(GgufType::kI8, -128));
  w.Set("t.u16", UInt(GgufType::kU16, 65535));
  w.Set("t.i16", Int(GgufType::kI16, -32768));
  w.SetU32("t.u32", 4000000000u);
  w.SetI32("t.i32", -2000000000);
  w.SetF32("t.f32", 0.1f);
  w.SetBool("t.bool_true", true);
  w.SetBool("t.bool_false", false);
  w.SetString("t.string", "héllo\nworld");
  w.SetString("t.empty_string", "");
  w.SetU64("t.u64", std::numeric_limits<uint64_t>::max());
  w.Set("t.i64", Int(GgufType::kI64, std::numeric_limits<int64_t>::min()));
  w.Set("t.f64", Flt(GgufType::kF64, 1.0 / 3.0));
  w.SetStringArray("t.strings", {"a", "", "ccc"});
  w.SetI32Array("t.i32s", {1, -2, 3});
  w.SetF32Array("t.f32s", {1.5f, -0.25f});
  w.Set("t.u8s", Arr(GgufType::kU8, {UInt(GgufType::kU8, 0), UInt(GgufType::kU8, 200)}));
  w.Set("t.i64s", Arr(GgufType::kI64, {Int(GgufType::kI64, -5)}));
  w.Set("t.f64s", Arr(GgufType::kF64, {Flt(GgufType::kF64, 2.5)}));
  w.Set("t.bools", Arr(GgufType::kBool, {GgufValue{GgufType::kBool, true}, GgufValue{GgufType::kBool, false}}));
  w.Set("t.empty", Arr(GgufType::kU32, {}));
  w.Set("t.nested", Arr(GgufType::kArray, {Arr(GgufType::kI32, {Int(GgufType::kI32, 7), Int(GgufType::kI32, 8)}),
                                           Arr(GgufType::kI32, {}),
                                           Arr(GgufType::kI32, {Int(GgufType::kI32, -9)})}));
  w.Set("t.nested_strings",
        Arr(GgufType::kArray, {Arr(GgufType::kArray, {Arr(GgufType::kString, {Str("deep")})})}));
  w.SetU32("t.replaced", 1);
  w.SetU32("t.replaced", 2);  // a later Set replaces the value
  const std::string path = dir.File("meta.gguf");
  ASSERT_TRUE(w.Write(path).ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.metadata().size(), 25u);
  EXPECT_EQ(g.Find("t.u8")->type, GgufType::kU8);
  EXPECT_EQ(g.Find("t.u8")->AsInt(), 255);
  EXPECT_EQ(g.Find("t.i8")->AsInt(), -128);
  EXPECT_EQ(g.Find("t.u16")->AsInt(), 65535);
  EXPECT_EQ(g.Find("t.i16")->AsInt(), -32768);
  EXPECT_EQ(g.Find("t.u32")->AsInt(), 4000000000);
  EXPECT_EQ(g.Find("t.i32")->AsInt(), -2000000000);
  EXPECT_EQ(g.Find("t.f32")->type, GgufType::kF32);
  EXPECT_EQ(g.Find("t.f32")->AsFloat(), static_cast<double>(0.1f));  // exact: stored as f32
  EXPECT_EQ(g.Find("t.bool_true")->AsBool(), true);
  EXPECT_EQ(g.Find("t.bool_false")->AsBool(), false);
  EXPECT_EQ(*g.Find("t.string")->AsString(), "héllo\nworld");
  EXPECT_EQ(*g.Find("t.empty_string")->AsString(), "");
  EXPECT_EQ(g.Find("t.u64")->AsInt(), std::nullopt);  // does not fit int64
  EXPECT_EQ(std::get<uint64_t>(g.Find("t.u64")->v), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(g.Find("t.i64")->AsInt(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(g.Find("t.f64")->AsFloat(), 1.0 / 3.0);
  EXPECT_EQ(g.Find("t.replaced")->AsInt(), 2);
  EXPECT_EQ(g.Find("t.string")->AsInt(), std::nullopt);
  EXPECT_EQ(g.Find("t.u32")->AsString(), nullptr);
  EXPECT_EQ(g.Find("missing"), nullptr);

  const GgufArray* strings = g.Find("t.strings")->AsArray();
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->elem_type, GgufType::kString);
  ASSERT_EQ(strings->items.size(), 3u);
  EXPECT_EQ(*strings->items[2].AsString(), "ccc");
  EXPECT_EQ(*strings->items[1].AsString(), "");
  const GgufArray* i32s = g.Find("t.i32s")->AsArray();
  ASSERT_EQ(i32s->items.size(), 3u);
  EXPECT_EQ(i32s->items[1].AsInt(), -2);
  EXPECT_EQ(i32s->items[1].type, GgufType::kI32);
  EXPECT_EQ(g.Find("t.f32s")->AsArray()->items[1].AsFloat(), -0.25);
  EXPECT_EQ(g.Find("t.u8s")->AsArray()->items[1].AsInt(), 200);
  EXPECT_EQ(g.Find("t.i64s")->AsArray()->items[0].AsInt(), -5);
  EXPECT_EQ(g.Find("t.f64s")->AsArray()->items[0].AsFloat(), 2.5);
  EXPECT_EQ(g.Find("t.bools")->AsArray()->items[0].AsBool(), true);
  EXPECT_EQ(g.Find("t.bools")->AsArray()->items[1].AsBool(), false);
  EXPECT_EQ(g.Find("t.empty")->AsArray()->elem_type, GgufType::kU32);
  EXPECT_TRUE(g.Find("t.empty")->AsArray()->items.empty());

  const GgufArray* nested = g.Find("t.nested")->AsArray();
  ASSERT_EQ(nested->elem_type, GgufType::kArray);
  ASSERT_EQ(nested->items.size(), 3u);
  EXPECT_EQ(nested->items[0].AsArray()->items[1].AsInt(), 8);
  EXPECT_TRUE(nested->items[1].AsArray()->items.empty());
  EXPECT_EQ(nested->items[2].AsArray()->items[0].AsInt(), -9);
  const GgufArray* deep = g.Find("t.nested_strings")->AsArray()->items[0].AsArray()->items[0].AsArray();
  ASSERT_NE(deep, nullptr);
  EXPECT_EQ(*deep->items[0].AsString(), "deep");
  EXPECT_TRUE(g.tensors().empty());
}

struct TensorCase {
  std::string name;
  std::vector<int64_t> ne;
  DType dtype;
  size_t bytes;  // computed by hand: (ne0 / block) * block_bytes * other dims
};

void CheckTensorsRoundTrip(uint32_t alignment) {
  const std::vector<TensorCase> cases = {
      {"f32", {3, 2}, DType::kF32, 24},
      {"f16", {5}, DType::kF16, 10},
      {"bf16", {7, 1, 2}, DType::kBF16, 28},
      {"q8_0", {64, 3}, DType::kQ8_0, 2 * 34 * 3},
      {"q4_0", {32, 2, 2, 1}, DType::kQ4_0, 18 * 4},
      {"q4_k", {256, 2}, DType::kQ4_K, 144 * 2},
      {"q5_k", {512}, DType::kQ5_K, 176 * 2},
      {"q6_k", {256, 1, 3}, DType::kQ6_K, 210 * 3},
      {"empty", {0, 4}, DType::kF32, 0},
  };
  std::vector<std::vector<uint8_t>> payloads;
  GgufWriter w;
  w.SetString("general.architecture", "test");
  for (size_t i = 0; i < cases.size(); ++i) {
    payloads.push_back(Pattern(cases[i].bytes, static_cast<uint8_t>(i)));
    ASSERT_TRUE(w.AddTensor(cases[i].name, cases[i].ne, cases[i].dtype, payloads.back().data(),
                            payloads.back().size()).ok())
        << cases[i].name;
  }
  TempDir dir;
  const std::string path = dir.File("tensors.gguf");
  ASSERT_TRUE(w.Write(path, alignment).ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.alignment(), alignment);
  if (alignment != 32) {
    ASSERT_NE(g.Find("general.alignment"), nullptr);
    EXPECT_EQ(g.Find("general.alignment")->type, GgufType::kU32);
  }
  EXPECT_EQ(g.data_offset() % alignment, 0u);
  ASSERT_EQ(g.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensorInfo* t = g.FindTensor(cases[i].name);
    ASSERT_NE(t, nullptr) << cases[i].name;
    EXPECT_EQ(g.tensors()[i].name, cases[i].name);  // file order is insertion order
    EXPECT_EQ(t->ne, cases[i].ne);
    EXPECT_EQ(t->dtype, cases[i].dtype);
    EXPECT_EQ(t->bytes, cases[i].bytes);
    EXPECT_EQ(t->offset % alignment, 0u);
    if (!payloads[i].empty()) {
      EXPECT_EQ(0, std::memcmp(g.TensorData(*t), payloads[i].data(), payloads[i].size())) << cases[i].name;
    }
  }
  EXPECT_EQ(g.FindTensor("nope"), nullptr);

  // The in-memory parser sees the same file.
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto p = GgufFile::Parse(image.data(), image.size(), "image");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->tensors().size(), cases.size());
  EXPECT_EQ((*p)->data_offset(), g.data_offset());
  EXPECT_EQ((*p)->file_size(), image.size());
}

TEST(GgufRoundTrip, TensorsOfEveryDType) { CheckTensorsRoundTrip(32); }
TEST(GgufRoundTrip, TensorsWithAlignment64) { CheckTensorsRoundTrip(64); }

TEST(GgufWriter, RejectsBadTensorsAndLeavesNoFile) {
  GgufWriter w;
  std::vector<uint8_t> data(100);
  EXPECT_THAT(std::string(w.AddTensor("a", {3}, DType::kF32, data.data(), 8).message()), HasSubstr("need 12"));
  EXPECT_THAT(std::string(w.AddTensor("a", {33}, DType::kQ8_0, data.data(), 34).message()),
              HasSubstr("block size"));
  EXPECT_THAT(std::string(w.AddTensor("a", {1, 1, 1, 1, 1}, DType::kF32, data.data(), 4).message()),
              HasSubstr("dimensions"));
  EXPECT_THAT(std::string(w.AddTensor("a", {-1}, DType::kF32, data.data(), 0).message()),
              HasSubstr("negative"));
  ASSERT_TRUE(w.AddTensor("a", {2}, DType::kF32, data.data(), 8).ok());
  EXPECT_THAT(std::string(w.AddTensor("a", {2}, DType::kF32, data.data(), 8).message()),
              HasSubstr("added twice"));

  // A value that does not fit its declared type fails at Write, before any file is created.
  w.Set("bad", UInt(GgufType::kU8, 300));
  TempDir dir;
  const std::string path = dir.File("out.gguf");
  absl::Status s = w.Write(path);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("out of range"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // no output, no temporary left behind

  GgufWriter w2;
  w2.Set("mixed", Arr(GgufType::kI32, {Str("x")}));
  EXPECT_THAT(std::string(w2.Write(path).message()), HasSubstr("array of i32 holds a string"));
  GgufWriter w3;
  EXPECT_THAT(std::string(w3.Write(dir.File("missing_dir/out.gguf")).message()),
              HasSubstr("missing_dir/out.gguf"));
  EXPECT_THAT(std::string(w3.Write(path, 24).message()), HasSubstr("power of two"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(GgufWriter, ReplacesExistingFileAtomically) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  GgufWriter a;
  a.SetU32("v", 1);
  ASSERT_TRUE(a.Write(path).ok());
  GgufWriter b;
  b.SetU32("v", 2);
  ASSERT_TRUE(b.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Find("v")->AsInt(), 2);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

// ---- Bad input: hand-built images --------------------------------------------------------------

Bytes Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.U32(kMagic).U32(version).U64(n_tensors).U64(n_kv);
  return b;
}

// One f32 tensor info: name, dims, type, offset.
void TensorInfo(Bytes& b, std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
  b.Str(name).U32(static_cast<uint32_t>(ne.size()));
  for (int64_t d : ne) b.I64(d);
  b.U32(type).U64(offset);
}

absl::Status ParseBytes(Bytes& b) {
  return GgufFile::Parse(b.data(), b.size(), "bad.gguf").status();
}

// Every error names the file and says what is wrong.
void ExpectError(Bytes& b, std::string_view what) {
  absl::Status s = ParseBytes(b);
  ASSERT_FALSE(s.ok()) << "expected an error about: " << what;
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.gguf"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(what)));
}

TEST(GgufBadInput, WrongMagic) {
  Bytes b;
  b.Raw("GGML").U32(3).U64(0).U64(0);
  ExpectError(b, "bad magic");
  Bytes tiny;
  tiny.Raw("GG");
  ExpectError(tiny, "truncated");
  Bytes empty;
  ExpectError(empty, "truncated");
}

TEST(GgufBadInput, UnsupportedVersions) {
  Bytes v1 = Header(0, 0, 1);
  ExpectError(v1, "unsupported GGUF version 1");
  Bytes v4 = Header(0, 0, 4);
  ExpectError(v4, "unsupported GGUF version 4");
  Bytes big_endian = Header(0, 0, 0x03000000);  // version 3 written big-endian
  ExpectError(big_endian, "big-endian");
  Bytes v2 = Header(0, 0, 2);
  EXPECT_TRUE(ParseBytes(v2).ok());
}

TEST(GgufBadInput, AbsurdCountsAreRejectedWithoutAllocating) {
  Bytes tensors = Header(uint64_t{1} << 60, 0);
  ExpectError(tensors, "tensor count 1152921504606846976 is impossible");
  Bytes kvs = Header(0, uint64_t{1} << 60);
  ExpectError(kvs, "metadata count 1152921504606846976 is impossible");
  Bytes arr = Header(0, 1);
  arr.Str("a").U32(9).U32(4).U64(uint64_t{1} << 60);
  ExpectError(arr, "claims 1152921504606846976 elements");
  Bytes str = Header(0, 1);
  str.Str("a").U32(8).U64(uint64_t{1} << 62);
  ExpectError(str, "truncated");
  Bytes key = Header(0, 1);
  key.U64(70000).Zeros(70000).U32(4).U32(1);
  ExpectError(key, "over the limit");
  // More metadata values than any real file (2^26), each present in the file: refused before parsing,
  // since every byte would cost ~50 bytes of memory.
  Bytes many = Header(0, 1);
  many.Str("many").U32(9).U32(0).U64((uint64_t{1} << 26) + 1).Zeros((size_t{1} << 26) + 1);
  ExpectError(many, "metadata values");
  Bytes string_array = Header(0, 1);  // strings need at least 8 bytes each
  string_array.Str("a").U32(9).U32(8).U64(3).U64(0).U64(0);
  ExpectError(string_array, "claims 3 elements");
}

TEST(GgufBadInput, MetadataErrors) {
  Bytes dup = Header(0, 2);
  dup.Str("k").U32(4).U32(1).Str("k").U32(4).U32(2);
  ExpectError(dup, "duplicate metadata key 'k'");
  Bytes type = Header(0, 1);
  type.Str("k").U32(13).U32(0);
  ExpectError(type, "'k' has unknown value type 13");
  Bytes elem = Header(0, 1);
  elem.Str("k").U32(9).U32(77).U64(0);
  ExpectError(elem, "unknown value type 77");
  Bytes boolean = Header(0, 1);
  boolean.Str("k").U32(7).U8(2);
  ExpectError(boolean, "expected 0 or 1");
  Bytes deep = Header(0, 1);
  deep.Str("k");
  deep.U32(9);
  for (int i = 0; i < 20; ++i) deep.U32(9).U64(1);
  deep.U32(4).U64(0);
  ExpectError(deep, "deeper");
  Bytes align_type = Header(0, 1);
  align_type.Str("general.alignment").U32(10).U64(32);
  ExpectError(align_type, "general.alignment must be u32");
  Bytes align_value = Header(0, 1);
  align_value.Str("general.alignment").U32(4).U32(24);
  ExpectError(align_value, "not a power of two");
  Bytes align_zero = Header(0, 1);
  align_zero.Str("general.alignment").U32(4).U32(0);
  ExpectError(align_zero, "not a power of two");
}

// A valid file with two f32 tensors [8] at offsets 0 and 32; `mutate` edits the infos.
Bytes TwoTensors(uint64_t off_b, std::vector<int64_t> ne_b = {8}, uint32_t type_b = 0,
                 std::string_view name_b = "b", size_t data_bytes = 64) {
  Bytes b = Header(2, 0);
  TensorInfo(b, "a", {8}, 0, 0);
  TensorInfo(b, name_b, ne_b, type_b, off_b);
  b.PadTo(32).Zeros(data_bytes);
  return b;
}

TEST(GgufBadInput, TensorInfoErrors) {
  Bytes ok = TwoTensors(32);
  ASSERT_TRUE(ParseBytes(ok).ok()) << ParseBytes(ok);

  Bytes dup = TwoTensors(32, {8}, 0, "a");
  ExpectError(dup, "duplicate tensor name 'a'");
  Bytes dims = TwoTensors(32, {1, 1, 1, 1, 8});
  ExpectError(dims, "'b' has 5 dimensions");
  Bytes neg = TwoTensors(32, {8, -2});
  ExpectError(neg, "negative dimension ne[1] = -2");
  Bytes overflow = TwoTensors(32, {int64_t{1} << 40, int64_t{1} << 40});
  ExpectError(overflow, "overflows");
  auto expect_error = [](Bytes b, std::string_view what) { ExpectError(b, what); };
  // A real ggml type we do not read is named by its ggml name, beside the types we do read.
  Bytes iq4 = TwoTensors(32, {256}, 23);
  ExpectError(iq4, "tensor 'b': type IQ4_XS (23) is not supported; supported: F32, F16, BF16, Q8_0");
  expect_error(TwoTensors(32, {32}, 40), "type NVFP4 (40) is not supported");
  expect_error(TwoTensors(32, {256}, 35), "type TQ2_0 (35) is not supported");
  Bytes unknown = TwoTensors(32, {8}, 1000);
  ExpectError(unknown, "tensor 'b': type id 1000 (not a ggml type) is not supported");
  Bytes block = TwoTensors(32, {33}, 8);  // q8_0 rows need multiples of 32
  ExpectError(block, "block size 32");
  // The types llama-quantize mixes into K-quant files: partial blocks and truncated data name the tensor.
  expect_error(TwoTensors(32, {48}, 6), "tensor 'b': row of 48 elements is not a multiple of the q5_0 block size 32");
  expect_error(TwoTensors(32, {128}, 11), "tensor 'b': row of 128 elements is not a multiple of the q3_k block size 256");
  // One Q4_1 block (20 bytes) fits the 32 bytes after 'a'; two (40 bytes) run past the end.
  Bytes q41 = TwoTensors(32, {32}, 3);
  ASSERT_TRUE(ParseBytes(q41).ok()) << ParseBytes(q41);
  expect_error(TwoTensors(32, {64}, 3), "'b' (40 bytes at data offset 32) extends past the end");
  expect_error(TwoTensors(32, {256}, 10), "'b' (84 bytes at data offset 32) extends past the end");
  Bytes misaligned = TwoTensors(40);
  ExpectError(misaligned, "'b' offset 40 is not a multiple of the alignment 32");
  Bytes past_eof = TwoTensors(64);
  ExpectError(past_eof, "'b' (32 bytes at data offset 64) extends past the end");
  Bytes huge_offset = TwoTensors(uint64_t{1} << 63);
  ExpectError(huge_offset, "past the end");
  Bytes overlap = TwoTensors(0);
  ExpectError(overlap, "tensors 'a' and 'b' overlap");
  Bytes big = TwoTensors(32, {16});  // 64 bytes from offset 32 in a 64-byte data section
  ExpectError(big, "past the end");
  Bytes empty_name = TwoTensors(32, {8}, 0, "");
  ExpectError(empty_name, "empty name");
  Bytes zero_dims = Header(1, 0);
  TensorInfo(zero_dims, "z", {}, 0, 0);
  ExpectError(zero_dims, "'z' has 0 dimensions");
}

// Every truncation of a valid file (short of its final padding) fails cleanly.
TEST(GgufBadInput, EveryTruncationFails) {
  GgufWriter w;
  w.SetString("general.architecture", "x");
  w.SetStringArray("tokens", {"a", "bb"});
  w.Set("nested", Arr(GgufType::kArray, {Arr(GgufType::kU16, {UInt(GgufType::kU16, 1)})}));
  std::vector<uint8_t> data(64, 7);
  ASSERT_TRUE(w.AddTensor("t", {16}, DType::kF32, data.data(), 64).ok());
  TempDir dir;
  ASSERT_TRUE(w.Write(dir.File("x.gguf")).ok());
  auto f = GgufFile::Open(dir.File("x.gguf"));
  ASSERT_TRUE(f.ok());
  const size_t end_of_data = (*f)->data_offset() + 64;
  std::ifstream in(dir.File("x.gguf"), std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t n = 0; n < end_of_data; ++n) {
    std::vector<uint8_t> prefix(image.begin(), image.begin() + n);  // own buffer: ASan sees overreads
    auto p = GgufFile::Parse(prefix.data(), prefix.size(), "cut.gguf");
    ASSERT_FALSE(p.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("cut.gguf"));
  }
  EXPECT_TRUE(GgufFile::Parse(image.data(), end_of_data, "whole.gguf").ok());
}

TEST(GgufBadInput, OpenErrorsNameThePath) {
  TempDir dir;
  auto missing = GgufFile::Open(dir.File("nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.gguf"));
  testing::WriteFile(dir.File("empty.gguf"), "");
  auto empty = GgufFile::Open(dir.File("empty.gguf"));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("empty.gguf"));
  auto directory = GgufFile::Open(dir.path());
  EXPECT_FALSE(directory.ok());
}

}  // namespace
}  // namespace specgen
