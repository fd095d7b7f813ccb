// gpt-oss's o200k_harmony tokenizer and GLM-4.x's, as tokenizer.json and GGUF carry them.
// tests/data/tokenizers/o200k holds a tokenizer.json whose pre_tokenizer section is gpt-oss's (a Split
// with the o200k regex, then ByteLevel without its own regex), with a small vocabulary: the 256 byte
// symbols (id = byte), the merges below and harmony's special tokens. The splits themselves are
// checked in pre_tokenizer_test.cc; here, that the files select them and that BPE runs inside them.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/gguf.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kDir = std::string(SPECGEN_SOURCE_DIR) + "/tests/data/tokenizers/o200k";

// Merge ranks in the fixture (ids from 256 on, in this order): 0 "o W", 1 "H e", 2 "l l", 3 "He ll",
// 4 "Hell o", 5 "W o", 6 "r l", 7 "Wo rl", 8 "Worl d", 9 "d o", 10 "do n", 11 "' t", 12 "don 't",
// 13 "3 4", 14 "1 2", 15 "12 3", 16 "Ġ w", 17 "Ġw o". Rank 0 and 13 are traps: they fire only if a
// word boundary the regex puts there is missing.
constexpr int32_t kHello = 260, kWorld = 264, kDont = 268, k123 = 271, kSpaceWo = 273, kRl = 262;
constexpr int32_t kReturn = 276, kStart = 279, kEnd = 280, kMessage = 281;

