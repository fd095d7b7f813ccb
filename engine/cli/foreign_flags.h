// llama.cpp flags that specgen does not have. Users arrive with llama.cpp habits (-ngl 99, -cnv, -fa);
// left to the flag parser, `-ngl` reads as `-n gl` and `-fa` as `-f a`, and the error speaks of a
// flag the user never typed. These are recognised before parsing and answered with the specgen way.
#pragma once

#include <optional>
#include <span>
#include <string>

namespace specgen::cli {

// The message for the first llama.cpp-only flag among `args` (argv without the program name), or
// nullopt. Values of the flags that take free text (-p, -f, --system, ...) are not flags and are
// skipped; so is everything after `--`.
std::optional<std::string> ForeignFlagMessage(std::span<char* const> args);

// For a model flag (-m, -md and their long names) whose value reads like a Hugging Face repository
// (`Org/Repo`) and is no file or directory here: a message saying that specgen does not download and
// how to point -m at a downloaded file. nullopt otherwise.
std::optional<std::string> HubRepoMessage(std::span<char* const> args);

}  // namespace specgen::cli
