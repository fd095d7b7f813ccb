// Corrupt tokenizer files and hostile text never crash: every truncation and many byte flips of a
// real tokenizer.json either load (and then encode/decode safely) or give an error. Runs under the
// sanitizers in the SPECGEN_SANITIZE build; fuzz_tokenizer_json.cc explores further with libFuzzer.
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/tokenizer/tokenizer_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::string ReadFixture(const std::string& rel) {
  std::ifstream in(std::string(SPECGEN_SOURCE_DIR) + "/" + rel, std::ios::binary);
  EXPECT_TRUE(in.good()) << rel;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads what it can and exercises the result; the test is that this returns at all.
void Exercise(const std::string& json, const std::string& config) {
  auto spec = ParseTokenizerJson(json, config, "mutated.json");
  if (!spec.ok()) {
    EXPECT_FALSE(spec.status().message().empty());
    return;
  }
  auto tok = Tokenizer::Create(*std::move(spec));
  if (!tok.ok()) return;
  auto ids = (*tok)->Encode("Hello <|im_end|> wörld 中文 😀\n\n  x<s>");
  if (ids.ok()) {
    auto text = (*tok)->Decode(*ids);
    EXPECT_TRUE(text.ok());
  }
}

class HostileInputTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HostileInputTest, TruncatedAndFlippedFilesNeverCrash) {
  const std::string dir = "tests/data/tokenizers/" + GetParam();
  const std::string json = ReadFixture(dir + "/tokenizer.json");
  const std::string config = ReadFixture(dir + "/tokenizer_config.json");
  ASSERT_FALSE(json.empty());
  for (size_t cut = 0; cut < json.size(); cut += json.size() / 97 + 1) Exercise(json.substr(0, cut), config);
  for (size_t cut = 0; cut < config.size(); cut += config.size() / 31 + 1) Exercise(json, config.substr(0, cut));
  std::mt19937 rng(7);
  for (int i = 0; i < 150; ++i) {
    std::string m = json;
    for (int k = 0; k < 3; ++k) m[rng() % m.size()] = static_cast<char>(rng() % 256);
    Exercise(m, config);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HostileInputTest, ::testing::Values("bpe", "spm"));

TEST(HostileInputTest, HugeSparseIdIsRejected) {
  auto spec = ParseTokenizerJson(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 900000000}, "merges": []},
                                    "decoder": {"type": "ByteLevel"},
                                    "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}})", "", "sparse.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), ::testing::HasSubstr("vocabulary is corrupt"));
}

TEST(HostileInputTest, LongUnbrokenTextEncodes) {
  // One 200 KB "word" (no spaces) must not take quadratic time.
  auto tok = LoadTokenizerJson(std::string(SPECGEN_SOURCE_DIR) + "/tests/data/tokenizers/bpe/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text(200000, 'a');
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*(*tok)->Decode(*ids), text);
}

}  // namespace
}  // namespace specgen
