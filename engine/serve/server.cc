#include "engine/serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "engine/core/status_macros.h"
#include "engine/serve/logprobs.h"
#include "engine/serve/openai_request.h"
#include "engine/serve/peer_watch.h"
#include "engine/serve/stop_matcher.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "nlohmann/json.hpp"

namespace specgen::serve {
namespace {

using nlohmann::json;

// Invalid UTF-8 (a tokenizer's stray byte) is replaced, never a thrown exception mid-reply.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int HttpStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

std::string ErrorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "server_busy";
    default: return status < 500 ? "invalid_request_error" : "server_error";
  }
}

json ErrorBody(int status, const std::string& message) {
  return json{{"error", {{"message", message}, {"type", ErrorType(status)}, {"code", status}}}};
}

void SetError(httplib::Response& res, const absl::Status& s) {
  res.status = HttpStatus(s);
  if (res.status == 503) res.set_header("Retry-After", "1");
  res.set_content(Dump(ErrorBody(res.status, std::string(s.message()))), "application/json");
}

const char* FinishReason(const SpeculativeStats& stats, bool stop_string) {
  if (stop_string || stats.stop_reason == StopReason::kEndToken) return "stop";
  return "length";
}

json Usage(const SpeculativeStats& s, int64_t completion_tokens, uint64_t seed) {
  return json{{"prompt_tokens", s.prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", s.prompt_tokens + completion_tokens},
              {"specgen",
               {{"acceptance_rate", s.acceptance_rate()},
                {"tokens_per_pass", s.mean_accepted_length()},
                {"passes", s.passes},
                {"drafted", s.drafted},
                {"accepted", s.accepted},
                {"bytes_streamed", s.offload.h2d_bytes},
                {"ttft_seconds", s.ttft_seconds},
                {"tokens_per_second", s.tokens_per_second()},
                {"seed", seed}}}};
}

}  // namespace

// A request checked, tokenized and admitted, and the state of its reply while it generates.
struct Server::Prepared {
  CompletionRequest request;
  std::vector<int32_t> prompt;
  SpeculativeOptions options;
  std::unique_ptr<SequencePool::Admission> admission;
  std::string id;
  int64_t created = 0;
};

Server::Server(ServerConfig config, const Tokenizer* tokenizer, SequencePool* pool)
    : config_(std::move(config)), tok_(tokenizer), pool_(pool), http_(std::make_unique<httplib::Server>()) {
  created_ = static_cast<int64_t>(std::time(nullptr));
  const int threads = config_.http_threads > 0
                          ? config_.http_threads
                          : pool_->load().parallel + pool_->load().queue + 4;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(size_t{16} << 20);
  // Bodies other than ours (httplib's own 4xx: an unknown path, a malformed request) in the API's form.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 404 ? Cat("no route ", req.method, " ", req.path)
                                                  : Cat("HTTP ", res.status);
    res.set_content(Dump(ErrorBody(res.status, message)), "application/json");
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(Dump(ErrorBody(500, Cat("internal error: ", what))), "application/json");
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const SequencePool::Load l = pool_->load();
    const PassBatcher::Counters c = pool_->pass_counters();
    res.set_content(Dump(json{{"status", "ok"},
                              {"running", l.running},
                              {"waiting", l.waiting},
                              {"parallel", l.parallel},
                              {"queue", l.queue},
                              {"shared_passes", c.passes},
                              {"shared_pass_sequences", c.sequences},
                              {"shared_pass_rows", c.rows}}),
                    "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    json model = {{"id", config_.model_id}, {"object", "model"}, {"created", created_}, {"owned_by", "specgen"},
                  {"max_context", pool_->max_context()}};
    res.set_content(Dump(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Completion(req, res, false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Completion(req, res, true);
  });
}

Server::~Server() = default;

absl::StatusOr<int> Server::Bind() {
  int port = config_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(config_.host);
    if (port < 0) return absl::UnavailableError(Cat("cannot listen on ", config_.host, " (any port)"));
  } else if (!http_->bind_to_port(config_.host, port)) {
    return absl::UnavailableError(Cat("cannot listen on ", config_.host, ":", port,
                                      " (in use, or the address is not this machine's)"));
  }
  return port;
}

absl::Status Server::Listen() {
  if (!http_->listen_after_bind()) return absl::InternalError("the HTTP server stopped with an error");
  return absl::OkStatus();
}

void Server::Stop() { http_->stop(); }

