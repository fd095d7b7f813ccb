// GGUF tokenizer.ggml.* metadata <-> TokenizerSpec, and LoadTokenizerForModel.
#include <filesystem>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen {
namespace {

constexpr char kNfcKey[] = "specgen.tokenizer.nfc";

struct PreName {
  const char* name;
  PreTokenizerKind kind;
  bool ignore_merges;  // llama.cpp sets it for these names: a word in the vocabulary is one token
};
// tokenizer.ggml.pre values whose regex we implement (llama.cpp's LLAMA_VOCAB_PRE_TYPE names, as
// llama-vocab.cpp maps them). GLM-4.x's "glm4" (and ChatGLM's "chatglm-bpe") is Llama-3's regex
// without ignore_merges; gpt-oss's o200k_harmony is "gpt-4o".
constexpr PreName kPreNames[] = {
    {"qwen2", PreTokenizerKind::kQwen2, false},      {"qwen35", PreTokenizerKind::kQwen2, false},
    {"llama-bpe", PreTokenizerKind::kLlama3, true},  {"llama3", PreTokenizerKind::kLlama3, true},
    {"glm4", PreTokenizerKind::kLlama3, false},      {"chatglm-bpe", PreTokenizerKind::kLlama3, false},
    {"gpt-2", PreTokenizerKind::kGpt2, false},       {"default", PreTokenizerKind::kGpt2, false},
    {"gpt-4o", PreTokenizerKind::kO200k, false},
};

// The name a reader maps back to this regex and ignore_merges: Llama-3's regex without ignore_merges
// (GLM's tokenizer.json) is written "glm4", so it does not come back with ignore_merges set.
const char* PreNameOf(PreTokenizerKind kind, bool ignore_merges) {
  switch (kind) {
    case PreTokenizerKind::kQwen2: return "qwen2";
    case PreTokenizerKind::kLlama3: return ignore_merges ? "llama-bpe" : "glm4";
    case PreTokenizerKind::kGpt2: return "gpt-2";
    case PreTokenizerKind::kO200k: return "gpt-4o";
  }
  return "default";
}

absl::StatusOr<int32_t> OptionalId(const GgufFile& g, const char* key, int64_t n) {
  const GgufValue* v = g.Find(key);
  if (!v) return -1;
  const auto id = v->AsInt();
  if (!id) return DataLoss(g.path(), ": ", key, " is not an integer");
  if (*id < 0 || *id >= n) return DataLoss(g.path(), ": ", key, " = ", *id, " is outside the vocabulary of ", n);
  return static_cast<int32_t>(*id);
}

std::optional<bool> OptionalBool(const GgufFile& g, const char* key) {
  const GgufValue* v = g.Find(key);
  return v ? v->AsBool() : std::nullopt;
}

}  // namespace

