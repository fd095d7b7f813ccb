#include "engine/cli/foreign_flags.h"

#include <initializer_list>
#include <string_view>

namespace specgen::cli {
namespace {

struct ForeignFlag {
  std::initializer_list<std::string_view> spellings;
  std::string_view advice;
};

const ForeignFlag kForeignFlags[] = {
    {{"-ngl", "--n-gpu-layers", "--gpu-layers", "-ngld", "--n-gpu-layers-draft", "--gpu-layers-draft"},
     "specgen places the layers itself: give it GPU memory with --vram-budget SIZE (e.g. "
     "--vram-budget 20GiB), or run on the CPU with --device cpu"},
    {{"-cnv", "--conversation", "-i", "--interactive", "-if", "--interactive-first"},
     "for a conversation run `specgen chat` (it takes the same -m, -md and sampling flags)"},
    {{"-fa", "--flash-attn"}, "specgen's attention is always fused; drop the flag"},
    {{"--mlock", "--no-mmap", "--mmap"},
     "specgen maps model files read-only and needs no memory-locking or mapping flags; drop the flag"},
    {{"-b", "--batch-size", "-ub", "--ubatch-size"},
     "specgen sizes its batches itself (a prompt is prefilled in one pass); drop the flag"},
    {{"--draft", "--draft-n"}, "the draft length is --draft-max K"},
    {{"--draft-min", "--draft-p-min"},
     "specgen picks the draft length each pass with --draft-adaptive (up to --draft-max); there is "
     "no lower bound to set"},
    {{"-cd", "--ctx-size-draft"}, "the draft shares the target's context (-c)"},
    {{"-s"}, "the seed is --seed N (-1 for a random one)"},
    {{"-tb", "--threads-batch"}, "one thread count, -t, serves prompt and generation"},
    {{"-sys", "--system-prompt"}, "the system prompt is `specgen chat --system TEXT`"},
    {{"--repeat-penalty", "--presence-penalty", "--frequency-penalty"},
     "specgen samples exactly from the target's distribution (--temp, --top-k, --top-p, --min-p); "
     "penalties are not offered"},
};

// Flags whose next argument is free text, which may start with '-'.
constexpr std::string_view kTextFlags[] = {"-p", "--prompt", "-f", "--file", "--system", "--prompt-ids"};

}  // namespace

std::optional<std::string> ForeignFlagMessage(std::span<char* const> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") break;
    bool text_flag = false;
    for (std::string_view t : kTextFlags) text_flag |= arg == t;
    if (text_flag) {
      ++i;
      continue;
    }
    const std::string_view name = arg.substr(0, arg.find('='));
    for (const ForeignFlag& f : kForeignFlags) {
      for (std::string_view s : f.spellings) {
        if (name == s) {
          return std::string(name) + " is a llama.cpp flag that specgen does not have: " +
                 std::string(f.advice);
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace specgen::cli
