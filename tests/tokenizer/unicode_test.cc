// UTF-8 validation, Unicode classes, NFC and the GPT-2 byte map. NFC expectations come from Python's
// unicodedata.normalize("NFC", ...) (Unicode 14.0, the version of our generated tables).
#include "engine/tokenizer/unicode.h"

#include <string>

#include "engine/tokenizer/byte_level.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

TEST(Utf8Test, RejectsInvalidSequencesNamingTheOffset) {
  struct Bad {
    std::string text;
    size_t offset;
  };
  const Bad cases[] = {
      {"ab\xFF", 2},                 // never valid
      {"x\xC0\xAF", 1},              // overlong '/'
      {"\xED\xA0\x80", 0},           // surrogate U+D800
      {"ok \xE4\xB8", 3},            // truncated 3-byte sequence
      {"\xF4\x90\x80\x80", 0},       // above U+10FFFF
      {"a\x80", 1},                  // lone continuation byte
  };
  for (const Bad& c : cases) {
    const absl::Status s = unicode::ValidateUtf8(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("byte offset " + std::to_string(c.offset))) << s;
    EXPECT_FALSE(unicode::DecodeUtf8(c.text).ok());
  }
  EXPECT_TRUE(unicode::ValidateUtf8("héllo 中 😀").ok());
}

TEST(Utf8Test, EncodeDecodeRoundTrip) {
  for (uint32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u, 0x10FFFFu}) {
    auto d = unicode::DecodeUtf8(unicode::EncodeUtf8(cp));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, std::vector<uint32_t>{cp});
  }
  EXPECT_EQ(unicode::CompleteUtf8Prefix("ab\xE4\xB8"), 2u);
}

TEST(UnicodeClassesTest, LettersNumbersWhitespace) {
  EXPECT_TRUE(unicode::IsLetter('a'));
  EXPECT_TRUE(unicode::IsLetter(0x4E2D));   // 中
  EXPECT_TRUE(unicode::IsLetter(0x00DF));   // ß
  EXPECT_FALSE(unicode::IsLetter(0x0301));  // combining acute: a mark, not a letter
  EXPECT_TRUE(unicode::IsNumber('7'));
  EXPECT_TRUE(unicode::IsNumber(0x0663));   // Arabic-Indic three
  EXPECT_TRUE(unicode::IsNumber(0x216B));   // Roman numeral twelve (Nl)
  EXPECT_TRUE(unicode::IsNumber(0x00BD));   // ½ (No)
  EXPECT_TRUE(unicode::IsWhitespace(' '));
  EXPECT_TRUE(unicode::IsWhitespace(0x0B));
  EXPECT_TRUE(unicode::IsWhitespace(0x85));
  EXPECT_TRUE(unicode::IsWhitespace(0xA0));
  EXPECT_TRUE(unicode::IsWhitespace(0x3000));
  EXPECT_TRUE(unicode::IsWhitespace(0x2028));
  EXPECT_FALSE(unicode::IsWhitespace(0x1C));    // Python isspace() says yes; Oniguruma's \s says no
  EXPECT_FALSE(unicode::IsWhitespace(0x200B));  // zero width space is a format character
  EXPECT_FALSE(unicode::IsLetter(0x10FFFF));
  EXPECT_STREQ(unicode::Version(), "14.0.0");
}

TEST(NfcTest, ComposesReordersAndRespectsExclusions) {
  EXPECT_EQ(unicode::NormalizeNfc("e\xCC\x81"), "\xC3\xA9");                    // e + acute -> é
  EXPECT_EQ(unicode::NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(unicode::NormalizeNfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958 is excluded
  EXPECT_EQ(unicode::NormalizeNfc("\xE2\x84\xAB"), "\xC3\x85");                  // Angstrom sign -> Å
  EXPECT_EQ(unicode::NormalizeNfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");         // reorder then compose
  EXPECT_EQ(unicode::NormalizeNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");    // reorder only
  EXPECT_EQ(unicode::NormalizeNfc("plain ascii"), "plain ascii");
}

TEST(ByteLevelTest, Gpt2ByteMap) {
  EXPECT_EQ(byte_level::ByteToCodepoint(' '), 0x120u);
  EXPECT_EQ(byte_level::ByteToCodepoint('\n'), 0x10Au);
  EXPECT_EQ(byte_level::ByteToCodepoint(0x00), 0x100u);
  EXPECT_EQ(byte_level::ByteToCodepoint(0x7F), 0x121u);
  EXPECT_EQ(byte_level::ByteToCodepoint(0xAD), 0x143u);
  EXPECT_EQ(byte_level::ByteToCodepoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_level::ByteToCodepoint(0xE9), 0xE9u);
  std::string all;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
    EXPECT_EQ(byte_level::CodepointToByte(byte_level::ByteToCodepoint(b)), b);
  }
  std::string back;
  EXPECT_TRUE(byte_level::Decode(byte_level::Encode(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(byte_level::CodepointToByte(' '), -1);  // a raw space is not a mapped byte
}

}  // namespace
}  // namespace specgen