bool Server::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + config_.api_key) return true;
  SetError(res, absl::UnauthenticatedError(
                    "missing or wrong API key: send the header 'Authorization: Bearer KEY' (--api-key)"));
  return false;
}

absl::StatusOr<std::shared_ptr<Server::Prepared>> Server::Prepare(const httplib::Request& req, bool chat) {
  auto p = std::make_shared<Prepared>();
  ASSIGN_OR_RETURN(p->request, ParseCompletionRequest(req.body, chat, config_.base.sampling));
  CompletionRequest& r = p->request;
  if (!r.model.empty() && r.model != config_.model_id) {
    return absl::NotFoundError(Cat("model '", r.model, "' is not served here; this server serves '",
                                   config_.model_id, "' (GET /v1/models)"));
  }
  std::vector<int32_t> end_ids = config_.base.end_ids;
  if (chat) {
    if (!config_.chat_format) return InvalidArgument("no chat template: ", config_.chat_error);
    ASSIGN_OR_RETURN(std::string text, FormatChat(*config_.chat_format, *tok_, r.messages, true));
    ASSIGN_OR_RETURN(p->prompt, tok_->Encode(text, EncodeOptions{.add_special = false, .parse_special = true}));
    if (config_.end_of_turn_id >= 0 &&
        std::find(end_ids.begin(), end_ids.end(), config_.end_of_turn_id) == end_ids.end()) {
      end_ids.push_back(config_.end_of_turn_id);
    }
  } else {
    ASSIGN_OR_RETURN(p->prompt, tok_->Encode(r.prompt));
  }
  const int64_t context = pool_->max_context();
  const int64_t n_prompt = static_cast<int64_t>(p->prompt.size());
  if (n_prompt == 0) return InvalidArgument("the prompt encodes to no tokens");
  if (n_prompt >= context) {
    return InvalidArgument("the prompt has ", n_prompt, " tokens, leaving no room in the context of ", context,
                           " tokens");
  }
  const int64_t room = context - n_prompt;
  int64_t max_tokens;
  if (r.max_tokens) {
    if (*r.max_tokens > room) {
      return InvalidArgument("'max_tokens' is ", *r.max_tokens, " but the prompt's ", n_prompt,
                             " tokens leave ", room, " in the context of ", context);
    }
    max_tokens = *r.max_tokens;
  } else {
    max_tokens = config_.default_max_tokens < 0 ? room : std::min(config_.default_max_tokens, room);
  }
  if (!r.seed_given) r.sampling.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  p->options = config_.base;
  p->options.sampling = r.sampling;
  p->options.max_new_tokens = max_tokens;
  p->options.end_ids = std::move(end_ids);
  p->options.n_probs = r.logprobs ? r.top_logprobs : 0;
  ASSIGN_OR_RETURN(p->admission, pool_->Admit());
  p->id = Cat(chat ? "chatcmpl-" : "cmpl-", next_id_.fetch_add(1));
  p->created = static_cast<int64_t>(std::time(nullptr));
  return p;
}

