// Text <-> token ids exactly as the model's own (Hugging Face / llama.cpp) tokenizer does it.
// Two kinds: byte-level BPE ("bpe": GPT-2 family, Qwen2/Qwen3, Llama-3) and SentencePiece-style BPE
// with byte fallback ("spm": Llama-2, Mistral, Mixtral). A TokenizerSpec holds what either file
// format (tokenizer.json, GGUF tokenizer.ggml.*) says; Tokenizer::Create validates it and builds the
// lookup structures. See docs/formats.md §5.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace specgen {

enum class TokenizerKind { kBpe, kSpm };
const char* TokenizerKindName(TokenizerKind kind);  // "bpe" / "spm"

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Where SentencePiece-style tokenizers put the leading '▁' on a run of text between special tokens.
enum class SpacePrefix {
  kEverySegment,  // HF Prepend normalizer ("legacy" Llama files) and llama.cpp: every text segment
  kFirstSegment,  // HF Metaspace prepend_scheme "first": only the first text segment (not after a special)
  kAlways,        // HF Metaspace prepend_scheme "always": every segment not already starting with ▁
  kNone,
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kBpe;
  std::vector<std::string> tokens;  // id -> vocabulary text (byte-level mapped for bpe, '▁' for spm)
  std::vector<TokenType> types;     // empty: all normal (byte tokens <0xNN> are detected for spm)
  std::vector<float> scores;        // spm merge scores (used when `merges` is empty)
  std::vector<std::pair<std::string, std::string>> merges;  // rank = index
  // bpe
  PreTokenizerKind pre_tokenizer = PreTokenizerKind::kQwen2;
  bool nfc = false;            // NFC-normalize text segments first (Qwen2's normalizer)
  bool ignore_merges = false;  // a word that is itself a token is taken whole (Llama-3)
  // spm
  SpacePrefix space_prefix = SpacePrefix::kEverySegment;
  bool split_on_space = false;  // HF Metaspace split=true: BPE never merges across '▁' words
  bool byte_fallback = true;
  // specials
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> eog_ids;  // extra end-of-generation ids (eot, eom, <|im_end|>, ...)
  std::string chat_template;
};

struct EncodeOptions {
  bool add_special = true;    // BOS/EOS as the tokenizer's add_bos/add_eos say
  bool parse_special = true;  // control tokens written in the text become their ids
};
struct DecodeOptions {
  bool render_special = true;  // control tokens (BOS, <|im_end|>, ...) appear as their text
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);

  // Invalid UTF-8 is an InvalidArgument error naming the byte offset.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, EncodeOptions options = {}) const;
  // Text of the ids; invalid UTF-8 the ids produce (a character cut in half) becomes U+FFFD.
  // Out-of-range ids are an error.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;
  // The raw bytes one token contributes to decoded text (no leading-space stripping); empty for a
  // control token unless render_special. `id` must be valid.
  std::string TokenBytes(int32_t id, bool render_special) const;
  // Whether decoding strips one leading space from the text (SentencePiece's prepended '▁').
  bool StripsLeadingSpace() const;

  TokenizerKind kind() const { return spec_.kind; }
  const char* kind_name() const { return TokenizerKindName(spec_.kind); }
  int32_t vocab_size() const { return static_cast<int32_t>(spec_.tokens.size()); }
  bool IsValid(int32_t id) const { return id >= 0 && id < vocab_size(); }
  const std::string& TokenText(int32_t id) const { return spec_.tokens[id]; }
  TokenType Type(int32_t id) const { return spec_.types[id]; }
  int32_t TokenId(std::string_view text) const;  // -1 when absent
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t unk_id() const { return spec_.unk_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  bool add_bos() const { return spec_.add_bos; }
  bool add_eos() const { return spec_.add_eos; }
  bool IsEog(int32_t id) const;  // EOS, <|im_end|>, <|endoftext|>, <|eot_id|>, ...
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  const std::string& chat_template() const { return spec_.chat_template; }
  const TokenizerSpec& spec() const { return spec_; }

 private:
  explicit Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {}
  absl::Status Build();

  struct Segment {
    std::string_view text;
    int32_t token = -1;  // >= 0: a special token matched in the text
    size_t offset = 0;   // byte offset in the original text
  };
  std::vector<Segment> SplitSpecial(std::string_view text, bool parse_special) const;
  absl::Status EncodeBpeSegment(std::string_view text, std::vector<int32_t>* out) const;
  absl::Status EncodeSpmSegment(std::string_view text, bool first, std::vector<int32_t>* out) const;
  // BPE by merge rank over initial symbol ids (byte-level and spm-with-merges).
  void MergeByRank(std::vector<int32_t>* symbols) const;
  // llama.cpp's SentencePiece merge by score over characters; appends ids.
  void MergeByScore(std::string_view text, std::vector<int32_t>* out) const;
  void AppendByteFallback(std::string_view chars, std::vector<int32_t>* out) const;

  TokenizerSpec spec_;
  absl::flat_hash_map<std::string, int32_t> token_to_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merge_ranks_;
  // Specials matchable in text, longest first, bucketed by first byte.
  std::vector<std::vector<int32_t>> specials_by_first_byte_;
  int32_t byte_tokens_[256];  // spm <0xNN> ids, -1 when absent
  std::vector<int32_t> eog_ids_;

  // Repeated words (bpe) are looked up rather than merged again.
  mutable std::mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace specgen
