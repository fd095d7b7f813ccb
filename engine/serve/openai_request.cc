#include "engine/serve/openai_request.h"

#include <cmath>
#include <limits>

#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace specgen::serve {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

absl::Status WrongType(std::string_view field, std::string_view wanted, const json& v) {
  return InvalidArgument("'", field, "' must be ", wanted, ", not ", TypeName(v));
}

absl::StatusOr<double> Number(const json& body, std::string_view field) {
  const json& v = body.at(std::string(field));
  if (!v.is_number()) return WrongType(field, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return InvalidArgument("'", field, "' must be finite");
  return d;
}

absl::StatusOr<int64_t> Integer(const json& body, std::string_view field) {
  const json& v = body.at(std::string(field));
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument("'", field, "' is too large");
    }
    return v.get<int64_t>();
  }
  // 16.0 is an integer written as a float: accepted, as JSON has one number type.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return WrongType(field, "an integer", v);
}

absl::StatusOr<std::string> Text(const json& v, std::string_view field) {
  if (!v.is_string()) return WrongType(field, "a string", v);
  return v.get<std::string>();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
absl::StatusOr<std::string> MessageContent(const json& v, size_t i) {
  const std::string field = Cat("messages[", i, "].content");
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, "a string or an array of text parts", v);
  std::string out;
  for (size_t j = 0; j < v.size(); ++j) {
    const json& part = v[j];
    const std::string pf = Cat(field, "[", j, "]");
    if (!part.is_object()) return WrongType(pf, "an object", part);
    if (!part.contains("type") || part["type"] != "text") {
      return InvalidArgument("'", pf, ".type' must be \"text\": only text content is supported");
    }
    if (!part.contains("text")) return InvalidArgument("'", pf, ".text' is missing");
    ASSIGN_OR_RETURN(std::string t, Text(part["text"], pf + ".text"));
    out += t;
  }
  return out;
}

absl::Status ParseMessages(const json& body, CompletionRequest* r) {
  if (!body.contains("messages")) return InvalidArgument("'messages' is missing");
  const json& m = body["messages"];
  if (!m.is_array()) return WrongType("messages", "an array", m);
  if (m.empty()) return InvalidArgument("'messages' is empty");
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    if (!msg.is_object()) return WrongType(Cat("messages[", i, "]"), "an object", msg);
    if (!msg.contains("role")) return InvalidArgument("'messages[", i, "].role' is missing");
    ASSIGN_OR_RETURN(std::string role, Text(msg["role"], Cat("messages[", i, "].role")));
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgument("'messages[", i, "].role' is \"", role,
                             "\"; the roles are system, user and assistant");
    }
    if (!msg.contains("content") || msg["content"].is_null()) {
      return InvalidArgument("'messages[", i, "].content' is missing");
    }
    ASSIGN_OR_RETURN(std::string content, MessageContent(msg["content"], i));
    r->messages.push_back(ChatMessage{std::move(role), std::move(content)});
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, CompletionRequest* r) {
  if (!body.contains("prompt")) return InvalidArgument("'prompt' is missing");
  const json& p = body["prompt"];
  // A list of one prompt is what many clients send; several would be several choices (n > 1).
  if (p.is_array()) {
    if (p.size() != 1) {
      return InvalidArgument("'prompt' is an array of ", p.size(), " prompts; give one (a string)");
    }
    ASSIGN_OR_RETURN(r->prompt, Text(p[0], "prompt[0]"));
  } else {
    ASSIGN_OR_RETURN(r->prompt, Text(p, "prompt"));
  }
  if (r->prompt.empty()) return InvalidArgument("'prompt' is empty");
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, CompletionRequest* r) {
  SamplingParams& s = r->sampling;
  auto given = [&](const char* f) { return body.contains(f) && !body[f].is_null(); };
  if (given("temperature")) {
    ASSIGN_OR_RETURN(const double t, Number(body, "temperature"));
    if (t < 0) return InvalidArgument("'temperature' is ", t, "; it must be >= 0 (0: greedy)");
    s.temperature = static_cast<float>(t);
  }
  if (given("top_p")) {
    ASSIGN_OR_RETURN(const double p, Number(body, "top_p"));
    if (!(p > 0 && p <= 1)) return InvalidArgument("'top_p' is ", p, "; it must be in (0, 1]");
    s.top_p = static_cast<float>(p);
  }
  if (given("top_k")) {
    ASSIGN_OR_RETURN(const int64_t k, Integer(body, "top_k"));
    if (k < 0 || k > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("'top_k' is ", k, "; it must be >= 0 (0: off)");
    }
    s.top_k = static_cast<int32_t>(k);
  }
  if (given("min_p")) {
    ASSIGN_OR_RETURN(const double p, Number(body, "min_p"));
    if (!(p >= 0 && p <= 1)) return InvalidArgument("'min_p' is ", p, "; it must be in [0, 1]");
    s.min_p = static_cast<float>(p);
  }
  if (given("seed")) {
    ASSIGN_OR_RETURN(const int64_t seed, Integer(body, "seed"));
    if (seed < 0) return InvalidArgument("'seed' is ", seed, "; it must be >= 0");
    s.seed = static_cast<uint64_t>(seed);
    r->seed_given = true;
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, CompletionRequest* r) {
  if (!body.contains("stop") || body["stop"].is_null()) return absl::OkStatus();
  const json& v = body["stop"];
  if (v.is_string()) {
    r->stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxStopStrings) {
      return InvalidArgument("'stop' has ", v.size(), " strings; at most ", kMaxStopStrings);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      ASSIGN_OR_RETURN(std::string s, Text(v[i], Cat("stop[", i, "]")));
      r->stop.push_back(std::move(s));
    }
  } else {
    return WrongType("stop", "a string or an array of strings", v);
  }
  for (const std::string& s : r->stop) {
    if (s.empty()) return InvalidArgument("'stop' holds an empty string");
  }
  return absl::OkStatus();
}