absl::StatusOr<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& g) {
  const std::string& name = g.path();
  const GgufValue* model_v = g.Find("tokenizer.ggml.model");
  if (!model_v || !model_v->AsString()) return NotFound(name, ": no tokenizer.ggml.model (the file carries no tokenizer)");
  const std::string& model = *model_v->AsString();
  // llama.cpp's words for a file without a vocabulary (its writers put "none" in weight-only files).
  if (model == "none" || model == "no_vocab") {
    return NotFound(name, ": tokenizer.ggml.model is '", model, "' (the file carries no tokenizer)");
  }
  TokenizerSpec spec;
  if (model == "gpt2") {
    spec.kind = TokenizerKind::kBpe;
  } else if (model == "llama") {
    spec.kind = TokenizerKind::kSpm;
  } else {
    return Unimplemented(name, ": tokenizer.ggml.model '", model, "' is not supported (gpt2 or llama)");
  }

  const GgufValue* tokens_v = g.Find("tokenizer.ggml.tokens");
  const GgufArray* tokens = tokens_v ? tokens_v->AsArray() : nullptr;
  if (!tokens || tokens->items.empty()) return DataLoss(name, ": tokenizer.ggml.tokens is missing or empty");
  const int64_t n = static_cast<int64_t>(tokens->items.size());
  spec.tokens.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const std::string* s = tokens->items[i].AsString();
    if (!s) return DataLoss(name, ": tokenizer.ggml.tokens[", i, "] is not a string");
    spec.tokens.push_back(*s);
  }
  if (const GgufValue* v = g.Find("tokenizer.ggml.token_type")) {
    const GgufArray* a = v->AsArray();
    if (!a || static_cast<int64_t>(a->items.size()) != n) {
      return DataLoss(name, ": tokenizer.ggml.token_type must be an array of ", n, " integers");
    }
    spec.types.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      const auto t = a->items[i].AsInt();
      if (!t || *t < 1 || *t > 6) return DataLoss(name, ": tokenizer.ggml.token_type[", i, "] is not a token type 1..6");
      spec.types.push_back(static_cast<TokenType>(*t));
    }
  }
  if (const GgufValue* v = g.Find("tokenizer.ggml.scores")) {
    const GgufArray* a = v->AsArray();
    if (!a || static_cast<int64_t>(a->items.size()) != n) {
      return DataLoss(name, ": tokenizer.ggml.scores must be an array of ", n, " floats");
    }
    spec.scores.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      const auto f = a->items[i].AsFloat();
      if (!f) return DataLoss(name, ": tokenizer.ggml.scores[", i, "] is not a number");
      spec.scores.push_back(static_cast<float>(*f));
    }
  }
  if (const GgufValue* v = g.Find("tokenizer.ggml.merges")) {
    const GgufArray* a = v->AsArray();
    if (!a) return DataLoss(name, ": tokenizer.ggml.merges is not an array");
    spec.merges.reserve(a->items.size());
    for (size_t r = 0; r < a->items.size(); ++r) {
      const std::string* s = a->items[r].AsString();
      const size_t sp = s ? s->find(' ', 1) : std::string::npos;
      if (sp == std::string::npos) return DataLoss(name, ": tokenizer.ggml.merges[", r, "] is not \"A B\"");
      spec.merges.emplace_back(s->substr(0, sp), s->substr(sp + 1));
    }
  }
  if (spec.kind == TokenizerKind::kBpe) {
    if (spec.merges.empty()) return DataLoss(name, ": a gpt2 tokenizer needs tokenizer.ggml.merges");
    std::string pre = "default";
    if (const GgufValue* v = g.Find("tokenizer.ggml.pre"); v && v->AsString()) pre = *v->AsString();
    bool known = false;
    bool ignore_merges = false;
    for (const PreName& p : kPreNames) {
      if (pre == p.name) {
        spec.pre_tokenizer = p.kind;
        ignore_merges = p.ignore_merges;
        known = true;
      }
    }
    if (!known) {
      return Unimplemented(name, ": tokenizer.ggml.pre '", pre,
                           "' is not supported (qwen2, qwen35, llama-bpe, llama3, glm4, chatglm-bpe, gpt-2, gpt-4o)");
    }
    // llama.cpp skips the NFC step; HF applies it for Qwen2. We follow HF: NFC text is unchanged.
    spec.nfc = OptionalBool(g, kNfcKey).value_or(spec.pre_tokenizer == PreTokenizerKind::kQwen2);
    spec.ignore_merges = ignore_merges;
  } else {
    if (spec.scores.empty() && spec.merges.empty()) {
      return DataLoss(name, ": a llama tokenizer needs tokenizer.ggml.scores or tokenizer.ggml.merges");
    }
    // llama.cpp prefixes '▁' to every text segment unless add_space_prefix is false.
    const auto asp = OptionalBool(g, "tokenizer.ggml.add_space_prefix");
    spec.space_prefix = asp.value_or(true) ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
    spec.byte_fallback = true;
  }
  ASSIGN_OR_RETURN(spec.bos_id, OptionalId(g, "tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(spec.eos_id, OptionalId(g, "tokenizer.ggml.eos_token_id", n));
  ASSIGN_OR_RETURN(spec.unk_id, OptionalId(g, "tokenizer.ggml.unknown_token_id", n));
  ASSIGN_OR_RETURN(spec.pad_id, OptionalId(g, "tokenizer.ggml.padding_token_id", n));
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    ASSIGN_OR_RETURN(int32_t id, OptionalId(g, key, n));
    if (id >= 0) spec.eog_ids.push_back(id);
  }
  // llama.cpp defaults: add BOS for SentencePiece vocabularies, not for byte-level ones.
  spec.add_bos = OptionalBool(g, "tokenizer.ggml.add_bos_token").value_or(spec.kind == TokenizerKind::kSpm);
  spec.add_eos = OptionalBool(g, "tokenizer.ggml.add_eos_token").value_or(false);
  if (spec.add_bos && spec.bos_id < 0) return DataLoss(name, ": add_bos_token is set but there is no bos_token_id");
  if (spec.add_eos && spec.eos_id < 0) return DataLoss(name, ": add_eos_token is set but there is no eos_token_id");
  if (const GgufValue* v = g.Find("tokenizer.chat_template"); v && v->AsString()) spec.chat_template = *v->AsString();
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromGguf(const GgufFile& gguf) {
  ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromGguf(gguf));
  auto tok = Tokenizer::Create(std::move(spec));
  if (!tok.ok()) return absl::Status(tok.status().code(), Cat(gguf.path(), ": ", tok.status().message()));
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path json = fs::path(path) / "tokenizer.json";
    if (!fs::exists(json, ec)) return NotFound(path, ": model folder has no tokenizer.json");
    return LoadTokenizerJson(json.string());
  }
  if (!fs::exists(path, ec)) return NotFound(path, ": no such file or folder");
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return LoadTokenizerJson(path);
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
  return LoadTokenizerFromGguf(*gguf);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerIfPresent(const std::string& path) {
  if (path.starts_with("synth:")) return std::unique_ptr<Tokenizer>();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizerForModel(path);
  if (absl::IsNotFound(tok.status())) return std::unique_ptr<Tokenizer>();
  return tok;
}

