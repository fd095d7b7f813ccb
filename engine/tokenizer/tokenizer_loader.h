// Building a Tokenizer from the files models come with: Hugging Face tokenizer.json (+ the
// tokenizer_config.json next to it for special tokens, add_bos_token and the chat template) and GGUF
// metadata (tokenizer.ggml.*), and writing a tokenizer into GGUF metadata for `specgen convert`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/io/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {

// Parses tokenizer.json text; `config_json` is tokenizer_config.json's text or empty. `name` is
// used in error messages (usually the path).
absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view tokenizer_json,
                                                 std::string_view config_json, std::string_view name);
// Reads `path` (a tokenizer.json) and, when present, tokenizer_config.json from the same folder.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path);

absl::StatusOr<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& gguf);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromGguf(const GgufFile& gguf);

// The model's tokenizer: `path` is a GGUF file, a Hugging Face model folder (its tokenizer.json), or a
// tokenizer.json file itself.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& path);

// The same, for callers where a model without a tokenizer is fine (synth: presets, bare checkpoints):
// nullptr when the model carries none, an error when it carries one that cannot be read.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerIfPresent(const std::string& path);

// Writes tokenizer.ggml.* (and tokenizer.chat_template) so that TokenizerSpecFromGguf, and llama.cpp,
// read the same tokenizer back.
absl::Status AddTokenizerToGguf(const Tokenizer& tokenizer, GgufWriter* writer);

}  // namespace specgen
