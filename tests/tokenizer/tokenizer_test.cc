// Byte-level BPE and SentencePiece-style BPE on small hand-built tokenizers: merge order, special
// tokens, byte fallback, round trips, bad input, GGUF round trip, streaming, chat, compatibility.
#include "engine/tokenizer/tokenizer.h"

#include <string>
#include <vector>

#include "engine/core/str_cat.h"
#include "engine/io/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/compatibility.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "engine/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tokenizer/test_tokenizers.h"

namespace specgen {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_tokenizers::MakeBpe;
using testing_tokenizers::MakeSpm;
using testing_tokenizers::Merges;

std::vector<int32_t> Enc(const Tokenizer& t, std::string_view text, EncodeOptions o = {}) {
  auto ids = t.Encode(text, o);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}
std::string Dec(const Tokenizer& t, const std::vector<int32_t>& ids, DecodeOptions o = {}) {
  auto s = t.Decode(ids, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}
int32_t Id(const Tokenizer& t, std::string_view mapped) {
  const int32_t id = t.TokenId(mapped);
  EXPECT_GE(id, 0) << mapped;
  return id;
}

const Merges kHelloMerges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"},
                             {"o", "r"}, {" w", "or"}, {"o", " "}};

TEST(BpeTest, LowestRankMergesFirst) {
  auto bc_first = MakeBpe({{"b", "c"}, {"a", "b"}});
  ASSERT_NE(bc_first, nullptr);
  EXPECT_THAT(Enc(*bc_first, "abc"), ElementsAre('a', Id(*bc_first, "bc")));
  auto ab_first = MakeBpe({{"a", "b"}, {"b", "c"}});
  ASSERT_NE(ab_first, nullptr);
  EXPECT_THAT(Enc(*ab_first, "abc"), ElementsAre(Id(*ab_first, "ab"), 'c'));
  // Equal pairs merge leftmost first: "aaa" -> "aa" "a".
  auto aa = MakeBpe({{"a", "a"}});
  EXPECT_THAT(Enc(*aa, "aaa"), ElementsAre(Id(*aa, "aa"), 'a'));
}

TEST(BpeTest, MergesStayInsidePreTokenizerWords) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  // "o " is a merge, but "hello" and " world" are separate words, so it never applies.
  EXPECT_THAT(Enc(*t, "hello world"),
              ElementsAre(Id(*t, "hello"), Id(*t, "\xC4\xA0wor"), 'l', 'd'));
  EXPECT_THAT(Enc(*t, "hello\n"), ElementsAre(Id(*t, "hello"), '\n'));  // byte tokens have id = byte
}

TEST(BpeTest, SpecialTokensMatchLongestFirstAndOnlyWhenParsed) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  const int32_t im_start = t->TokenId("<|im_start|>"), im_end = t->TokenId("<|im_end|>");
  const int32_t im = t->TokenId("<|im");  // non-special added token
  ASSERT_GE(im_start, 0);
  EXPECT_THAT(Enc(*t, "<|im_start|>hello<|im_end|>"), ElementsAre(im_start, Id(*t, "hello"), im_end));
  // Without parse_special, control tokens are plain text, but a non-special added token still matches.
  const auto plain = Enc(*t, "<|im_end|>", {.add_special = true, .parse_special = false});
  EXPECT_THAT(plain, ElementsAre(im, '_', 'e', 'n', 'd', '|', '>'));
  EXPECT_EQ(Dec(*t, plain), "<|im_end|>");
  EXPECT_TRUE(t->IsEog(im_end));
  EXPECT_TRUE(t->IsEog(t->TokenId("<|endoftext|>")));
  EXPECT_FALSE(t->IsEog(im_start));
  EXPECT_EQ(t->eos_id(), im_end);
  EXPECT_STREQ(t->kind_name(), "bpe");
}

TEST(BpeTest, DecodeRoundTripsAndRepeatedWordsUseTheCache) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  for (const char* text : {"hello world", "  hello   world  \n\n\tx", "héllo 中文 😀👨‍👩‍👧", "a\r\nb\r\n",
                           "<|im_start|>user\nhello<|im_end|>\n", "don't 1234 x=-1;", ""}) {
    const auto ids = Enc(*t, text);
    EXPECT_EQ(Dec(*t, ids), text);
    EXPECT_EQ(Enc(*t, text), ids);  // second encode goes through the word cache
  }
}

TEST(BpeTest, DecodeOfHalfACharacterIsReplacementCharacter) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  const auto ids = Enc(*t, "中");  // three byte tokens
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(Dec(*t, {ids[0], ids[1]}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Dec(*t, {t->TokenId("<|im_end|>")}, {.render_special = false}), "");
  EXPECT_FALSE(t->Decode(std::vector<int32_t>{t->vocab_size()}).ok());
  EXPECT_FALSE(t->Decode(std::vector<int32_t>{-1}).ok());
}

