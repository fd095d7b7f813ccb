// Server: `specgen serve`'s HTTP side, OpenAI's API over cpp-httplib: POST /v1/completions and
// /v1/chat/completions (whole or as server-sent events), GET /v1/models and GET /health. A request is
// parsed and checked (every bad input a 4xx naming what is wrong), tokenized (chat through the
// model's template), admitted to the SequencePool (503 with Retry-After past its queue) and
// generated; its text is cut at stop strings and streamed between steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/sampling_params.h"
#include "engine/serve/sequence_pool.h"
#include "engine/speculative/speculative_loop.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace specgen::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";  // --host; loopback unless widened
  int port = 8080;                 // --port; 0: any free port (Bind returns it)
  std::string api_key;             // --api-key; empty: none asked
  std::string model_id;            // the name /v1/models lists and requests may give
  // Requests without max_tokens get this many (-n); negative: up to the context's end.
  int64_t default_max_tokens = 128;
  // What requests leave out: sampling (--temp ...); and the server's own: draft bound, adaptive
  // lengths, accept rule, end-of-generation ids.
  SpeculativeOptions base;
  // The chat template; none: /v1/chat/completions answers 400 with chat_error.
  std::optional<ChatFormat> chat_format;
  std::string chat_error;
  int32_t end_of_turn_id = -1;  // the template's end of an assistant turn, an end id for chats
  int http_threads = 0;         // 0: parallel + queue + 4 (every admitted request holds a thread)
};

class Server {
 public:
  // Neither `tokenizer` nor `pool` is owned; both must outlive the server.
  Server(ServerConfig config, const Tokenizer* tokenizer, SequencePool* pool);
  ~Server();

  // Binds the listening socket; returns the port (the one chosen with port 0).
  absl::StatusOr<int> Bind();
  // Serves until Stop(); Bind first.
  absl::Status Listen();
  // Stops Listen from another thread (a signal).
  void Stop();

 private:
  struct Prepared;
  void Completion(const httplib::Request& req, httplib::Response& res, bool chat);
  // Parses and checks the request, tokenizes it and takes a place in the pool; the error's code is
  // the HTTP status.
  absl::StatusOr<std::shared_ptr<Prepared>> Prepare(const httplib::Request& req, bool chat);
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;

  ServerConfig config_;
  const Tokenizer* tok_;
  SequencePool* pool_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<uint64_t> next_id_{1};
  int64_t created_;  // the model's `created` in /v1/models: when the server started
};

}  // namespace specgen::serve
