// `specgen serve`: an OpenAI-compatible HTTP server (engine/serve/server.h) over the model pair that
// generate's flags load. Listens on 127.0.0.1 unless --host widens it; prints the address it listens
// on as one line on stdout once it does (port 0 picks a free one: tests read it there); SIGINT or
// SIGTERM stop it.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "engine/cli/command.h"
#include "engine/cli/generation_flags.h"
#include "engine/core/status_macros.h"
#include "engine/serve/sequence_pool.h"
#include "engine/serve/server.h"
#include "engine/tokenizer/chat_template.h"

namespace specgen::cli {
namespace {

struct ServeFlags {
  GenerationFlags common;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 1;
  int queue = 16;
  std::string api_key;
  std::string alias;
  std::string chat_template = "auto";
};

// The name clients give as "model": --alias, else the last component of -m.
std::string ModelId(const ServeFlags& flags) {
  if (!flags.alias.empty()) return flags.alias;
  std::filesystem::path p(flags.common.model);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string().empty() ? flags.common.model : p.filename().string();
}

absl::Status RunServe(const ServeFlags& flags) {
  RETURN_IF_ERROR(ValidateGenerationFlags(flags.common));
  if (flags.port < 0 || flags.port > 65535) return InvalidArgument("--port ", flags.port, ": not a port (0-65535)");
  if (flags.parallel < 1 || flags.parallel > 256) {
    return InvalidArgument("--parallel ", flags.parallel, ": must be in [1, 256]");
  }
  if (flags.queue < 0 || flags.queue > 4096) return InvalidArgument("--queue ", flags.queue, ": must be in [0, 4096]");
  std::optional<ChatFormat> named;
  if (flags.chat_template != "auto") {
    ASSIGN_OR_RETURN(named, ParseChatFormat(flags.chat_template));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<LoadedPair> pair, LoadPair(flags.common));
  if (pair->target_tok == nullptr) {
    return InvalidArgument("-m ", flags.common.model, ": no tokenizer found; serve needs one for text");
  }
  serve::ServerConfig config;
  config.host = flags.host;
  config.port = flags.port;
  config.api_key = flags.api_key;
  config.model_id = ModelId(flags);
  config.default_max_tokens = flags.common.n_predict;
  config.base = pair->options;
  if (named) {
    config.chat_format = named;
  } else if (absl::StatusOr<ChatFormat> f = DetectChatFormat(*pair->target_tok); f.ok()) {
    config.chat_format = *f;
  } else {
    config.chat_error = std::string(f.status().message());
  }
  // --ignore-eos: no end token at all, the template's end of turn included.
  if (config.chat_format && !flags.common.ignore_eos) {
    const std::string eot = EndOfTurnText(*config.chat_format, *pair->target_tok);
    if (!eot.empty()) config.end_of_turn_id = pair->target_tok->TokenId(eot);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<serve::SequencePool> pool,
                   serve::SequencePool::Create(pair->cuda, pair->target.get(), pair->draft.get(),
                                               {.parallel = flags.parallel, .queue = flags.queue}));
  serve::Server server(config, pair->target_tok.get(), pool.get());

  // SIGINT/SIGTERM end the server through a thread of their own (sigwait): blocked here, before any
  // server thread starts, so every thread inherits the mask. A client gone mid-write is an error
  // returned by the write, not SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ASSIGN_OR_RETURN(const int port, server.Bind());
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    server.Stop();
  });
  std::printf("specgen serve: listening on http://%s:%d (model '%s', %s, --parallel %d, --queue %d)\n",
              flags.host.find(':') != std::string::npos ? ("[" + flags.host + "]").c_str() : flags.host.c_str(),
              port, config.model_id.c_str(),
              config.chat_format ? std::string(ChatFormatName(*config.chat_format)).c_str() : "no chat template",
              flags.parallel, flags.queue);
  std::fflush(stdout);
  const absl::Status status = server.Listen();
  pthread_kill(signals.native_handle(), SIGUSR1);  // a Listen that ended by itself: free the thread
  signals.join();
  std::fprintf(stderr, "specgen serve: stopped\n");
  return status;
}

Registrar kServe{
    {"serve", "Serve the model pair over HTTP with OpenAI's API (completions, chat, streaming)",
     [](CLI::App& app) {
       auto f = std::make_shared<ServeFlags>();
       AddGenerationFlags(app, &f->common);
       app.add_option("--host", f->host, "address to listen on (default loopback only; 0.0.0.0: all)")
           ->capture_default_str();
       app.add_option("--port", f->port, "TCP port; 0 picks a free one (printed)")->capture_default_str();
       app.add_option("--parallel", f->parallel, "sequences generating at once")->capture_default_str();
       app.add_option("--queue", f->queue,
                      "requests that may wait for a sequence; past them: 503 with Retry-After")
           ->capture_default_str();
       app.add_option("--api-key", f->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
       app.add_option("--alias", f->alias, "the model's name in the API (default: -m's last component)");
       app.add_option("--chat-template", f->chat_template, "auto, chatml, llama3, mistral or gemma")
           ->capture_default_str();
       return [f]() { return RunServe(*f); };
     }}};

}  // namespace
}  // namespace specgen::cli
