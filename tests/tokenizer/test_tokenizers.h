// Small hand-built tokenizer.json files for the tokenizer tests: a byte-level BPE with the Qwen2
// pre-tokenizer and ChatML specials, and a SentencePiece-style BPE with byte fallback.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace specgen::testing_tokenizers {

using Merges = std::vector<std::pair<std::string, std::string>>;

// Vocabulary: the 256 byte symbols (id = byte's rank in map order, i.e. ids 0..255 in byte order),
// then one token per merge, then <|endoftext|>, <|im_start|>, <|im_end|> (special) and "<|im"
// (a non-special added token). Merges are given in raw text (spaces as ' '), mapped here.
std::string BpeTokenizerJson(const Merges& merges);
std::string BpeTokenizerConfig();  // eos <|im_end|>, ChatML template, add_bos false

// Vocabulary: <unk> <s> </s>, <0x00>..<0xFF>, the characters "▁helowrd", then merge results.
// Legacy Llama normalizer (Prepend ▁, Replace ' ' -> ▁), byte fallback, add_bos via config.
std::string SpmTokenizerJson();
std::string SpmTokenizerConfig();

std::unique_ptr<Tokenizer> MakeBpe(const Merges& merges);
std::unique_ptr<Tokenizer> MakeSpm();

}  // namespace specgen::testing_tokenizers
