// Replays every input kept under tests/data/fuzz/<target>/ (fuzzer seeds and any crash the fuzz
// targets in tests/io found) through the parsers: each must give a result or an error, never a
// crash; run under the asan preset this also checks for out-of-bounds reads.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/io/gguf.h"
#include "engine/io/safetensors.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::vector<std::filesystem::path> Inputs(const std::string& target) {
  const std::filesystem::path dir = std::filesystem::path(SPECGEN_SOURCE_DIR) / "tests/data/fuzz" / target;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  return files;
}

std::vector<uint8_t> Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(FuzzRegression, GgufInputs) {
  const auto files = Inputs("fuzz_gguf");
  EXPECT_FALSE(files.empty()) << "seed inputs missing from tests/data/fuzz/fuzz_gguf";
  for (const auto& f : files) {
    const std::vector<uint8_t> bytes = Read(f);
    auto g = GgufFile::Parse(bytes.data(), bytes.size(), f.filename().string());
    if (f.filename().string().rfind("seed-", 0) == 0) {  // seeds are valid files
      EXPECT_TRUE(g.ok()) << f << ": " << g.status();
    }
    if (!g.ok()) continue;
    for (const GgufTensorInfo& t : (*g)->tensors()) {  // accepted tensors lie inside the image
      ASSERT_LE((*g)->TensorData(t) + t.bytes, bytes.data() + bytes.size()) << f;
    }
  }
}

TEST(FuzzRegression, SafetensorsInputs) {
  const auto files = Inputs("fuzz_safetensors");
  EXPECT_FALSE(files.empty()) << "seed inputs missing from tests/data/fuzz/fuzz_safetensors";
  for (const auto& f : files) {
    const std::vector<uint8_t> bytes = Read(f);
    auto s = SafetensorsSet::Parse(bytes.data(), bytes.size(), f.filename().string());
    if (f.filename().string().rfind("seed-", 0) == 0) {
      EXPECT_TRUE(s.ok()) << f << ": " << s.status();
    }
    if (!s.ok()) continue;
    for (const auto& [name, t] : (*s)->tensors()) {
      ASSERT_LE(t.data + t.bytes, bytes.data() + bytes.size()) << f;
    }
  }
}

}  // namespace
}  // namespace specgen
