// specgen: speculative decoding of Mixture-of-Experts models under partial offload.
// The subcommands live in cmd_*.cc; this file only parses and dispatches, and turns a Status into a
// message on stderr and exit status 1.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <cstdio>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

#include "CLI/CLI.hpp"
#include "engine/cli/command.h"
#include "engine/cli/foreign_flags.h"
#include "engine/core/str_cat.h"

namespace specgen::cli {
std::vector<Command>& Registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace specgen::cli

namespace {

// Runs a command and turns any exception that escapes it into an error: every failure a user can
// provoke is a message and exit status 1, never an abort with a core dump.
absl::Status RunGuarded(const std::function<absl::Status()>& run) {
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "out of memory (a smaller -c, a smaller model or fewer threads may fit)");
  } catch (const std::system_error& e) {
    return absl::InternalError(specgen::Cat("system error: ", e.what(), " (", e.code().message(), ")"));
  } catch (const std::exception& e) {
    return absl::InternalError(specgen::Cat("unexpected error: ", e.what()));
  } catch (...) {
    return absl::InternalError("unexpected error of unknown type");
  }
}

// CLI11 reads a 64-bit integer option with strtoll, which clamps a number past its range to the
// largest value without a word (-c 99999999999999999999 would be -c 9223372036854775807). Every
// integer option's values as written are checked here: out of range is an error naming the flag.
std::optional<std::string> OutOfRangeInteger(const CLI::App& sub) {
  for (const CLI::Option* opt : sub.get_options()) {
    const std::string type = opt->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    // --seed parses its own text (an unsigned 64-bit seed, or -1) and names what it refuses.
    if (opt->check_lname("seed")) continue;
    for (const std::string& value : opt->results()) {
      int64_t parsed = 0;
      const char* end = value.data() + value.size();
      const auto [ptr, ec] = std::from_chars(value.data(), end, parsed);
      if (ec == std::errc::result_out_of_range) {
        return specgen::Cat(opt->get_name(), " ", value, ": out of range (at most ",
                            std::numeric_limits<int64_t>::max(), ")");
      }
    }
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  using specgen::cli::Command;
  CLI::App app{
      "specgen: runs Mixture-of-Experts language models too large for one GPU at interactive speed, by\n"
      "speculative decoding under partial offload. A small resident draft proposes tokens; the large\n"
      "target verifies them in one batched pass. Output is exactly the target's.\n\n"
      "MODEL is a GGUF file, a Hugging Face directory (config.json, *.safetensors, tokenizer.json), or\n"
      "synth:PRESET (random weights of a real model's shape, e.g. synth:qwen3-30b-a3b).",
      "specgen"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "specgen 0.1");
  std::vector<Command> commands = specgen::cli::Registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<absl::Status()>> runners;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runners[sub] = c.setup(*sub);
  }
  // llama.cpp's multi-letter single-dash flags, which CLI11 would read as `-m d`: spelled long.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-md") argv[i] = const_cast<char*>("--model-draft");
    if (arg == "-ctk") argv[i] = const_cast<char*>("--cache-type-k");
    if (arg == "-ctv") argv[i] = const_cast<char*>("--cache-type-v");
  }
  // A first word that is no subcommand: named, with the list (CLI11 would only say that a
  // subcommand is required or that the word was not expected).
  if (argc > 1 && argv[1][0] != '-') {
    const std::string_view word = argv[1];
    std::string names;
    bool known = false;
    for (const Command& c : commands) {
      known |= c.name == word;
      names += names.empty() ? c.name : ", " + c.name;
    }
    if (!known) {
      std::fprintf(stderr, "specgen: error: unknown command '%s'; the commands are: %s (specgen --help)\n",
                   argv[1], names.c_str());
      return 1;
    }
  }
  if (auto message = specgen::cli::ForeignFlagMessage({argv + 1, static_cast<size_t>(argc - 1)})) {
    std::fprintf(stderr, "specgen%s%s: error: %s\n", argc > 1 && argv[1][0] != '-' ? " " : "",
                 argc > 1 && argv[1][0] != '-' ? argv[1] : "", message->c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; a parse error reads like every other error and exits 1.
    if (e.get_exit_code() == 0) return app.exit(e);
    const bool sub = argc > 1 && argv[1][0] != '-';
    std::fprintf(stderr, "specgen%s%s: error: %s (see specgen %s--help)\n", sub ? " " : "",
                 sub ? argv[1] : "", e.what(), sub ? (std::string(argv[1]) + " ").c_str() : "");
    return 1;
  }
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    if (std::optional<std::string> bad = OutOfRangeInteger(*sub)) {
      std::fprintf(stderr, "specgen %s: error: %s\n", sub->get_name().c_str(), bad->c_str());
      return 1;
    }
    absl::Status status = RunGuarded(run);
    if (!status.ok()) {
      std::fprintf(stderr, "specgen %s: error: %s\n", sub->get_name().c_str(),
                   std::string(status.message()).c_str());
      return 1;
    }
    return 0;
  }
  return 1;
}
