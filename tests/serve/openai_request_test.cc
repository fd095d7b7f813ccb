#include "engine/serve/openai_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen::serve {
namespace {

using ::testing::HasSubstr;

SamplingParams Defaults() {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 7;
  p.seed = 3;
  return p;
}

// The error's message for a body that must be refused (InvalidArgument: HTTP 400).
std::string Error(const std::string& body, bool chat = false) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body, chat, Defaults());
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(r.status().message());
}

TEST(OpenAiRequest, CompletionFieldsAndDefaults) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(
      R"({"model":"m","prompt":"hi","max_tokens":16.0,"top_p":0.9,"stop":"\n","stream":true,
          "stream_options":{"include_usage":true},"user":"ignored"})",
      false, Defaults());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_EQ(r->max_tokens, 16);  // 16.0 is an integer
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);  // not given: the server's
  EXPECT_EQ(r->sampling.top_k, 7);
  EXPECT_FALSE(r->seed_given);
  EXPECT_EQ(r->stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiRequest, PromptAsAListOfOne) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(R"({"prompt":["a b"],"seed":9})", false, Defaults());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, "a b");
  EXPECT_TRUE(r->seed_given);
  EXPECT_EQ(r->sampling.seed, 9u);
}

TEST(OpenAiRequest, ChatMessagesWithPartsAndRoles) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(
      R"({"messages":[{"role":"developer","content":"be brief"},
                      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                      {"role":"assistant","content":"c"}],"max_completion_tokens":4,"temperature":0})",
      true, Defaults());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->max_tokens, 4);
  EXPECT_TRUE(r->sampling.greedy());
}

TEST(OpenAiRequest, EveryBadFieldIsNamed) {
  EXPECT_THAT(Error("{\"prompt\": "), HasSubstr("not valid JSON"));
  EXPECT_THAT(Error("[1]"), HasSubstr("JSON object, not an array"));
  EXPECT_THAT(Error("{}"), HasSubstr("'prompt' is missing"));
  EXPECT_THAT(Error(R"({"prompt":""})"), HasSubstr("'prompt' is empty"));
  EXPECT_THAT(Error(R"({"prompt":["a","b"]})"), HasSubstr("2 prompts"));
  EXPECT_THAT(Error(R"({"prompt":3})"), HasSubstr("'prompt' must be a string, not a number"));
  EXPECT_THAT(Error(R"({"prompt":"x","model":1})"), HasSubstr("'model' must be a string"));
  EXPECT_THAT(Error(R"({"prompt":"x","max_tokens":"5"})"), HasSubstr("'max_tokens' must be an integer"));
  EXPECT_THAT(Error(R"({"prompt":"x","max_tokens":2.5})"), HasSubstr("'max_tokens' must be an integer"));
  EXPECT_THAT(Error(R"({"prompt":"x","max_tokens":0})"), HasSubstr("'max_tokens' is 0"));
  EXPECT_THAT(Error(R"({"prompt":"x","max_tokens":1,"max_completion_tokens":1})"), HasSubstr("not both"));
  EXPECT_THAT(Error(R"({"prompt":"x","temperature":-0.1})"), HasSubstr("'temperature' is -0.1"));
  EXPECT_THAT(Error(R"({"prompt":"x","temperature":true})"), HasSubstr("'temperature' must be a number"));
  EXPECT_THAT(Error(R"({"prompt":"x","top_p":1.5})"), HasSubstr("'top_p'"));
  EXPECT_THAT(Error(R"({"prompt":"x","top_k":-1})"), HasSubstr("'top_k'"));
  EXPECT_THAT(Error(R"({"prompt":"x","min_p":2})"), HasSubstr("'min_p'"));
  EXPECT_THAT(Error(R"({"prompt":"x","seed":-3})"), HasSubstr("'seed' is -3"));
  EXPECT_THAT(Error(R"({"prompt":"x","seed":18446744073709551615})"), HasSubstr("'seed' is too large"));
  EXPECT_THAT(Error(R"({"prompt":"x","stop":["a","b","c","d","e"]})"), HasSubstr("at most 4"));
  EXPECT_THAT(Error(R"({"prompt":"x","stop":[""]})"), HasSubstr("empty string"));
  EXPECT_THAT(Error(R"({"prompt":"x","stop":[1]})"), HasSubstr("'stop[0]' must be a string"));
  EXPECT_THAT(Error(R"({"prompt":"x","n":3})"), HasSubstr("one choice"));
  EXPECT_THAT(Error(R"({"prompt":"x","stream":1})"), HasSubstr("'stream' must be a boolean"));
  EXPECT_THAT(Error(R"({"prompt":"x","stream_options":{"include_usage":"y"}})"),
              HasSubstr("stream_options.include_usage"));
}

TEST(OpenAiRequest, BadChatMessagesAreNamed) {
  EXPECT_THAT(Error(R"({"prompt":"x"})", true), HasSubstr("'messages' is missing"));
  EXPECT_THAT(Error(R"({"messages":[]})", true), HasSubstr("'messages' is empty"));
  EXPECT_THAT(Error(R"({"messages":{}})", true), HasSubstr("'messages' must be an array"));
  EXPECT_THAT(Error(R"({"messages":["hi"]})", true), HasSubstr("'messages[0]' must be an object"));
  EXPECT_THAT(Error(R"({"messages":[{"content":"x"}]})", true), HasSubstr("'messages[0].role' is missing"));
  EXPECT_THAT(Error(R"({"messages":[{"role":"tool","content":"x"}]})", true), HasSubstr("\"tool\""));
  EXPECT_THAT(Error(R"({"messages":[{"role":"user"}]})", true), HasSubstr("'messages[0].content' is missing"));
  EXPECT_THAT(Error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true),
              HasSubstr("only text content"));
}

}  // namespace
}  // namespace specgen::serve

namespace specgen::serve {
namespace {

// logprobs as each API spells it: the chat's boolean with top_logprobs, the completions' count.
TEST(OpenAiRequest, LogprobsInEachApisForm) {
  absl::StatusOr<CompletionRequest> chat = ParseCompletionRequest(
      R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":3})", true, Defaults());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->logprobs);
  EXPECT_EQ(chat->top_logprobs, 3);
  absl::StatusOr<CompletionRequest> off = ParseCompletionRequest(R"({"prompt":"x"})", false, Defaults());
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->logprobs);
  absl::StatusOr<CompletionRequest> legacy = ParseCompletionRequest(R"({"prompt":"x","logprobs":0})", false, Defaults());
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_TRUE(legacy->logprobs);  // 0: the chosen token's only
  EXPECT_EQ(legacy->top_logprobs, 0);

  EXPECT_THAT(Error(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true),
              HasSubstr("'top_logprobs' needs 'logprobs': true"));
  EXPECT_THAT(Error(R"({"messages":[{"role":"user","content":"x"}],"logprobs":5})", true),
              HasSubstr("'logprobs' must be a boolean, not a number"));
  EXPECT_THAT(Error(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", true),
              HasSubstr("'top_logprobs' is 21; it must be in [0, 20]"));
  EXPECT_THAT(Error(R"({"prompt":"x","logprobs":-1})"), HasSubstr("'logprobs' is -1; it must be in [0, 20]"));
  EXPECT_THAT(Error(R"({"prompt":"x","logprobs":true})"), HasSubstr("'logprobs' must be an integer"));
  EXPECT_THAT(Error(R"({"prompt":"x","top_logprobs":2})"), HasSubstr("/v1/completions takes 'logprobs': N"));
}

}  // namespace
}  // namespace specgen::serve
