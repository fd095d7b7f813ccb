#include "engine/cli/foreign_flags.h"

#include <filesystem>
#include <initializer_list>
#include <string_view>

namespace specgen::cli {
namespace {

// Said for llama.cpp's download flags and for `-m Org/Repo`.
constexpr std::string_view kNoDownload =
    "specgen does not download models: fetch the file first, e.g. `hf download Qwen/Qwen3-30B-A3B-GGUF "
    "Qwen3-30B-A3B-Q4_K_M.gguf --local-dir models` (huggingface_hub's CLI), then point -m at the file "
    "(-m models/Qwen3-30B-A3B-Q4_K_M.gguf) or at a downloaded Hugging Face directory";

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
    // llama.cpp's ways of keeping expert tensors in host RAM. specgen decides that itself from the
    // budget, and streams the experts that do not fit into a VRAM cache.
    {{"-ncmoe", "--n-cpu-moe", "-ncmoed", "--n-cpu-moe-draft", "-cmoe", "--cpu-moe", "-cmoed", "--cpu-moe-draft",
      "-ot", "--override-tensor", "-otd", "--override-tensor-draft"},
     "specgen keeps in host RAM whatever does not fit the GPU memory you give it: pass --vram-budget "
     "SIZE (e.g. --vram-budget 8GiB) and the experts that do not fit stream from pinned host RAM; "
     "`specgen plan -m MODEL -md DRAFT --vram-budget SIZE` shows what stays where and how fast it "
     "should run"},
    {{"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hfd", "-hfrd", "--hf-repo-draft", "-hft", "--hf-token",
      "-hfv", "--hf-repo-v", "-hffv", "--hf-file-v"},
     kNoDownload},
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
constexpr std::string_view kTextFlags[] = {"-p",    "--prompt", "-f",     "--file",
                                           "--system", "--prompt-ids", "--stop", "-r", "--reverse-prompt"};

bool IsTextFlag(std::string_view arg) {
  for (std::string_view t : kTextFlags) {
    if (arg == t) return true;
  }
  return false;
}

}  // namespace

std::optional<std::string> ForeignFlagMessage(std::span<char* const> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") break;
    if (IsTextFlag(arg)) {
      ++i;
      continue;
    }
    const std::string_view name = arg.substr(0, arg.find('='));
    // Inside `specgen chat` the conversation flags need no other command.
    if (!args.empty() && std::string_view(args[0]) == "chat" &&
        (name == "-cnv" || name == "--conversation" || name == "-i" || name == "--interactive" ||
         name == "-if" || name == "--interactive-first")) {
      return std::string(name) + " is a llama.cpp flag that specgen does not have: specgen chat is always "
             "interactive; drop the flag";
    }
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

std::optional<std::string> HubRepoMessage(std::span<char* const> args) {
  constexpr std::string_view kModelFlags[] = {"-m", "--model", "-md", "--model-draft"};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") break;
    if (IsTextFlag(arg)) {
      ++i;
      continue;
    }
    std::string_view flag = arg.substr(0, arg.find('='));
    std::string_view value;
    bool model_flag = false;
    for (std::string_view m : kModelFlags) model_flag |= flag == m;
    if (!model_flag) continue;
    if (flag.size() < arg.size()) {
      value = arg.substr(flag.size() + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    }
    // Org/Repo: one slash between two plain names. A path a user means starts with '.', '/' or '~',
    // has more parts, or exists; those are left to the loader's own errors.
    const size_t slash = value.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == value.size() ||
        value.find('/', slash + 1) != std::string_view::npos || value.find(':') != std::string_view::npos ||
        value[0] == '.' || value[0] == '~' || value.ends_with(".gguf") || value.ends_with(".safetensors")) {
      continue;  // a path the user means (a missing file is the loader's error)
    }
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(value), ec)) continue;
    return std::string(flag) + " " + std::string(value) +
           ": no such file or directory; it reads like a Hugging Face repository name, and " +
           std::string(kNoDownload);
  }
  return std::nullopt;
}

}  // namespace specgen::cli