TEST(BpeTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  auto r = t->Encode("hello \xC3(");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("byte offset 6"));
}

TEST(LoaderTest, MalformedFilesGiveClearErrors) {
  auto bad_json = ParseTokenizerJson("{\"model\": ", "", "tok.json");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_THAT(std::string(bad_json.status().message()), HasSubstr("tok.json: not valid JSON"));

  auto unigram = ParseTokenizerJson(R"({"model": {"type": "Unigram", "vocab": []}})", "", "tok.json");
  ASSERT_FALSE(unigram.ok());
  EXPECT_THAT(std::string(unigram.status().message()), HasSubstr("'Unigram' is not supported"));

  auto no_model = ParseTokenizerJson(R"({"added_tokens": []})", "", "tok.json");
  ASSERT_FALSE(no_model.ok());
  EXPECT_THAT(std::string(no_model.status().message()), HasSubstr("no \"model\""));

  std::string odd_regex = testing_tokenizers::BpeTokenizerJson({});
  const std::string needle = "\\\\p{N}|";  // the Qwen2 single-digit rule, as JSON escapes it
  odd_regex.replace(odd_regex.find(needle), needle.size(), "\\\\p{N}{1,2}|");
  auto unknown_regex = ParseTokenizerJson(odd_regex, "", "tok.json");
  ASSERT_FALSE(unknown_regex.ok());
  EXPECT_THAT(std::string(unknown_regex.status().message()), HasSubstr("pre-tokenizer regex"));

  // A merge whose parts are not tokens.
  auto spec = ParseTokenizerJson(testing_tokenizers::BpeTokenizerJson({{"a", "b"}}), "", "tok.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->merges.push_back({"zz", "q"});
  auto tok = Tokenizer::Create(*spec);
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("'zz' is not in the vocabulary"));

  auto bad_eos_cfg = ParseTokenizerJson(testing_tokenizers::BpeTokenizerJson({}), R"({"add_eos_token": true})", "t");
  EXPECT_FALSE(bad_eos_cfg.ok());
  auto missing = LoadTokenizerForModel("/nonexistent/model/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(SpmTest, MergesBytesFallbackAndBos) {
  auto t = MakeSpm();
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->kind_name(), "spm");
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  const int32_t hello = Id(*t, "\xE2\x96\x81hello"), wor = Id(*t, "\xE2\x96\x81wor");
  EXPECT_THAT(Enc(*t, "hello world"), ElementsAre(1, hello, wor, Id(*t, "l"), Id(*t, "d")));
  // 'é' is not in the vocabulary: its two bytes <0xC3> <0xA9> (ids 3 + byte).
  EXPECT_THAT(Enc(*t, "héllo"), ElementsAre(1, Id(*t, "\xE2\x96\x81h"), 3 + 0xC3, 3 + 0xA9, Id(*t, "ll"), Id(*t, "o")));
  EXPECT_THAT(Enc(*t, "hello", {.add_special = false}), ElementsAre(hello));
  EXPECT_THAT(Enc(*t, ""), ElementsAre(1));
  // Each text segment between special tokens gets its own '▁' (HF Prepend normalizer, llama.cpp).
  EXPECT_THAT(Enc(*t, "hello</s>hello", {.add_special = false}), ElementsAre(hello, 2, hello));
}

TEST(SpmTest, DecodeStripsTheAddedSpaceOnly) {
  auto t = MakeSpm();
  ASSERT_NE(t, nullptr);
  for (const char* text : {"hello world", " hello", "  two  spaces ", "héllo 中文 😀", "\n\thello\n", "x"}) {
    const auto ids = Enc(*t, text);
    EXPECT_EQ(Dec(*t, ids, {.render_special = false}), text);
  }
  EXPECT_EQ(Dec(*t, Enc(*t, "hello")), "<s> hello");  // as HF: Strip only touches the very start
}