void Server::Completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!Authorized(req, res)) return;
  absl::StatusOr<std::shared_ptr<Prepared>> prepared = Prepare(req, chat);
  if (!prepared.ok()) return SetError(res, prepared.status());
  std::shared_ptr<Prepared> p = std::move(*prepared);
  const std::string model = config_.model_id;
  const char* object = chat ? (p->request.stream ? "chat.completion.chunk" : "chat.completion")
                            : "text_completion";
  // One choice's JSON: the chat's message or delta, or the completion's text, with the logprobs of
  // its tokens (null unless asked for).
  auto choice = [chat](const std::string& text, bool delta, const json& finish, const json& logprobs = nullptr) {
    json c = {{"index", 0}, {"finish_reason", finish}};
    if (!chat) {
      c["text"] = text;
    } else if (delta) {
      c["delta"] = text.empty() ? json::object() : json{{"content", text}};
    } else {
      c["message"] = {{"role", "assistant"}, {"content", text}};
    }
    c["logprobs"] = logprobs;
    return c;
  };
  auto envelope = [p, model, object](json choices) {
    return json{{"id", p->id}, {"object", object}, {"created", p->created}, {"model", model},
                {"choices", std::move(choices)}};
  };
  PeerWatch watch(req.local_port, req.remote_addr, req.remote_port);

  // Runs the generation; `send` (may be empty) gets the text ready after each step, outside the
  // sequence's turn, and returns false once the client is gone. Returns the error, or the finish.
  struct Outcome {
    std::string text_left;  // text not yet given to `send`
    json logprobs_left;     // the logprobs of its tokens (null unless asked for)
    SpeculativeStats stats;
    int64_t completion_tokens = 0;
    bool stop_string = false, gone = false;
  };
  auto generate = [this, p, watch, chat](const std::function<bool(const std::string&, const json&)>& send)
      -> absl::StatusOr<Outcome> {
    StreamingDetokenizer detok(*tok_);
    StopMatcher stops(p->request.stop);
    std::string ready;
    size_t released = 0;  // bytes of the reply the stop strings let out so far
    const bool want_logprobs = p->request.logprobs;
    LogprobsTracker logprobs([this](int32_t id) { return tok_->IsValid(id) ? tok_->TokenBytes(id, true) : ""; },
                             chat);
    absl::Status decode_status;
    Outcome out;
    SequencePool::Job job;
    job.prompt = p->prompt;
    job.options = p->options;
    if (want_logprobs) {
      job.options.on_logprobs = [&](std::span<const TokenLogprobs> step) { logprobs.AddLogprobs(step); };
    }
    job.sink = [&](std::span<const int32_t> tokens) {
      for (const int32_t t : tokens) {
        absl::StatusOr<std::string> piece = detok.Add(t);
        if (!piece.ok()) {
          decode_status.Update(piece.status());
          continue;
        }
        if (want_logprobs) logprobs.AddText(piece->size());
        const std::string safe = stops.Add(*piece);
        released += safe.size();
        ready += safe;
      }
    };
    job.between_steps = [&]() {
      if (send && !ready.empty()) {
        if (!send(ready, want_logprobs ? logprobs.Take(released) : json(nullptr))) out.gone = true;
        ready.clear();
      }
      if (watch.Closed()) out.gone = true;
      return out.gone || stops.stopped();
    };
    ASSIGN_OR_RETURN(std::vector<int32_t> generated, pool_->Run(*p->admission, job, &out.stats));
    RETURN_IF_ERROR(decode_status);
    const std::string tail = detok.Finish();
    std::string safe = stops.Add(tail);
    safe += stops.Finish();
    released += safe.size();
    ready += safe;
    if (want_logprobs) out.logprobs_left = logprobs.TakeRest(released, stops.stopped());
    out.text_left = std::move(ready);
    out.completion_tokens = static_cast<int64_t>(generated.size());
    out.stop_string = stops.stopped();
    return out;
  };

  if (!p->request.stream) {
    absl::StatusOr<Outcome> out = generate(nullptr);
    if (!out.ok()) return SetError(res, out.status());
    json body = envelope(json::array(
        {choice(out->text_left, false, FinishReason(out->stats, out->stop_string), out->logprobs_left)}));
    body["usage"] = Usage(out->stats, out->completion_tokens, p->options.sampling.seed);
    res.set_content(Dump(body), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [p, generate, envelope, choice, chat](size_t, httplib::DataSink& sink) {
        auto event = [&sink](const json& j) {
          const std::string s = "data: " + Dump(j) + "\n\n";
          return sink.write(s.data(), s.size());
        };
        // The chat's first chunk names the role, as OpenAI's does.
        bool alive = !chat || event(envelope(json::array({json{{"index", 0},
                                                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                                {"finish_reason", nullptr}}})));
        auto send = [&](const std::string& text, const json& logprobs) {
          alive = alive && event(envelope(json::array({choice(text, true, nullptr, logprobs)})));
          return alive;
        };
        absl::StatusOr<Outcome> out = generate(send);
        if (!out.ok()) {
          event(ErrorBody(HttpStatus(out.status()), std::string(out.status().message())));
        } else if (!out->gone) {
          const json& lp = out->logprobs_left;
          const bool lp_entries = lp.is_object() && ((lp.contains("content") && !lp["content"].empty()) ||
                                                     (lp.contains("tokens") && !lp["tokens"].empty()));
          if (!out->text_left.empty() || lp_entries) send(out->text_left, lp);
          event(envelope(json::array({choice("", true, FinishReason(out->stats, out->stop_string))})));
          if (p->request.include_usage) {
            json last = envelope(json::array());
            last["usage"] = Usage(out->stats, out->completion_tokens, p->options.sampling.seed);
            event(last);
          }
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
}

}  // namespace specgen::serve
