// tokenizer.json + tokenizer_config.json -> TokenizerSpec.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss(path, ": read error");
  return ss.str();
}

const json* Get(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string GetString(const json& j, const char* key) {
  const json* v = Get(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::string TokenContent(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return GetString(*v, "content");
  return {};
}

// Visits a component and, for a Sequence, its members (normalizers / pretokenizers / decoders).
template <typename F>
void ForEachComponent(const json* j, F&& f) {
  if (!j || !j->is_object()) return;
  const std::string type = GetString(*j, "type");
  if (type == "Sequence") {
    for (const char* key : {"normalizers", "pretokenizers", "decoders", "processors"}) {
      if (const json* list = Get(*j, key); list && list->is_array()) {
        for (const json& c : *list) ForEachComponent(&c, f);
      }
    }
    return;
  }
  f(*j, type);
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view tokenizer_json,
                                                 std::string_view config_json, std::string_view name) {
  const json root = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (root.is_discarded()) return DataLoss(name, ": not valid JSON");
  if (!root.is_object()) return DataLoss(name, ": top level is not a JSON object");
  const json* model = Get(root, "model");
  if (!model || !model->is_object()) return DataLoss(name, ": no \"model\" object");
  const std::string model_type = GetString(*model, "type");
  if (model_type != "BPE") {
    return Unimplemented(name, ": tokenizer model type '", model_type.empty() ? "(none)" : model_type,
                         "' is not supported (only BPE: byte-level or SentencePiece-style)");
  }

  TokenizerSpec spec;
  // Vocabulary: model.vocab plus added_tokens; ids may leave gaps, filled with unused placeholders.
  const json* vocab = Get(*model, "vocab");
  if (!vocab || !vocab->is_object()) return DataLoss(name, ": model.vocab is not an object");
  std::map<int64_t, std::pair<std::string, TokenType>> by_id;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) return DataLoss(name, ": vocab entry '", it.key(), "' has no integer id");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 30)) return DataLoss(name, ": vocab entry '", it.key(), "' has id ", id);
    by_id[id] = {it.key(), TokenType::kNormal};
  }
  if (const json* added = Get(root, "added_tokens")) {
    if (!added->is_array()) return DataLoss(name, ": added_tokens is not an array");
    for (const json& t : *added) {
      const json* id = Get(t, "id");
      const json* content = Get(t, "content");
      if (!id || !id->is_number_integer() || !content || !content->is_string()) {
        return DataLoss(name, ": an added_tokens entry lacks an integer id or a string content");
      }
      const int64_t i = id->get<int64_t>();
      if (i < 0 || i >= (1 << 30)) return DataLoss(name, ": added token id ", i, " is out of range");
      const json* special = Get(t, "special");
      const bool is_special = special && special->is_boolean() && special->get<bool>();
      by_id[i] = {content->get<std::string>(), is_special ? TokenType::kControl : TokenType::kUserDefined};
    }
  }
  if (by_id.empty()) return DataLoss(name, ": the vocabulary is empty");
  const int64_t n = by_id.rbegin()->first + 1;
  // Real vocabularies are dense; a huge id with few tokens is a corrupt (or hostile) file, and would
  // make us allocate placeholders for every missing id.
  constexpr int64_t kMaxUnusedIds = 1 << 16;
  if (n - static_cast<int64_t>(by_id.size()) > kMaxUnusedIds) {
    return DataLoss(name, ": token ids reach ", n - 1, " but only ", by_id.size(),
                    " tokens are defined; the vocabulary is corrupt");
  }
  spec.tokens.resize(n);
  spec.types.assign(n, TokenType::kUnused);
  for (int64_t i = 0; i < n; ++i) spec.tokens[i] = Cat("[PAD", i, "]");
  for (auto& [id, entry] : by_id) {
    spec.tokens[id] = entry.first;
    spec.types[id] = entry.second;
  }

  // Merges: "A B" strings (older files) or ["A", "B"] pairs (tokenizers >= 0.20).
  if (const json* merges = Get(*model, "merges")) {
    if (!merges->is_array()) return DataLoss(name, ": model.merges is not an array");
    spec.merges.reserve(merges->size());
    for (size_t r = 0; r < merges->size(); ++r) {
      const json& m = (*merges)[r];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return DataLoss(name, ": merge #", r, " '", s, "' has no space");
        spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return DataLoss(name, ": merge #", r, " is neither \"A B\" nor [\"A\", \"B\"]");
      }
    }
  }
  if (const json* v = Get(*model, "ignore_merges"); v && v->is_boolean()) spec.ignore_merges = v->get<bool>();
  {
    const json* v = Get(*model, "byte_fallback");
    spec.byte_fallback = v && v->is_boolean() && v->get<bool>();
  }

  // Kind: byte-level if a ByteLevel pre-tokenizer or decoder is present; SentencePiece-style if the
  // '▁' convention (Metaspace, or Prepend/Replace normalizers) or byte fallback is.
  bool byte_level = false, spm = false, have_split = false, nfc = false;
  bool legacy_prepend = false, have_metaspace = false;
  std::string split_regex;
  std::string unsupported;
  ForEachComponent(Get(root, "normalizer"), [&](const json& c, const std::string& type) {
    if (type == "NFC") nfc = true;
    else if (type == "Prepend") spm = legacy_prepend = true;
    else if (type == "Replace") spm = true;
    else unsupported = Cat("normalizer '", type, "'");
  });
  ForEachComponent(Get(root, "pre_tokenizer"), [&](const json& c, const std::string& type) {
    if (type == "ByteLevel") {
      byte_level = true;
      const json* use_regex = Get(c, "use_regex");
      if (!use_regex || (use_regex->is_boolean() && use_regex->get<bool>())) {
        if (!have_split) split_regex = std::string(PreTokenizerRegex(PreTokenizerKind::kGpt2));
      }
      if (const json* aps = Get(c, "add_prefix_space"); aps && aps->is_boolean() && aps->get<bool>()) {
        unsupported = "ByteLevel add_prefix_space=true";
      }
    } else if (type == "Split") {
      have_split = true;
      const json* pattern = Get(c, "pattern");
      split_regex = pattern ? GetString(*pattern, "Regex") : "";
      if (split_regex.empty()) unsupported = "a Split pre-tokenizer without a regex";
    } else if (type == "Metaspace") {
      spm = have_metaspace = true;
      const std::string scheme = GetString(c, "prepend_scheme");
      const json* aps = Get(c, "add_prefix_space");
      if (scheme == "first") spec.space_prefix = SpacePrefix::kFirstSegment;
      else if (scheme == "never" || (aps && aps->is_boolean() && !aps->get<bool>())) spec.space_prefix = SpacePrefix::kNone;
      else spec.space_prefix = SpacePrefix::kAlways;
      const json* split = Get(c, "split");
      spec.split_on_space = !split || (split->is_boolean() && split->get<bool>());
    } else {
      unsupported = Cat("pre-tokenizer '", type, "'");
    }
  });
  ForEachComponent(Get(root, "decoder"), [&](const json& c, const std::string& type) {
    if (type == "ByteLevel") byte_level = true;
    if (type == "ByteFallback" || type == "Metaspace") spm = true;
  });
  if (byte_level) {
    spec.kind = TokenizerKind::kBpe;
    spec.nfc = nfc;
    bool known = false;
    for (PreTokenizerKind k : {PreTokenizerKind::kQwen2, PreTokenizerKind::kLlama3, PreTokenizerKind::kGpt2,
                               PreTokenizerKind::kO200k}) {
      if (split_regex == PreTokenizerRegex(k)) {
        spec.pre_tokenizer = k;
        known = true;
      }
    }
    if (!known) {
      return Unimplemented(name, ": pre-tokenizer regex '", split_regex,
                           "' is not one of the supported ones (Qwen2, Llama-3/GLM-4, GPT-2, o200k)");
    }
  } else if (spm || spec.byte_fallback) {
    spec.kind = TokenizerKind::kSpm;
    if (nfc) unsupported = "normalizer 'NFC' with a SentencePiece-style vocabulary";
    if (!legacy_prepend && !have_metaspace) spec.space_prefix = SpacePrefix::kNone;
  } else {
    return Unimplemented(name, ": BPE tokenizer that is neither byte-level nor SentencePiece-style");
  }
  if (!unsupported.empty()) return Unimplemented(name, ": ", unsupported, " is not supported");

  auto find_id = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (int64_t i = 0; i < n; ++i) {
      if (spec.tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  spec.unk_id = find_id(GetString(*model, "unk_token"));

  // BOS from the post-processor's template when the config does not say.
  bool add_bos_from_template = false;
  std::string template_bos;
  ForEachComponent(Get(root, "post_processor"), [&](const json& c, const std::string& type) {
    if (type != "TemplateProcessing") return;
    const json* single = Get(c, "single");
    if (single && single->is_array() && !single->empty()) {
      const json* st = Get((*single)[0], "SpecialToken");
      if (st) {
        add_bos_from_template = true;
        template_bos = GetString(*st, "id");
      }
    }
  });
  spec.add_bos = add_bos_from_template;
  spec.bos_id = find_id(template_bos);

  if (!config_json.empty()) {
    const json cfg = json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return DataLoss(name, ": tokenizer_config.json is not a JSON object");
    // added_tokens_decoder can mark tokens special that tokenizer.json lists as plain added tokens.
    if (const json* atd = Get(cfg, "added_tokens_decoder"); atd && atd->is_object()) {
      for (auto it = atd->begin(); it != atd->end(); ++it) {
        int64_t id = -1;
        if (!absl::SimpleAtoi(it.key(), &id) || id < 0 || id >= n) continue;
        const json* special = Get(it.value(), "special");
        if (special && special->is_boolean() && spec.tokens[id] == GetString(it.value(), "content")) {
          spec.types[id] = special->get<bool>() ? TokenType::kControl : TokenType::kUserDefined;
        }
      }
    }
    if (const json* v = Get(cfg, "add_bos_token"); v && v->is_boolean()) spec.add_bos = v->get<bool>();
    if (const json* v = Get(cfg, "add_eos_token"); v && v->is_boolean()) spec.add_eos = v->get<bool>();
    if (int32_t id = find_id(TokenContent(Get(cfg, "bos_token"))); id >= 0) spec.bos_id = id;
    if (int32_t id = find_id(TokenContent(Get(cfg, "eos_token"))); id >= 0) spec.eos_id = id;
    if (int32_t id = find_id(TokenContent(Get(cfg, "unk_token"))); id >= 0) spec.unk_id = id;
    if (int32_t id = find_id(TokenContent(Get(cfg, "pad_token"))); id >= 0) spec.pad_id = id;
    if (const json* v = Get(cfg, "chat_template")) {
      if (v->is_string()) {
        spec.chat_template = v->get<std::string>();
      } else if (v->is_array()) {  // [{"name": "default", "template": "..."}, ...]
        for (const json& t : *v) {
          if (GetString(t, "name") == "default" || spec.chat_template.empty()) spec.chat_template = GetString(t, "template");
        }
      }
    }
  }
  if (spec.add_bos && spec.bos_id < 0) {
    return DataLoss(name, ": add_bos_token is set but the BOS token is not in the vocabulary");
  }
  if (spec.add_eos && spec.eos_id < 0) {
    return DataLoss(name, ": add_eos_token is set but the EOS token is not in the vocabulary");
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string config;
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(config, ReadFile(config_path.string()));
  }
  ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(text, config, path));
  auto tok = Tokenizer::Create(std::move(spec));
  if (!tok.ok()) return absl::Status(tok.status().code(), Cat(path, ": ", tok.status().message()));
  return tok;
}

}  // namespace specgen