TEST(SpmTest, MetaspacePrependFirstAndSplit) {
  // The newer Llama tokenizer.json spelling: no normalizer, a Metaspace pre-tokenizer.
  auto root = nlohmann::json::parse(testing_tokenizers::SpmTokenizerJson());
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  auto spec = ParseTokenizerJson(root.dump(), testing_tokenizers::SpmTokenizerConfig(), "metaspace.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->space_prefix, SpacePrefix::kFirstSegment);
  auto t = *Tokenizer::Create(*spec);
  const int32_t hello = Id(*t, "\xE2\x96\x81hello");
  EXPECT_THAT(Enc(*t, "hello world"), ElementsAre(1, hello, Id(*t, "\xE2\x96\x81wor"), Id(*t, "l"), Id(*t, "d")));
  // Text already starting with a space gets no second '▁' (the legacy normalizer would add one).
  EXPECT_THAT(Enc(*t, " hello", {.add_special = false}), ElementsAre(hello));
  // Only the first text segment is prefixed.
  EXPECT_THAT(Enc(*t, "hello</s>hello", {.add_special = false}),
              ElementsAre(hello, 2, Id(*t, "h"), Id(*t, "e"), Id(*t, "ll"), Id(*t, "o")));
  // split=true: no merge crosses a '▁' word boundary ("▁hello" + "▁" would otherwise be free to merge).
  EXPECT_THAT(Enc(*t, "hello  hello", {.add_special = false}), ElementsAre(hello, Id(*t, "\xE2\x96\x81"), hello));
}

// Writes the tokenizer into a GGUF file, loads it back and checks the encodings are unchanged.
void ExpectGgufRoundTrip(const Tokenizer& t, const std::vector<std::string>& texts, const std::string& file) {
  GgufWriter w;
  ASSERT_TRUE(AddTokenizerToGguf(t, &w).ok());
  const std::string path = ::testing::TempDir() + "/" + file;
  ASSERT_TRUE(w.Write(path).ok());
  auto back = LoadTokenizerForModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->kind(), t.kind());
  EXPECT_EQ((*back)->vocab_size(), t.vocab_size());
  EXPECT_EQ((*back)->bos_id(), t.bos_id());
  EXPECT_EQ((*back)->eos_id(), t.eos_id());
  EXPECT_EQ((*back)->add_bos(), t.add_bos());
  EXPECT_EQ((*back)->chat_template(), t.chat_template());
  EXPECT_TRUE(CheckCompatible(t, **back).ok());
  for (const std::string& text : texts) EXPECT_EQ(Enc(**back, text), Enc(t, text)) << text;

  if (t.kind() == TokenizerKind::kSpm) {
    // llama.cpp ignores merges for llama vocabularies and merges by score: the scores we write
    // must give the same ids.
    TokenizerSpec by_score = (*back)->spec();
    by_score.merges.clear();
    auto scored = Tokenizer::Create(by_score);
    ASSERT_TRUE(scored.ok()) << scored.status();
    for (const std::string& text : texts) EXPECT_EQ(Enc(**scored, text), Enc(t, text)) << text;
  }
}

TEST(GgufTokenizerTest, RoundTripsBothKinds) {
  const std::vector<std::string> texts = {"hello world", "<|im_start|>hello<|im_end|>", "héllo 中 😀", " x  y \n"};
  auto bpe = MakeBpe(kHelloMerges);
  ASSERT_NE(bpe, nullptr);
  ExpectGgufRoundTrip(*bpe, texts, "tok_bpe.gguf");
  auto spm = MakeSpm();
  ASSERT_NE(spm, nullptr);
  ExpectGgufRoundTrip(*spm, texts, "tok_spm.gguf");
}

TEST(GgufTokenizerTest, FileWithoutTokenizerIsAnError) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  const std::string path = ::testing::TempDir() + "/no_tok.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto t = LoadTokenizerForModel(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("no tokenizer.ggml.model"));

  GgufWriter w2;
  w2.SetString("tokenizer.ggml.model", "bert");
  const std::string path2 = ::testing::TempDir() + "/bert_tok.gguf";
  ASSERT_TRUE(w2.Write(path2).ok());
  t = LoadTokenizerForModel(path2);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("'bert' is not supported"));
}

// llama.cpp's writers put "none" (older ones "no_vocab") in files without a vocabulary: no tokenizer,
// not an unsupported one.
TEST(GgufTokenizerTest, NoneAndNoVocabMeanNoTokenizer) {
  for (const char* word : {"none", "no_vocab"}) {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", word);
    const std::string path = ::testing::TempDir() + "/" + word + "_tok.gguf";
    ASSERT_TRUE(w.Write(path).ok());
    auto t = LoadTokenizerForModel(path);
    ASSERT_FALSE(t.ok()) << word;
    EXPECT_TRUE(absl::IsNotFound(t.status())) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("carries no tokenizer"));
    auto maybe = LoadTokenizerIfPresent(path);
    ASSERT_TRUE(maybe.ok()) << maybe.status();
    EXPECT_EQ(*maybe, nullptr) << word;
  }
}

