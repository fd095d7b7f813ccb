// A quantized model file damaged the three ways a block-quantized tensor can be (its data cut short,
// an unknown type id, a row that is not a whole number of blocks) fails to load with an error naming
// the file and the tensor, through the same LoadModel every command uses.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/io/model_test_util.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Offset of the u32 ggml type in the tensor-info record of `name` (a string, n_dims, ne[], type:
// docs/formats.md §1.1).
size_t TypeOffset(const std::vector<char>& file, const std::string& name, uint32_t n_dims) {
  std::string record(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(record.data(), &len, 8);
  record += name;
  const auto it = std::search(file.begin(), file.end(), record.begin(), record.end());
  EXPECT_NE(it, file.end()) << name;
  return static_cast<size_t>(it - file.begin()) + record.size() + 4 + 8 * n_dims;
}

class QuantizedFileBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelSpec spec = SynthSpec("tiny-dense").value();
    auto weights = SynthWeights(spec, DType::kQ8_0, 3, 1);
    ASSERT_TRUE(weights.ok()) << weights.status();
    GgufExportOptions options;
    options.dtype = DType::kQ8_0;
    good_ = dir_.Path("good.gguf");
    ASSERT_TRUE(ExportGguf(spec, (*weights)->weights, good_, options).ok());
    ASSERT_TRUE(LoadModel(good_).ok());
    bytes_ = ReadAll(good_);
  }
  void ExpectLoadError(const std::vector<char>& bytes, const std::string& tensor, const std::string& what) {
    const std::string path = dir_.Path("bad.gguf");
    WriteAll(path, bytes);
    auto m = LoadModel(path);
    ASSERT_FALSE(m.ok()) << what;
    const std::string msg(m.status().message());
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr("'" + tensor + "'"));
    EXPECT_THAT(msg, HasSubstr(what));
  }

  TempDir dir_;
  std::string good_;
  std::vector<char> bytes_;
};

TEST_F(QuantizedFileBadInput, TruncatedBlockNamesTheTensor) {
  auto file = GgufFile::Open(good_);
  ASSERT_TRUE(file.ok());
  const GgufTensorInfo* last = nullptr;
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    if (last == nullptr || t.offset > last->offset) last = &t;
  }
  ASSERT_NE(last, nullptr);
  ASSERT_EQ(last->dtype, DType::kQ8_0) << last->name;
  // Cut the file inside the last block of the last tensor.
  const size_t end = (*file)->data_offset() + last->offset + last->bytes;
  std::vector<char> cut(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(end - 5));
  ExpectLoadError(cut, last->name, "extends past the end of the file");
}

TEST_F(QuantizedFileBadInput, UnknownTypeIdNamesTheTensor) {
  std::vector<char> bad = bytes_;
  const uint32_t id = 1000;
  std::memcpy(&bad[TypeOffset(bad, "blk.1.attn_v.weight", 2)], &id, 4);
  ExpectLoadError(bad, "blk.1.attn_v.weight", "type id 1000 (not a ggml type) is not supported");
  const uint32_t iq2 = 16;  // a real ggml type specgen does not read: named by its name
  std::memcpy(&bad[TypeOffset(bad, "blk.1.attn_v.weight", 2)], &iq2, 4);
  ExpectLoadError(bad, "blk.1.attn_v.weight", "type IQ2_XXS (16) is not supported");
}

TEST_F(QuantizedFileBadInput, PartialBlockRowNamesTheTensor) {
  std::vector<char> bad = bytes_;
  const uint32_t q4_k = 12;  // rows of 64 elements: a quarter of a Q4_K block
  std::memcpy(&bad[TypeOffset(bad, "blk.0.attn_q.weight", 2)], &q4_k, 4);
  ExpectLoadError(bad, "blk.0.attn_q.weight", "row of 64 elements is not a multiple of the q4_k block size 256");
}

}  // namespace
}  // namespace specgen
