// Pre-tokenizer scanners against the regexes they replace. The expected splits were produced by
// running each regex through Python's `regex` module (backtracking, leftmost alternative first, as
// Oniguruma in HF tokenizers) over these strings; each rule of the pattern has cases below, named in
// the hand-written tests that follow.
#include "engine/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

struct SplitCase {
  PreTokenizerKind kind;
  std::string text;
  std::vector<std::string> pieces;
};

const SplitCase kCases[] = {
    {PreTokenizerKind::kQwen2, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kQwen2, "I'M here, you're THERE'LL 'sup", {"I", "'M", " here", ",", " you", "'re", " THERE", "'LL", " '", "sup"}},
    {PreTokenizerKind::kQwen2, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kQwen2, "x'\xC5""\xBF""", {"x", "'\xC5""\xBF"""}},
    {PreTokenizerKind::kQwen2, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kQwen2, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kQwen2, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kQwen2, "a\x0A""\x0A""b", {"a", "\x0A""\x0A""", "b"}},
    {PreTokenizerKind::kQwen2, "a  \x0A""  b", {"a", "  \x0A""", " ", " b"}},
    {PreTokenizerKind::kQwen2, "  \x0A""  foo", {"  \x0A""", " ", " foo"}},
    {PreTokenizerKind::kQwen2, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kQwen2, "\x09""\x09""foo", {"\x09""", "\x09""foo"}},
    {PreTokenizerKind::kQwen2, "\x09""foo", {"\x09""foo"}},
    {PreTokenizerKind::kQwen2, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""bar"}},
    {PreTokenizerKind::kQwen2, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""y"}},
    {PreTokenizerKind::kQwen2, "12345", {"1", "2", "3", "4", "5"}},
    {PreTokenizerKind::kQwen2, "abc123def", {"abc", "1", "2", "3", "def"}},
    {PreTokenizerKind::kQwen2, "3.14", {"3", ".", "1", "4"}},
    {PreTokenizerKind::kQwen2, "x=-42;", {"x", "=-", "4", "2", ";"}},
    {PreTokenizerKind::kQwen2, " !!!\x0A""\x0A""x", {" !!!\x0A""\x0A""", "x"}},
    {PreTokenizerKind::kQwen2, "...\x0D""\x0A""", {"...\x0D""\x0A"""}},
    {PreTokenizerKind::kQwen2, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kQwen2, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""t", "\xCC""\x81"""}},
    {PreTokenizerKind::kQwen2, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kQwen2, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kQwen2, "\xC2""\xA0""x", {"\xC2""\xA0""x"}},
    {PreTokenizerKind::kQwen2, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""b"}},
    {PreTokenizerKind::kQwen2, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kQwen2, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""", "\xD9""\xA4"""}},
    {PreTokenizerKind::kQwen2, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kQwen2, "don't", {"don", "'t"}},
    {PreTokenizerKind::kQwen2, "  ", {"  "}},
    {PreTokenizerKind::kQwen2, " ", {" "}},
    {PreTokenizerKind::kQwen2, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kQwen2, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kQwen2, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kQwen2, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""bar"}},
    {PreTokenizerKind::kQwen2, "\x1C""x", {"\x1C""x"}},
    {PreTokenizerKind::kQwen2, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""y"}},
    {PreTokenizerKind::kQwen2, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kQwen2, " 123", {" ", "1", "2", "3"}},
    {PreTokenizerKind::kQwen2, "_under_score_", {"_under", "_score", "_"}},
    {PreTokenizerKind::kLlama3, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kLlama3, "I'M here, you're THERE'LL 'sup", {"I", "'M", " here", ",", " you", "'re", " THERE", "'LL", " '", "sup"}},
    {PreTokenizerKind::kLlama3, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kLlama3, "x'\xC5""\xBF""", {"x", "'\xC5""\xBF"""}},
    {PreTokenizerKind::kLlama3, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kLlama3, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kLlama3, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kLlama3, "a\x0A""\x0A""b", {"a", "\x0A""\x0A""", "b"}},
    {PreTokenizerKind::kLlama3, "a  \x0A""  b", {"a", "  \x0A""", " ", " b"}},
    {PreTokenizerKind::kLlama3, "  \x0A""  foo", {"  \x0A""", " ", " foo"}},
    {PreTokenizerKind::kLlama3, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kLlama3, "\x09""\x09""foo", {"\x09""", "\x09""foo"}},
    {PreTokenizerKind::kLlama3, "\x09""foo", {"\x09""foo"}},
    {PreTokenizerKind::kLlama3, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""bar"}},
    {PreTokenizerKind::kLlama3, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""y"}},
    {PreTokenizerKind::kLlama3, "12345", {"123", "45"}},
    {PreTokenizerKind::kLlama3, "abc123def", {"abc", "123", "def"}},
    {PreTokenizerKind::kLlama3, "3.14", {"3", ".", "14"}},
    {PreTokenizerKind::kLlama3, "x=-42;", {"x", "=-", "42", ";"}},
    {PreTokenizerKind::kLlama3, " !!!\x0A""\x0A""x", {" !!!\x0A""\x0A""", "x"}},
    {PreTokenizerKind::kLlama3, "...\x0D""\x0A""", {"...\x0D""\x0A"""}},
    {PreTokenizerKind::kLlama3, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kLlama3, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""t", "\xCC""\x81"""}},
    {PreTokenizerKind::kLlama3, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kLlama3, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kLlama3, "\xC2""\xA0""x", {"\xC2""\xA0""x"}},
    {PreTokenizerKind::kLlama3, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""b"}},
    {PreTokenizerKind::kLlama3, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kLlama3, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""\xD9""\xA4"""}},
    {PreTokenizerKind::kLlama3, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kLlama3, "don't", {"don", "'t"}},
    {PreTokenizerKind::kLlama3, "  ", {"  "}},
    {PreTokenizerKind::kLlama3, " ", {" "}},
    {PreTokenizerKind::kLlama3, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kLlama3, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kLlama3, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kLlama3, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""bar"}},
    {PreTokenizerKind::kLlama3, "\x1C""x", {"\x1C""x"}},
    {PreTokenizerKind::kLlama3, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""y"}},
    {PreTokenizerKind::kLlama3, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kLlama3, " 123", {" ", "123"}},
    {PreTokenizerKind::kLlama3, "_under_score_", {"_under", "_score", "_"}},
    {PreTokenizerKind::kGpt2, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kGpt2, "I'M here, you're THERE'LL 'sup", {"I", "'", "M", " here", ",", " you", "'re", " THERE", "'", "LL", " '", "sup"}},
    {PreTokenizerKind::kGpt2, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kGpt2, "x'\xC5""\xBF""", {"x", "'", "\xC5""\xBF"""}},
    {PreTokenizerKind::kGpt2, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kGpt2, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kGpt2, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kGpt2, "a\x0A""\x0A""b", {"a", "\x0A""", "\x0A""", "b"}},
    {PreTokenizerKind::kGpt2, "a  \x0A""  b", {"a", "  \x0A"" ", " b"}},
    {PreTokenizerKind::kGpt2, "  \x0A""  foo", {"  \x0A"" ", " foo"}},
    {PreTokenizerKind::kGpt2, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""", "\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kGpt2, "\x09""\x09""foo", {"\x09""", "\x09""", "foo"}},
    {PreTokenizerKind::kGpt2, "\x09""foo", {"\x09""", "foo"}},
    {PreTokenizerKind::kGpt2, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""", "bar"}},
    {PreTokenizerKind::kGpt2, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""", "y"}},
    {PreTokenizerKind::kGpt2, "12345", {"12345"}},
    {PreTokenizerKind::kGpt2, "abc123def", {"abc", "123", "def"}},
    {PreTokenizerKind::kGpt2, "3.14", {"3", ".", "14"}},
    {PreTokenizerKind::kGpt2, "x=-42;", {"x", "=-", "42", ";"}},
    {PreTokenizerKind::kGpt2, " !!!\x0A""\x0A""x", {" !!!", "\x0A""", "\x0A""", "x"}},
    {PreTokenizerKind::kGpt2, "...\x0D""\x0A""", {"...", "\x0D""\x0A"""}},
    {PreTokenizerKind::kGpt2, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kGpt2, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""", "t", "\xCC""\x81"""}},
    {PreTokenizerKind::kGpt2, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kGpt2, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kGpt2, "\xC2""\xA0""x", {"\xC2""\xA0""", "x"}},
    {PreTokenizerKind::kGpt2, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""", "b"}},
    {PreTokenizerKind::kGpt2, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kGpt2, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""\xD9""\xA4"""}},
    {PreTokenizerKind::kGpt2, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kGpt2, "don't", {"don", "'t"}},
    {PreTokenizerKind::kGpt2, "  ", {"  "}},
    {PreTokenizerKind::kGpt2, " ", {" "}},
    {PreTokenizerKind::kGpt2, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kGpt2, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kGpt2, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kGpt2, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""", "bar"}},
    {PreTokenizerKind::kGpt2, "\x1C""x", {"\x1C""", "x"}},
    {PreTokenizerKind::kGpt2, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""", "y"}},
    {PreTokenizerKind::kGpt2, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kGpt2, " 123", {" 123"}},
    {PreTokenizerKind::kGpt2, "_under_score_", {"_", "under", "_", "score", "_"}},
};

std::vector<std::string> Split(PreTokenizerKind kind, const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view w : PreTokenize(kind, text)) out.emplace_back(w);
  return out;
}

TEST(PreTokenizerTest, MatchesRegexOnTable) {
  for (const SplitCase& c : kCases) {
    EXPECT_EQ(Split(c.kind, c.text), c.pieces) << "kind " << static_cast<int>(c.kind) << " text \"" << c.text << "\"";
  }
}

// 400 random strings over letters, digits, every kind of space, newlines, quotes, marks, CJK and
// emoji, split by Python's `regex` (gen_pretokenizer_cases.py).
TEST(PreTokenizerTest, MatchesRegexOnRandomStrings) {
  const std::string path = std::string(SPECGEN_SOURCE_DIR) + "/tests/tokenizer/pretokenizer_cases.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array()) << path;
  ASSERT_EQ(cases.size(), 400u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(Split(PreTokenizerKind::kQwen2, text), c.at("qwen2").get<std::vector<std::string>>()) << text;
    EXPECT_EQ(Split(PreTokenizerKind::kLlama3, text), c.at("llama3").get<std::vector<std::string>>()) << text;
    EXPECT_EQ(Split(PreTokenizerKind::kGpt2, text), c.at("gpt2").get<std::vector<std::string>>()) << text;
  }
}

using ::testing::ElementsAre;

TEST(PreTokenizerTest, ContractionsAreCaseInsensitiveForQwen2Only) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "IT'S"), ElementsAre("IT", "'S"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "IT'S"), ElementsAre("IT", "'", "S"));
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "we'LL"), ElementsAre("we", "'LL"));
}

TEST(PreTokenizerTest, OptionalNonLetterPrefixJoinsTheWord) {
  // [^\r\n\p{L}\p{N}]?\p{L}+ : punctuation or a space (not a newline) sticks to the letters after it.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "(foo .bar\nbaz"), ElementsAre("(foo", " .", "bar", "\n", "baz"));
}

TEST(PreTokenizerTest, DigitsAreSingleForQwen2AndTriplesForLlama3) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "2024"), ElementsAre("2", "0", "2", "4"));
  EXPECT_THAT(Split(PreTokenizerKind::kLlama3, "2024"), ElementsAre("202", "4"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "a 2024"), ElementsAre("a", " 2024"));
}

TEST(PreTokenizerTest, PunctuationRunTakesTrailingNewlines) {
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a {\n\n  b"), ElementsAre("a", " {\n\n", " ", " b"));
}

TEST(PreTokenizerTest, WhitespaceEndsAtLastNewline) {
  // \s*[\r\n]+ takes spaces up to and including the last newline of the run.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a \n \n  b"), ElementsAre("a", " \n \n", " ", " b"));
}

TEST(PreTokenizerTest, SpaceRunLeavesLastSpaceForNextWord) {
  // \s+(?!\S): a run before a word gives up its last space; at the end of text it keeps all.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a    b  "), ElementsAre("a", "   ", " b", "  "));
  // A single space before a digit cannot be left behind: \s+ takes it alone.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a 1"), ElementsAre("a", " ", "1"));
}

TEST(PreTokenizerTest, EmptyTextGivesNoPieces) { EXPECT_TRUE(PreTokenize(PreTokenizerKind::kQwen2, "").empty()); }

}  // namespace
}  // namespace specgen