absl::StatusOr<int> TopLogprobs(const json& body, const char* field) {
  ASSIGN_OR_RETURN(const int64_t n, Integer(body, field));
  if (n < 0 || n > kMaxTopLogprobs) {
    return InvalidArgument("'", field, "' is ", n, "; it must be in [0, ", kMaxTopLogprobs, "]");
  }
  return static_cast<int>(n);
}

// The chat's logprobs (a boolean) and top_logprobs (which needs it); the completions' logprobs (a
// count of top tokens).
absl::Status ParseLogprobs(const json& body, CompletionRequest* r) {
  auto given = [&](const char* f) { return body.contains(f) && !body[f].is_null(); };
  if (!r->chat) {
    if (given("top_logprobs")) {
      return InvalidArgument("'top_logprobs' is the chat API's; /v1/completions takes 'logprobs': N");
    }
    if (given("logprobs")) {
      ASSIGN_OR_RETURN(r->top_logprobs, TopLogprobs(body, "logprobs"));
      r->logprobs = true;
    }
    return absl::OkStatus();
  }
  if (given("logprobs")) {
    if (!body["logprobs"].is_boolean()) return WrongType("logprobs", "a boolean", body["logprobs"]);
    r->logprobs = body["logprobs"].get<bool>();
  }
  if (given("top_logprobs")) {
    ASSIGN_OR_RETURN(r->top_logprobs, TopLogprobs(body, "top_logprobs"));
    if (!r->logprobs) return InvalidArgument("'top_logprobs' needs 'logprobs': true");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body_text, bool chat,
                                                         const SamplingParams& defaults) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("the request body is not valid JSON");
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object, not ", TypeName(body));
  CompletionRequest r;
  r.chat = chat;
  r.sampling = defaults;
  if (body.contains("model") && !body["model"].is_null()) {
    ASSIGN_OR_RETURN(r.model, Text(body["model"], "model"));
  }
  if (chat) {
    RETURN_IF_ERROR(ParseMessages(body, &r));
  } else {
    RETURN_IF_ERROR(ParsePrompt(body, &r));
  }
  // max_completion_tokens is the chat API's newer name; either is taken, not both.
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(f) || body[f].is_null()) continue;
    if (r.max_tokens) return InvalidArgument("give 'max_tokens' or 'max_completion_tokens', not both");
    ASSIGN_OR_RETURN(const int64_t n, Integer(body, f));
    if (n < 1) return InvalidArgument("'", f, "' is ", n, "; it must be >= 1");
    r.max_tokens = n;
  }
  RETURN_IF_ERROR(ParseSampling(body, &r));
  RETURN_IF_ERROR(ParseStop(body, &r));
  RETURN_IF_ERROR(ParseLogprobs(body, &r));
  if (body.contains("n") && !body["n"].is_null()) {
    ASSIGN_OR_RETURN(const int64_t n, Integer(body, "n"));
    if (n != 1) return InvalidArgument("'n' is ", n, "; only one choice per request is supported");
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return WrongType("stream", "a boolean", body["stream"]);
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return WrongType("stream_options", "an object", so);
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) {
        return WrongType("stream_options.include_usage", "a boolean", so["include_usage"]);
      }
      r.include_usage = so["include_usage"].get<bool>();
    }
  }
  return r;
}

}  // namespace specgen::serve
