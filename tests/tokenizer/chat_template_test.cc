// Chat formats: each family is recognised from its template's markers (or chosen by name) and
// writes the prompt text its template would; names round-trip and unknown ones are refused.
#include "engine/tokenizer/chat_template.h"

#include "engine/tokenizer/tokenizer_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/test_tokenizers.h"

namespace specgen {
namespace {

using testing_tokenizers::BpeTokenizerConfig;
using testing_tokenizers::BpeTokenizerJson;

// The test BPE (ChatML specials, no BOS) with `chat_template` in place of its own.
std::unique_ptr<Tokenizer> BpeWithTemplate(const std::string& chat_template) {
  auto spec = ParseTokenizerJson(BpeTokenizerJson({{"h", "e"}}), BpeTokenizerConfig(), "test-bpe");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  spec->chat_template = chat_template;
  auto tok = Tokenizer::Create(*std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

TEST(ChatFormatTest, RecognisesEachFamilyByItsMarkers) {
  const std::pair<std::string, ChatFormat> cases[] = {
      {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}", ChatFormat::kLlama3},
      {"{{ '<start_of_turn>' + role + '\n' }}", ChatFormat::kGemma},
      {"{{'<|im_start|>' + message['role'] }}", ChatFormat::kChatMl},
      {"{{ bos_token + '[INST] ' + content + ' [/INST]' }}", ChatFormat::kLlama2},
      {"{{- '<|start|>assistant<|channel|>final<|message|>' }}", ChatFormat::kHarmony},
      {"[gMASK]<sop>{%- for m in messages %}<|{{ m.role }}|>", ChatFormat::kGlm4},
  };
  for (const auto& [text, format] : cases) {
    auto tok = BpeWithTemplate(text);
    ASSERT_NE(tok, nullptr);
    auto detected = DetectChatFormat(*tok);
    ASSERT_TRUE(detected.ok()) << text;
    EXPECT_EQ(*detected, format) << text;
  }
  auto odd = BpeWithTemplate("{{ '### Human: ' + content }}");
  const auto status = DetectChatFormat(*odd).status();
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("choose one with --chat-template"));
}

TEST(ChatFormatTest, NamesRoundTrip) {
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama2, ChatFormat::kLlama3, ChatFormat::kGemma,
                       ChatFormat::kHarmony, ChatFormat::kGlm4}) {
    auto parsed = ParseChatFormat(ChatFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(*ParseChatFormat("llama2"), ChatFormat::kLlama2);
  EXPECT_THAT(std::string(ParseChatFormat("vicuna").status().message()),
              ::testing::HasSubstr("--chat-template must be one of chatml, llama3, mistral (or llama2), gemma, "
                                   "harmony, glm4"));
}

TEST(ChatFormatTest, Llama3AndGemmaPrompts) {
  auto tok = BpeWithTemplate("");  // no BOS token: the formats write their own
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"},
                                         {"user", "more"}};
  auto llama3 = FormatChat(ChatFormat::kLlama3, *tok, msgs);
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(*llama3,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nmore<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto gemma = FormatChat(ChatFormat::kGemma, *tok, msgs);
  ASSERT_TRUE(gemma.ok());
  EXPECT_EQ(*gemma,
            "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n"
            "<start_of_turn>user\nmore<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_FALSE(FormatChat(ChatFormat::kGemma, *tok, {{"assistant", "x"}}).ok());
  EXPECT_FALSE(FormatChat(ChatFormat::kGemma, *tok, {{"user", "x"}, {"assistant", "y"}}).ok());
}

// Qwen3's template with enable_thinking=false ends the generation prompt with an empty reasoning span.
TEST(ChatFormatTest, ReasoningOffWritesQwen3sEmptyThinkSpan) {
  auto tok = BpeWithTemplate("{%- if enable_thinking is defined and enable_thinking is false %}<|im_start|>");
  EXPECT_TRUE(HasThinkingSwitch(*tok));
  EXPECT_FALSE(HasThinkingSwitch(*BpeWithTemplate("<|im_start|>")));
  const std::vector<ChatMessage> msgs = {{"user", "hi"}};
  EXPECT_EQ(*FormatChat(ChatFormat::kChatMl, *tok, msgs, true, /*thinking=*/false),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(*FormatChat(ChatFormat::kChatMl, *tok, msgs, true, /*thinking=*/true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(FormatChat(ChatFormat::kLlama3, *tok, msgs, true, false).ok());
}

// gpt-oss (harmony) and GLM-4.5 prompts as their published templates write them without tools, dates or
// reasoning settings.
TEST(ChatFormatTest, HarmonyAndGlm4Prompts) {
  auto tok = BpeWithTemplate("");
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"},
                                         {"user", "more"}};
  auto harmony = FormatChat(ChatFormat::kHarmony, *tok, msgs);
  ASSERT_TRUE(harmony.ok());
  EXPECT_EQ(*harmony,
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
            "Channel must be included for every message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
            "<|start|>user<|message|>hi<|end|>"
            "<|start|>assistant<|channel|>final<|message|>hello<|end|>"
            "<|start|>user<|message|>more<|end|>"
            "<|start|>assistant");
  auto glm = FormatChat(ChatFormat::kGlm4, *tok, msgs);
  ASSERT_TRUE(glm.ok());
  EXPECT_EQ(*glm,
            "[gMASK]<sop><|system|>\nBe brief.<|user|>\nhi<|assistant|>\n<think></think>\nhello"
            "<|user|>\nmore<|assistant|>");
}

TEST(ChatFormatTest, EndOfTurnOnlyWhereTheVocabularyHasIt) {
  auto tok = BpeWithTemplate("");  // ChatML specials only
  EXPECT_EQ(EndOfTurnText(ChatFormat::kChatMl, *tok), "<|im_end|>");
  EXPECT_EQ(EndOfTurnText(ChatFormat::kLlama3, *tok), "");
  EXPECT_EQ(EndOfTurnText(ChatFormat::kGemma, *tok), "");
  EXPECT_EQ(EndOfTurnText(ChatFormat::kHarmony, *tok), "");
  EXPECT_EQ(EndOfTurnText(ChatFormat::kGlm4, *tok), "");
  EXPECT_EQ(EndOfTurnText(ChatFormat::kLlama2, *tok), "<|im_end|>");  // its EOS
}

}  // namespace
}  // namespace specgen
