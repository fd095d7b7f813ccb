// Replays every input kept under tests/data/fuzz/<target>/ (fuzzer seeds and any crash the fuzz
// targets in tests/io and tests/tokenizer found) through the parsers: each must give a result or an
// error, never a crash; run under the asan preset this also checks for out-of-bounds reads.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/io/gguf.h"
#include "engine/io/hf_config.h"
#include "engine/io/safetensors.h"
#include "engine/tokenizer/tokenizer_loader.h"
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

TEST(FuzzRegression, HfConfigInputs) {
  const auto files = Inputs("fuzz_hf_config");
  EXPECT_FALSE(files.empty()) << "seed inputs missing from tests/data/fuzz/fuzz_hf_config";
  for (const auto& f : files) {
    const std::vector<uint8_t> bytes = Read(f);
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    auto spec = ModelSpecFromHfConfigText(text, f.filename().string());
    if (f.filename().string().rfind("seed-", 0) == 0) {
      EXPECT_TRUE(spec.ok()) << f << ": " << spec.status();
    }
    if (spec.ok()) {
      EXPECT_TRUE(Validate(*spec, f.string()).ok()) << f;  // accepted specs are sound
    }
  }
}

// Inputs as fuzz_tokenizer_json reads them: the first half is tokenizer.json, the second text.
TEST(FuzzRegression, TokenizerJsonInputs) {
  const auto files = Inputs("fuzz_tokenizer_json");
  EXPECT_FALSE(files.empty()) << "seed inputs missing from tests/data/fuzz/fuzz_tokenizer_json";
  for (const auto& f : files) {
    const std::vector<uint8_t> bytes = Read(f);
    const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const std::string_view json = all.substr(0, all.size() / 2), text = all.substr(all.size() / 2);
    auto spec = ParseTokenizerJson(json, "", f.filename().string());
    const bool seed = f.filename().string().rfind("seed-", 0) == 0;
    if (seed) {
      EXPECT_TRUE(spec.ok()) << f << ": " << spec.status();
    }
    if (!spec.ok()) continue;
    auto tok = Tokenizer::Create(*std::move(spec));
    if (seed) {
      EXPECT_TRUE(tok.ok()) << f << ": " << tok.status();
    }
    if (!tok.ok()) continue;
    auto ids = (*tok)->Encode(text);
    if (ids.ok()) (void)(*tok)->Decode(*ids);
  }
}

}  // namespace
}  // namespace specgen