TEST(StreamingDetokenizerTest, NeverEmitsHalfACharacter) {
  auto t = MakeBpe(kHelloMerges);
  ASSERT_NE(t, nullptr);
  const std::string text = "hello 中文 😀 world";
  const auto ids = Enc(*t, text);
  StreamingDetokenizer d(*t);
  std::string all;
  for (int32_t id : ids) {
    auto piece = d.Add(id);
    ASSERT_TRUE(piece.ok());
    EXPECT_TRUE(unicode::ValidateUtf8(*piece).ok()) << "emitted a partial character";
    all += *piece;
  }
  all += d.Finish();
  EXPECT_EQ(all, text);

  // A dangling lead byte is held, then reported as U+FFFD at the end.
  StreamingDetokenizer cut(*t);
  ASSERT_EQ(t->TokenBytes(ids[2], false), "\xE4");  // "hello", " ", then the bytes of 中
  auto first = cut.Add(ids[2]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD");
  EXPECT_FALSE(cut.Add(-3).ok());
}

TEST(StreamingDetokenizerTest, SpmStripsTheFirstSpaceOnly) {
  auto t = MakeSpm();
  ASSERT_NE(t, nullptr);
  const auto ids = Enc(*t, "hello world");
  StreamingDetokenizer d(*t);
  std::string all;
  for (int32_t id : ids) all += *d.Add(id);
  EXPECT_EQ(all, "hello world");
}

TEST(ChatTemplateTest, ChatMlAndInst) {
  auto bpe = MakeBpe(kHelloMerges);
  ASSERT_NE(bpe, nullptr);
  auto f = DetectChatFormat(*bpe);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, ChatFormat::kChatMl);
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "hello"}};
  auto p = FormatChat(*f, *bpe, msgs);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = Enc(*bpe, *p, {.add_special = false, .parse_special = true});
  EXPECT_EQ(ids.front(), bpe->TokenId("<|im_start|>"));

  auto spm = MakeSpm();
  ASSERT_NE(spm, nullptr);
  auto g = DetectChatFormat(*spm);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, ChatFormat::kLlama2);
  auto q = FormatChat(*g, *spm, {{"user", "hi"}, {"assistant", "hello"}, {"user", "more"}});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, "<s>[INST] hi [/INST]hello</s>[INST] more [/INST]");
  EXPECT_FALSE(FormatChat(*g, *spm, {{"assistant", "x"}}).ok());
  EXPECT_FALSE(FormatChat(*f, *bpe, {{"tool", "x"}}).ok());
}

TEST(CompatibilityTest, AcceptsSameVocabAndExplainsMismatches) {
  auto a = MakeBpe(kHelloMerges);
  auto b = MakeBpe(kHelloMerges);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(CheckCompatible(*a, *b).ok());

  TokenizerSpec changed = b->spec();
  changed.tokens[260] = "different";
  changed.merges.clear();  // they name the old text
  auto c = *Tokenizer::Create(changed);
  absl::Status s = CheckCompatible(*a, *c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("token 260 is \"" + a->TokenText(260) + "\" in the target and \"different\" in the draft"));

  // Unused padding at the end (GGUF converters pad to the embedding size) does not count.
  TokenizerSpec padded = b->spec();
  for (int i = 0; i < 1000; ++i) padded.tokens.push_back(Cat("[PAD", i, "]"));
  padded.types.resize(padded.tokens.size(), TokenType::kUnused);
  EXPECT_TRUE(CheckCompatible(*a, **Tokenizer::Create(padded)).ok());
  // Extra real tokens do, up to 128.
  TokenizerSpec extended = b->spec();
  for (int i = 0; i < 100; ++i) extended.tokens.push_back(Cat("<extra_", i, ">"));
  extended.types.resize(extended.tokens.size(), TokenType::kNormal);
  EXPECT_TRUE(CheckCompatible(*a, **Tokenizer::Create(extended)).ok());
  for (int i = 100; i < 200; ++i) extended.tokens.push_back(Cat("<extra_", i, ">"));
  extended.types.resize(extended.tokens.size(), TokenType::kNormal);
  s = CheckCompatible(*a, **Tokenizer::Create(extended));
  EXPECT_THAT(std::string(s.message()), HasSubstr("differ by more than 128"));

  TokenizerSpec other_eos = b->spec();
  other_eos.eos_id = other_eos.pad_id;
  s = CheckCompatible(*a, **Tokenizer::Create(other_eos));
  EXPECT_THAT(std::string(s.message()), HasSubstr("EOS differs"));

  auto spm = MakeSpm();
  s = CheckCompatible(*a, *spm);
  EXPECT_THAT(std::string(s.message()), HasSubstr("target's tokenizer is bpe, the draft's spm"));
}

}  // namespace
}  // namespace specgen
