// Pre-tokenizers: split text into the "words" BPE runs on. Hand-written scanners over code points that
// reproduce, match for match, the regexes of HF tokenizers' Split pre-tokenizers (no regex library;
// leftmost alternative wins, as in Oniguruma's backtracking). See docs/formats.md §5.1.
#pragma once

#include <string_view>
#include <vector>

namespace specgen {

enum class PreTokenizerKind {
  // Qwen2 / Qwen2.5 / Qwen3:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  // Llama-3: the same with \p{N}{1,3}.
  kLlama3,
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // o200k (GPT-4o; gpt-oss's o200k_harmony): words split at case changes, a contraction kept on its
  // word, digits in groups of 1-3, '/' joining a punctuation run's trailing newlines:
  // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  // \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kO200k,
};

// The regex text each kind reproduces (as tokenizer.json spells it), for matching configs.
std::string_view PreTokenizerRegex(PreTokenizerKind kind);

// Splits valid UTF-8 `text` into consecutive pieces covering all of it (views into `text`).
std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace specgen