std::unique_ptr<Tokenizer> LoadFixture() {
  auto tok = LoadTokenizerJson(kDir + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<int32_t> Enc(const Tokenizer& t, std::string_view text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(O200kTokenizer, TokenizerJsonSelectsTheO200kPreTokenizer) {
  auto t = LoadFixture();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), TokenizerKind::kBpe);
  EXPECT_EQ(t->spec().pre_tokenizer, PreTokenizerKind::kO200k);
  EXPECT_FALSE(t->spec().ignore_merges);
  EXPECT_FALSE(t->add_bos());  // no post-processor template, and the config does not ask
  EXPECT_EQ(t->eos_id(), kReturn);
}

TEST(O200kTokenizer, MergesStayInsideO200kWords) {
  auto t = LoadFixture();
  ASSERT_NE(t, nullptr);
  // "HelloWorld" is two words (a case change ends one): "o W" (rank 0) would otherwise merge first
  // and leave neither word whole. In each word the ranks build it up: He, ll, Hell, Hello.
  EXPECT_THAT(Enc(*t, "HelloWorld"), ElementsAre(kHello, kWorld));
  // A contraction stays on its word: "don't" is one word, merged d o, do n, ' t, don 't.
  EXPECT_THAT(Enc(*t, "don't"), ElementsAre(kDont));
  // Digits in threes: "123" | "4". As one word "1234", "3 4" (rank 13) would win over "1 2" (14).
  EXPECT_THAT(Enc(*t, "1234"), ElementsAre(k123, '4'));
  // " world": r l (rank 6) first, then Ġ w, Ġw o; 'd' alone.
  EXPECT_THAT(Enc(*t, "Hello world"), ElementsAre(kHello, kSpaceWo, kRl, 'd'));
}

TEST(O200kTokenizer, HarmonySpecialTokensAreParsedWhole) {
  auto t = LoadFixture();
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(Enc(*t, "<|start|>user<|message|>Hi<|end|>"),
              ElementsAre(kStart, 'u', 's', 'e', 'r', kMessage, 'H', 'i', kEnd));
  auto back = t->Decode(Enc(*t, "<|start|>user<|message|>HelloWorld 1234 don't<|end|>"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "<|start|>user<|message|>HelloWorld 1234 don't<|end|>");
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string GgufPre(const std::string& path) {
  auto g = GgufFile::Open(path);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return "";
  const GgufValue* v = (*g)->Find("tokenizer.ggml.pre");
  return v && v->AsString() ? *v->AsString() : "";
}

// A GGUF names the o200k regex "gpt-4o", as llama.cpp does for gpt-oss (llama-vocab.cpp maps it to
// LLAMA_VOCAB_PRE_TYPE_GPT4O, whose regex is this one); written and read back, it encodes the same.
TEST(O200kTokenizer, GgufNamesItGpt4o) {
  auto t = LoadFixture();
  ASSERT_NE(t, nullptr);
  GgufWriter w;
  ASSERT_TRUE(AddTokenizerToGguf(*t, &w).ok());
  const std::string path = ::testing::TempDir() + "/o200k_tok.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_EQ(GgufPre(path), "gpt-4o");
  auto back = LoadTokenizerForModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->spec().pre_tokenizer, PreTokenizerKind::kO200k);
  EXPECT_FALSE((*back)->spec().ignore_merges);
  for (const char* text : {"HelloWorld", "don't", "1234", "<|start|>Hello world<|end|>"}) {
    EXPECT_EQ(Enc(**back, text), Enc(*t, text)) << text;
  }
}

// GLM-4.x's tokenizer.json has Llama-3's regex without ignore_merges; llama.cpp calls that "glm4"
// (or "chatglm-bpe") and sets ignore_merges only for "llama-bpe"/"llama3". Each is written and read
// back with its own ignore_merges.
TEST(O200kTokenizer, Glm4IsLlama3RegexWithoutIgnoreMerges) {
  std::string json = ReadText(kDir + "/tokenizer.json");
  ASSERT_FALSE(json.empty());
  // The fixture with its regex swapped for Llama-3's (as tokenizer.json escapes it).
  const std::string o200k = nlohmann::json(std::string(PreTokenizerRegex(PreTokenizerKind::kO200k))).dump();
  const std::string llama3 = nlohmann::json(std::string(PreTokenizerRegex(PreTokenizerKind::kLlama3))).dump();
  const size_t at = json.find(o200k);
  ASSERT_NE(at, std::string::npos);
  json.replace(at, o200k.size(), llama3);
  for (bool ignore : {false, true}) {
    std::string text = json;
    const std::string flag = "\"ignore_merges\": false";
    const size_t f = text.find(flag);
    ASSERT_NE(f, std::string::npos);
    if (ignore) text.replace(f, flag.size(), "\"ignore_merges\": true");
    auto spec = ParseTokenizerJson(text, "", "glm-like");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->pre_tokenizer, PreTokenizerKind::kLlama3);
    EXPECT_EQ(spec->ignore_merges, ignore);
    auto tok = Tokenizer::Create(*std::move(spec));
    ASSERT_TRUE(tok.ok()) << tok.status();
    GgufWriter w;
    ASSERT_TRUE(AddTokenizerToGguf(**tok, &w).ok());
    const std::string path = ::testing::TempDir() + (ignore ? "/llama3_tok.gguf" : "/glm4_tok.gguf");
    ASSERT_TRUE(w.Write(path).ok());
    EXPECT_EQ(GgufPre(path), ignore ? "llama-bpe" : "glm4");
    auto back = LoadTokenizerForModel(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ((*back)->spec().pre_tokenizer, PreTokenizerKind::kLlama3);
    EXPECT_EQ((*back)->spec().ignore_merges, ignore);
  }
}

// "chatglm-bpe" reads as "glm4"; an unknown name is refused with the names that are read.
TEST(O200kTokenizer, GgufPreNamesReadAsLlamaCppMapsThem) {
  auto t = LoadFixture();
  ASSERT_NE(t, nullptr);
  for (const char* pre : {"chatglm-bpe", "tekken"}) {
    GgufWriter w;
    ASSERT_TRUE(AddTokenizerToGguf(*t, &w).ok());
    w.SetString("tokenizer.ggml.pre", pre);  // replaces the "gpt-4o" written above
    const std::string path = ::testing::TempDir() + "/pre_" + pre + ".gguf";
    ASSERT_TRUE(w.Write(path).ok());
    auto back = LoadTokenizerForModel(path);
    if (std::string(pre) == "tekken") {
      ASSERT_FALSE(back.ok());
      EXPECT_THAT(std::string(back.status().message()), HasSubstr("tokenizer.ggml.pre 'tekken' is not supported"));
      EXPECT_THAT(std::string(back.status().message()), HasSubstr("gpt-4o"));
      continue;
    }
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ((*back)->spec().pre_tokenizer, PreTokenizerKind::kLlama3);
    EXPECT_FALSE((*back)->spec().ignore_merges);
  }
}

}  // namespace
}  // namespace specgen