absl::Status AddTokenizerToGguf(const Tokenizer& tok, GgufWriter* w) {
  const TokenizerSpec& s = tok.spec();
  const bool bpe = s.kind == TokenizerKind::kBpe;
  // GGUF (and llama.cpp) only know "prefix '▁' to every text segment" or "never"; HF's Metaspace
  // prepend_scheme first/always is written as the former, which differs only after a special token
  // inside the text.
  w->SetString("tokenizer.ggml.model", bpe ? "gpt2" : "llama");
  if (bpe) {
    w->SetString("tokenizer.ggml.pre", PreNameOf(s.pre_tokenizer, s.ignore_merges));
    // Readers assume NFC for qwen2 only; say so when this tokenizer differs (llama.cpp ignores it).
    if (s.nfc != (s.pre_tokenizer == PreTokenizerKind::kQwen2)) w->SetBool(kNfcKey, s.nfc);
  }
  w->SetStringArray("tokenizer.ggml.tokens", s.tokens);
  std::vector<int32_t> types(s.types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(s.types[i]);
  w->SetI32Array("tokenizer.ggml.token_type", std::move(types));
  if (!s.merges.empty()) {
    std::vector<std::string> merges;
    merges.reserve(s.merges.size());
    for (const auto& [a, b] : s.merges) merges.push_back(Cat(a, " ", b));
    w->SetStringArray("tokenizer.ggml.merges", std::move(merges));
  }
  if (!bpe) {
    std::vector<float> scores = s.scores;
    if (scores.empty()) {
      // Scores that make llama.cpp's merge-by-score follow the merge ranks: the token a merge makes
      // scores -rank, so earlier merges win.
      scores.assign(s.tokens.size(), 0.0f);
      std::vector<bool> set(s.tokens.size(), false);
      for (size_t r = 0; r < s.merges.size(); ++r) {
        const int32_t id = tok.TokenId(s.merges[r].first + s.merges[r].second);
        if (id >= 0 && !set[id]) {
          scores[id] = -static_cast<float>(r);
          set[id] = true;
        }
      }
    }
    w->SetF32Array("tokenizer.ggml.scores", std::move(scores));
    w->SetBool("tokenizer.ggml.add_space_prefix", s.space_prefix != SpacePrefix::kNone);
  }
  if (s.bos_id >= 0) w->SetU32("tokenizer.ggml.bos_token_id", s.bos_id);
  if (s.eos_id >= 0) w->SetU32("tokenizer.ggml.eos_token_id", s.eos_id);
  if (s.unk_id >= 0) w->SetU32("tokenizer.ggml.unknown_token_id", s.unk_id);
  if (s.pad_id >= 0) w->SetU32("tokenizer.ggml.padding_token_id", s.pad_id);
  w->SetBool("tokenizer.ggml.add_bos_token", s.add_bos);
  w->SetBool("tokenizer.ggml.add_eos_token", s.add_eos);
  if (!s.chat_template.empty()) w->SetString("tokenizer.chat_template", s.chat_template);
  return absl::OkStatus();
}

}  // namespace specgen
