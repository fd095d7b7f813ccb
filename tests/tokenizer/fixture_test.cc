// The tokenizers against Hugging Face `tokenizers` itself: tests/data/tokenizers/{bpe,spm} hold a
// tokenizer.json, its tokenizer_config.json and encodings.json ([{"text", "ids"}] as HF encoded them,
// specials parsed, BOS added for spm), made by tools/make_fixtures.py. A missing file fails the test.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/gguf.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

struct Encoding {
  std::string text;
  std::vector<int32_t> ids;
};

std::string FixtureDir(const std::string& kind) { return std::string(SPECGEN_SOURCE_DIR) + "/tests/data/tokenizers/" + kind; }

std::vector<Encoding> ReadEncodings(const std::string& kind) {
  const std::string path = FixtureDir(kind) + "/encodings.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not JSON";
  std::vector<Encoding> out;
  if (j.is_discarded() || !j.is_array()) return out;
  for (const auto& e : j) out.push_back({e.at("text").get<std::string>(), e.at("ids").get<std::vector<int32_t>>()});
  EXPECT_GT(out.size(), 10u) << path;
  return out;
}

// What decoding the encoding gives back. Byte-level BPE: the text itself. SentencePiece with the
// legacy Prepend normalizer: every text segment after a special token got its own '▁', which the
// decoder keeps as a space (HF decodes "a <s> b" to "a <s>  b" too); the text otherwise.
std::string ExpectedDecode(const Tokenizer& t, const std::string& text) {
  if (t.kind() != TokenizerKind::kSpm) return text;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t matched = 0;
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      const std::string& tt = t.TokenText(id);
      if (t.Type(id) == TokenType::kControl && !tt.empty() && text.compare(i, tt.size(), tt) == 0) matched = tt.size();
    }
    if (matched == 0) {
      out += text[i++];
      continue;
    }
    out += text.substr(i, matched);
    i += matched;
    if (i < text.size()) out += ' ';  // a text segment follows, with its own ▁
  }
  return out;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EncodesLikeHuggingFaceAndRoundTrips) {
  auto tok = LoadTokenizerJson(FixtureDir(GetParam()) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  EXPECT_STREQ(t.kind_name(), GetParam().c_str());
  const auto encodings = ReadEncodings(GetParam());
  ASSERT_FALSE(encodings.empty());
  for (const Encoding& e : encodings) {
    auto ids = t.Encode(e.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, e.ids) << "text: \"" << e.text << "\"";

    // decode(encode(text)) == text. The BOS that encoding added is not part of the text.
    std::vector<int32_t> body = e.ids;
    if (t.add_bos() && !body.empty() && body.front() == t.bos_id()) body.erase(body.begin());
    auto text = t.Decode(body, {.render_special = true});
    ASSERT_TRUE(text.ok()) << text.status();
    const std::string expected = ExpectedDecode(t, e.text);
    EXPECT_EQ(*text, expected);

    // Streaming gives the same text, one valid piece at a time.
    StreamingDetokenizer d(t, /*render_special=*/true);
    std::string streamed;
    for (int32_t id : body) {
      auto piece = d.Add(id);
      ASSERT_TRUE(piece.ok()) << "id " << id << ": " << piece.status();
      streamed += *piece;
    }
    streamed += d.Finish();
    EXPECT_EQ(streamed, expected);
  }
}

TEST_P(FixtureTest, GgufCopyEncodesTheSame) {
  auto tok = LoadTokenizerJson(FixtureDir(GetParam()) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  GgufWriter w;
  ASSERT_TRUE(AddTokenizerToGguf(**tok, &w).ok());
  const std::string path = ::testing::TempDir() + "/fixture_" + GetParam() + ".gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto back = LoadTokenizerForModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  for (const Encoding& e : ReadEncodings(GetParam())) {
    auto ids = (*back)->Encode(e.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, e.ids) << "text: \"" << e.text << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FixtureTest, ::testing::Values("bpe", "spm"));

}  // namespace
}  // namespace specgen
