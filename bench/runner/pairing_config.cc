#include "bench/runner/pairing_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/routing/routing_trace.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "moe/acceptance_profile.h"
#include "nlohmann/json.hpp"
#include "toml++/toml.h"

namespace specgen::bench {

std::string DraftLength::Name() const {
  return modelled ? Cat("modelled", k) : adaptive ? Cat("adaptive", k) : Cat(k);
}

std::string SourceRef::ToString() const { return Cat(file, ":", line, ": ", key); }

namespace {

namespace fs = std::filesystem;

constexpr int kDefaultAdaptiveMax = 8;

// The keys a pairing (or [defaults]) may set, each parsed by SettingsReader::Apply.
const std::set<std::string>& PairingKeys() {
  static const auto* keys = new std::set<std::string>{
      "name",  "target", "draft",   "draft_lengths", "adaptive_max", "accept",     "temperature",
      "top_k", "top_p",  "min_p",   "seed",          "device",       "vram_budget", "context",
      "max_new_tokens",  "prompts", "ignore_eos",    "threads",      "enabled",      "moe_host",
      "acceptance", "routing"};
  return *keys;
}

std::string TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

// Reads one config file's values, turning every mistake into an error naming file, line and key.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {
    dir_ = fs::path(path_).parent_path();
  }

  template <typename... Args>
  absl::Status Error(const toml::node& at, std::string_view key, const Args&... args) const {
    return InvalidArgument(path_, ":", at.source().begin.line, ": ", key, ": ", args...);
  }
  template <typename... Args>
  absl::Status ErrorAtLine(int64_t line, std::string_view key, const Args&... args) const {
    return InvalidArgument(path_, ":", line, ": ", key, ": ", args...);
  }

  SourceRef Ref(const toml::node& at, std::string key) const {
    return SourceRef{path_, static_cast<int64_t>(at.source().begin.line), std::move(key)};
  }

  absl::StatusOr<std::string> String(const toml::node& node, std::string_view key) const {
    if (!node.is_string()) return Error(node, key, "must be a string, not ", TypeName(node));
    return std::string(node.as_string()->get());
  }
  absl::StatusOr<int64_t> Integer(const toml::node& node, std::string_view key, int64_t lo,
                                  int64_t hi) const {
    if (!node.is_integer()) return Error(node, key, "must be an integer, not ", TypeName(node));
    const int64_t v = node.as_integer()->get();
    if (v < lo || v > hi) return Error(node, key, "must be in [", lo, ", ", hi, "], got ", v);
    return v;
  }
  // TOML has nan and inf, which no sampling parameter can take (and which slip past a `v < 0`):
  // refused here, with the file, line and key, rather than after the models load.
  absl::StatusOr<double> Number(const toml::node& node, std::string_view key) const {
    if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
    if (!node.is_floating_point()) return Error(node, key, "must be a number, not ", TypeName(node));
    const double v = node.as_floating_point()->get();
    if (!std::isfinite(v)) return Error(node, key, "must be a finite number, got ", v);
    return v;
  }
  absl::StatusOr<bool> Bool(const toml::node& node, std::string_view key) const {
    if (!node.is_boolean()) return Error(node, key, "must be true or false, not ", TypeName(node));
    return node.as_boolean()->get();
  }
  // A model path: synth:PRESET as is, else resolved against the config's folder (whether it exists
  // is checked once the pairing is known to be enabled).
  absl::StatusOr<std::string> ModelPath(const toml::node& node, std::string_view key) const {
    ASSIGN_OR_RETURN(std::string value, String(node, key));
    if (value.empty()) return Error(node, key, "is empty");
    if (IsSynth(value)) return value;
    return Resolve(value);
  }
  static bool IsSynth(const std::string& path) { return path.rfind("synth:", 0) == 0; }
  absl::Status CheckExists(const std::string& path, const SourceRef& ref) const {
    if (IsSynth(path) || fs::exists(path)) return absl::OkStatus();
    return InvalidArgument(ref.ToString(), ": '", path, "' not found (fill in the path, or set enabled = false)");
  }
  std::string Resolve(const std::string& path) const {
    if (fs::path(path).is_absolute()) return path;
    return (dir_ / path).lexically_normal().string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  fs::path dir_;
};

// A pairing under construction: the values so far and the keys its own table set (to tell a
// pairing's mistake from a default that does not apply to it).
struct Draft {
  Pairing pairing;
  std::optional<int> adaptive_max;
  std::vector<std::pair<int, int>> lengths;  // (k, 0 fixed / 1 adaptive / 2 modelled) as written
  bool lengths_set = false, draft_set = false;
  bool enabled = true;
  std::string prompts_name;
  SourceRef prompts_ref, lengths_ref, budget_ref, acceptance_ref;
  int64_t context_line = 0, max_new_tokens_line = 0;  // where each was set (0: the default)
  std::set<std::string> own_keys;
};

absl::Status ApplyDraftLengths(const Reader& r, const toml::node& node, Draft* d) {
  constexpr std::string_view kKey = "draft_lengths";
  d->lengths.clear();
  d->lengths_set = true;
  d->lengths_ref = r.Ref(node, std::string(kKey));
  auto one = [&](const toml::node& v) -> absl::Status {
    if (v.is_string()) {
      const std::string& word = v.as_string()->get();
      if (word != "adaptive" && word != "modelled") {
        return r.Error(v, kKey, "a string entry must be \"adaptive\" or \"modelled\", got \"", word, "\"");
      }
      d->lengths.push_back({0, word == "adaptive" ? 1 : 2});
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const int64_t k, r.Integer(v, kKey, 1, 64));
    d->lengths.push_back({static_cast<int>(k), 0});
    return absl::OkStatus();
  };
  if (node.is_array()) {
    const toml::array& a = *node.as_array();
    if (a.empty()) return r.Error(node, kKey, "is empty: give draft lengths or \"adaptive\"");
    for (const toml::node& v : a) RETURN_IF_ERROR(one(v));
    return absl::OkStatus();
  }
  if (node.is_string()) return one(node);
  return r.Error(node, kKey, "must be a list of draft lengths or \"adaptive\", not ", TypeName(node));
}

// A key that takes one string or a non-empty list of them, each turned into a regime's name by
// `name_of` (an error names the value), no name twice.
template <typename NameOf>
absl::StatusOr<std::vector<std::string>> RegimeList(const Reader& r, const toml::node& node, std::string_view key,
                                                   NameOf name_of) {
  std::vector<std::string> names;
  auto one = [&](const toml::node& v) -> absl::Status {
    ASSIGN_OR_RETURN(std::string s, r.String(v, key));
    ASSIGN_OR_RETURN(std::string name, name_of(v, s));
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return r.Error(v, key, "lists \"", s, "\" twice");
    }
    names.push_back(std::move(name));
    return absl::OkStatus();
  };
  if (node.is_array()) {
    if (node.as_array()->empty()) return r.Error(node, key, "is empty");
    for (const toml::node& v : *node.as_array()) RETURN_IF_ERROR(one(v));
  } else {
    RETURN_IF_ERROR(one(node));
  }
  return names;
}

absl::Status ApplyAcceptances(const Reader& r, const toml::node& node, Draft* d) {
  constexpr std::string_view kKey = "acceptance";
  d->acceptance_ref = r.Ref(node, std::string(kKey));
  auto name_of = [&](const toml::node& v, const std::string& s) -> absl::StatusOr<std::string> {
    if (s == "real") return std::string();
    const absl::StatusOr<moe::AcceptanceProfile> profile = moe::ParseAcceptance(s, "profile");
    if (!profile.ok()) return r.Error(v, kKey, profile.status().message(), ", or \"real\" for the draft's own");
    return s;
  };
  ASSIGN_OR_RETURN(d->pairing.acceptances, RegimeList(r, node, kKey, name_of));
  return absl::OkStatus();
}

absl::Status ApplyRoutings(const Reader& r, const toml::node& node, Draft* d) {
  constexpr std::string_view kKey = "routing";
  auto name_of = [&](const toml::node& v, const std::string& s) -> absl::StatusOr<std::string> {
    const absl::StatusOr<RoutingRegime> regime = ParseRoutingRegime(s);
    if (!regime.ok()) return r.Error(v, kKey, regime.status().message());
    return *regime == RoutingRegime::kOwn ? std::string() : std::string(RoutingRegimeName(*regime));
  };
  ASSIGN_OR_RETURN(d->pairing.routings, RegimeList(r, node, kKey, name_of));
  return absl::OkStatus();
}

absl::Status ApplyBudgets(const Reader& r, const toml::node& node, Draft* d) {
  constexpr std::string_view kKey = "vram_budget";
  d->budget_ref = r.Ref(node, std::string(kKey));
  std::vector<std::string> budgets;
  std::map<size_t, std::string> seen;  // bytes -> as written: "8GiB" and "8192MiB" are one benchmark
  auto one = [&](const toml::node& v) -> absl::Status {
    ASSIGN_OR_RETURN(std::string s, r.String(v, kKey));
    const absl::StatusOr<size_t> bytes = ParseByteSize(s);
    if (!bytes.ok()) return r.Error(v, kKey, bytes.status().message());
    if (*bytes == 0) return r.Error(v, kKey, "\"", s, "\" is 0 bytes");
    if (auto [it, fresh] = seen.try_emplace(*bytes, s); !fresh) {
      return r.Error(v, kKey, "lists ",
                     it->second == s ? "\"" + s + "\" twice" : "\"" + it->second + "\" and \"" + s + "\", the same size",
                     " (each would run the same benchmark)");
    }
    budgets.push_back(s);
    return absl::OkStatus();
  };
  if (node.is_array()) {
    if (node.as_array()->empty()) return r.Error(node, kKey, "is empty");
    for (const toml::node& v : *node.as_array()) RETURN_IF_ERROR(one(v));
  } else {
    RETURN_IF_ERROR(one(node));
  }
  d->pairing.vram_budgets = std::move(budgets);
  return absl::OkStatus();
}

// Applies `table`'s keys (a [[pairing]] or [defaults]) to `d`.
absl::Status ApplySettings(const Reader& r, const toml::table& table, bool is_defaults, Draft* d) {
  Pairing& p = d->pairing;
  for (auto&& [key_node, node] : table) {
    const std::string key(key_node.str());
    const auto line = static_cast<int64_t>(key_node.source().begin.line);
    const std::string where = is_defaults ? "defaults" : "pairing";
    if (!PairingKeys().contains(key)) {
      return r.ErrorAtLine(line, key, "unknown key in [", where, "] (known: ",
                           absl::StrJoin(PairingKeys(), ", "), ")");
    }
    if (!is_defaults) d->own_keys.insert(key);
    if (key == "name") {
      if (is_defaults) return r.ErrorAtLine(line, key, "belongs to a [[pairing]], not [defaults]");
      ASSIGN_OR_RETURN(p.name, r.String(node, key));
      if (p.name.empty() || p.name.find_first_of("/ \t") != std::string::npos) {
        return r.Error(node, key, "must be non-empty, without '/' or spaces (it names benchmarks)");
      }
    } else if (key == "target") {
      ASSIGN_OR_RETURN(p.target, r.ModelPath(node, key));
      p.target_ref = r.Ref(node, key);
    } else if (key == "draft") {
      d->draft_set = true;
      p.draft_ref = r.Ref(node, key);
      if (node.is_string() && node.as_string()->get() == "none") {
        p.draft.clear();
      } else {
        ASSIGN_OR_RETURN(p.draft, r.ModelPath(node, key));
      }
    } else if (key == "draft_lengths") {
      RETURN_IF_ERROR(ApplyDraftLengths(r, node, d));
    } else if (key == "adaptive_max") {
      ASSIGN_OR_RETURN(const int64_t v, r.Integer(node, key, 1, 64));
      d->adaptive_max = static_cast<int>(v);
    } else if (key == "accept") {
      ASSIGN_OR_RETURN(std::string v, r.String(node, key));
      auto mode = ParseAcceptMode(v);
      if (!mode.ok()) return r.Error(node, key, "must be \"rejection\" or \"coupled\", got \"", v, "\"");
      p.accept = *mode;
    } else if (key == "temperature") {
      ASSIGN_OR_RETURN(const double v, r.Number(node, key));
      if (v < 0) return r.Error(node, key, "must be >= 0 (0: greedy), got ", v);
      if (!std::isfinite(static_cast<float>(v))) return r.Error(node, key, "is too large for a float, got ", v);
      p.sampling.temperature = static_cast<float>(v);
    } else if (key == "top_k") {
      ASSIGN_OR_RETURN(const int64_t v, r.Integer(node, key, 0, 1 << 30));
      p.sampling.top_k = static_cast<int32_t>(v);
    } else if (key == "top_p" || key == "min_p") {
      ASSIGN_OR_RETURN(const double v, r.Number(node, key));
      if (v < 0 || v > 1) return r.Error(node, key, "must be in [0, 1], got ", v);
      (key == "top_p" ? p.sampling.top_p : p.sampling.min_p) = static_cast<float>(v);
    } else if (key == "seed") {
      ASSIGN_OR_RETURN(const int64_t v, r.Integer(node, key, 0, INT64_MAX));
      p.sampling.seed = static_cast<uint64_t>(v);
    } else if (key == "moe_host") {
      ASSIGN_OR_RETURN(p.moe_host, r.String(node, key));
      if (p.moe_host != "auto" && p.moe_host != "off" && p.moe_host != "only") {
        return r.Error(node, key, "must be auto, off or only, got \"", p.moe_host, "\"");
      }
    } else if (key == "device") {
      ASSIGN_OR_RETURN(p.device, r.String(node, key));
      if (p.device != "auto" && p.device != "cpu" && p.device != "cuda") {
        return r.Error(node, key, "must be auto, cpu or cuda, got \"", p.device, "\"");
      }
    } else if (key == "vram_budget") {
      RETURN_IF_ERROR(ApplyBudgets(r, node, d));
    } else if (key == "acceptance") {
      RETURN_IF_ERROR(ApplyAcceptances(r, node, d));
    } else if (key == "routing") {
      RETURN_IF_ERROR(ApplyRoutings(r, node, d));
    } else if (key == "context") {
      ASSIGN_OR_RETURN(p.context, r.Integer(node, key, 2, int64_t{1} << 24));
      d->context_line = line;
    } else if (key == "max_new_tokens") {
      ASSIGN_OR_RETURN(p.max_new_tokens, r.Integer(node, key, 1, int64_t{1} << 24));
      d->max_new_tokens_line = line;
    } else if (key == "prompts") {
      ASSIGN_OR_RETURN(d->prompts_name, r.String(node, key));
      d->prompts_ref = r.Ref(node, key);
    } else if (key == "ignore_eos") {
      ASSIGN_OR_RETURN(p.ignore_eos, r.Bool(node, key));
    } else if (key == "enabled") {
      ASSIGN_OR_RETURN(d->enabled, r.Bool(node, key));
    } else if (key == "threads") {
      ASSIGN_OR_RETURN(const int64_t v, r.Integer(node, key, 0, 4096));
      p.threads = static_cast<int>(v);
    }
  }
  return absl::OkStatus();
}

// One prompt from a JSON value: a string (text), an array of ids, or {"prompt"|"text": ..., "ids": ...}.
absl::StatusOr<Prompt> PromptFromJson(const nlohmann::json& j) {
  Prompt prompt;
  const nlohmann::json* v = &j;
  if (j.is_object()) {
    for (const char* name : {"ids", "prompt", "text"}) {
      if (j.contains(name)) {
        v = &j.at(name);
        break;
      }
    }
    if (v == &j) return InvalidArgument("an object needs \"prompt\", \"text\" or \"ids\"");
  }
  if (v->is_string()) {
    prompt.text = v->get<std::string>();
    if (prompt.text.empty()) return InvalidArgument("an empty prompt");
    return prompt;
  }
  if (v->is_array() && !v->empty()) {
    for (const auto& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidArgument("token ids must be non-negative integers, got ", id.dump());
      }
      prompt.ids.push_back(id.get<int32_t>());
    }
    return prompt;
  }
  return InvalidArgument("a prompt is a string, a non-empty array of token ids, or an object with "
                         "\"prompt\", \"text\" or \"ids\"; got ", v->dump().substr(0, 60));
}

// Prompts from a file: .jsonl (one JSON prompt a line), .json (an array, or an object whose
// "prompts" is one: models/pair_prompts.json) or anything else as text, one prompt a non-empty line.
absl::StatusOr<std::vector<Prompt>> ReadPromptFile(const std::string& path) {
  // A directory reads as empty and a FIFO or device (/dev/zero) may never end: regular files only.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
    return InvalidArgument(path, ": not a regular file (", fs::is_directory(status) ? "a directory" : "a device, FIFO or socket",
                           "); give a file of prompts");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<Prompt> prompts;
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".json") {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return InvalidArgument(path, ": not valid JSON");
    if (j.is_object() && j.contains("prompts")) j = j.at("prompts");
    if (!j.is_array()) return InvalidArgument(path, ": expected an array of prompts or {\"prompts\": [...]}");
    for (size_t i = 0; i < j.size(); ++i) {
      auto p = PromptFromJson(j[i]);
      if (!p.ok()) return InvalidArgument(path, ": prompt ", i, ": ", p.status().message());
      prompts.push_back(*std::move(p));
    }
    return prompts;
  }
  std::istringstream lines(text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (ext != ".jsonl") {
      prompts.push_back(Prompt{line, {}});
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return InvalidArgument(path, ":", n, ": not valid JSON");
    auto p = PromptFromJson(j);
    if (!p.ok()) return InvalidArgument(path, ":", n, ": ", p.status().message());
    prompts.push_back(*std::move(p));
  }
  return prompts;
}

absl::StatusOr<PromptSet> ParsePromptSet(const Reader& r, const std::string& name, const toml::node& node) {
  const std::string key = "prompts." + name;
  if (!node.is_table()) return r.Error(node, key, "must be a table ([prompts.", name, "]), not ", TypeName(node));
  PromptSet set;
  set.name = name;
  int sources = 0;
  std::optional<int64_t> limit;
  const toml::node* first = nullptr;
  for (auto&& [key_node, v] : *node.as_table()) {
    const std::string k(key_node.str());
    const std::string full = key + "." + k;
    first = &v;
    if (k == "file") {
      ++sources;
      ASSIGN_OR_RETURN(std::string file, r.String(v, full));
      const std::string resolved = r.Resolve(file);
      auto prompts = ReadPromptFile(resolved);
      if (!prompts.ok()) return r.Error(v, full, prompts.status().message());
      set.prompts = *std::move(prompts);
    } else if (k == "text") {
      ++sources;
      if (!v.is_array()) return r.Error(v, full, "must be an array of strings, not ", TypeName(v));
      for (const toml::node& s : *v.as_array()) {
        ASSIGN_OR_RETURN(std::string t, r.String(s, full));
        if (t.empty()) return r.Error(s, full, "an empty prompt");
        set.prompts.push_back(Prompt{t, {}});
      }
    } else if (k == "ids") {
      ++sources;
      if (!v.is_array()) return r.Error(v, full, "must be an array of token-id arrays, not ", TypeName(v));
      for (const toml::node& a : *v.as_array()) {
        if (!a.is_array() || a.as_array()->empty()) {
          return r.Error(a, full, "each prompt must be a non-empty array of token ids");
        }
        Prompt p;
        for (const toml::node& id : *a.as_array()) {
          ASSIGN_OR_RETURN(const int64_t t, r.Integer(id, full, 0, INT32_MAX));
          p.ids.push_back(static_cast<int32_t>(t));
        }
        set.prompts.push_back(std::move(p));
      }
    } else if (k == "limit") {
      ASSIGN_OR_RETURN(limit, r.Integer(v, full, 1, INT32_MAX));
    } else {
      return r.ErrorAtLine(key_node.source().begin.line, full,
                           "unknown key (a prompt set has file, text or ids, and limit)");
    }
  }
  if (sources != 1) {
    return r.Error(first ? *first : node, key, "give exactly one of file, text or ids, got ", sources);
  }
  if (set.prompts.empty()) return r.Error(node, key, "has no prompts");
  if (limit && static_cast<size_t>(*limit) < set.prompts.size()) set.prompts.resize(*limit);
  return set;
}

// Checks a finished pairing and turns the draft lengths as written into DraftLengths.
absl::Status Finish(const Reader& r, int64_t line, Draft* d, const std::map<std::string, int>& sets) {
  Pairing& p = d->pairing;
  if (p.name.empty()) return r.ErrorAtLine(line, "pairing", "needs a name");
  const std::string what = "pairing '" + p.name + "'";
  if (p.target.empty()) return r.ErrorAtLine(line, what, "needs a target (here or in [defaults])");
  if (!d->draft_set) {
    return r.ErrorAtLine(line, what, "needs a draft: a model, or \"none\" for the target alone");
  }
  if (d->enabled) {
    RETURN_IF_ERROR(r.CheckExists(p.target, p.target_ref));
    if (!p.draft.empty()) RETURN_IF_ERROR(r.CheckExists(p.draft, p.draft_ref));
  }
  p.draft_lengths.clear();
  if (p.draft.empty()) {
    if (d->own_keys.contains("draft_lengths")) {
      return r.ErrorAtLine(d->lengths_ref.line, "draft_lengths",
                           "given for a pairing without a draft (draft = \"none\")");
    }
    p.draft_lengths.push_back(DraftLength{0, false});
  } else {
    if (!d->lengths_set) return r.ErrorAtLine(line, what, "needs draft_lengths (here or in [defaults])");
    std::set<std::string> seen;
    for (const auto& [k, policy] : d->lengths) {
      DraftLength len{policy > 0 ? d->adaptive_max.value_or(kDefaultAdaptiveMax) : k, policy > 0, policy == 2};
      if (!seen.insert(len.Name()).second) {
        return r.ErrorAtLine(d->lengths_ref.line, "draft_lengths", "lists ", len.Name(), " twice");
      }
      p.draft_lengths.push_back(len);
    }
  }
  // A scripted draft proposes the target's greedy token: it stands for a draft only under greedy.
  if (p.draft.empty() && !d->own_keys.contains("acceptance")) p.acceptances = {""};  // a default's
  const bool scripted = std::any_of(p.acceptances.begin(), p.acceptances.end(),
                                    [](const std::string& a) { return !a.empty(); });
  if (scripted && p.draft.empty()) {
    return r.ErrorAtLine(d->acceptance_ref.line, "acceptance", what, ": acceptance regimes need a draft");
  }
  if (scripted && !p.sampling.greedy()) {
    return r.ErrorAtLine(d->acceptance_ref.line, "acceptance", what,
                         ": acceptance regimes are greedy only (temperature = 0, not ", p.sampling.temperature, ")");
  }
  // A run stops when the context is full: max_new_tokens that cannot fit beside a prompt would be
  // cut short and reported as an ordinary result of fewer tokens.
  if (p.max_new_tokens >= p.context) {
    const bool own = d->own_keys.contains("max_new_tokens") || !d->own_keys.contains("context");
    const int64_t at = own ? d->max_new_tokens_line : d->context_line;
    return r.ErrorAtLine(at > 0 ? at : line, own ? "max_new_tokens" : "context",
                         what, ": max_new_tokens ", p.max_new_tokens, " does not fit in a context of ",
                         p.context, " beside a prompt (max_new_tokens must be below context)");
  }
  if (p.vram_budgets.empty()) p.vram_budgets.push_back("");
  if (p.device == "cpu" && d->own_keys.contains("vram_budget")) {
    return r.ErrorAtLine(d->budget_ref.line, "vram_budget", "given for a pairing on device \"cpu\"");
  }
  if (p.device == "cpu") p.vram_budgets = {""};
  p.budget_ref = d->budget_ref;
  if (d->prompts_name.empty()) return r.ErrorAtLine(line, what, "needs prompts (a [prompts.NAME] set)");
  auto it = sets.find(d->prompts_name);
  if (it == sets.end()) {
    return r.ErrorAtLine(d->prompts_ref.line, "prompts", "no prompt set [prompts.", d->prompts_name, "]");
  }
  p.prompt_set = it->second;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PairingConfig> ParsePairingConfig(const std::string& text, const std::string& path) {
  const Reader r(path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return InvalidArgument(path, ":", e.source().begin.line, ": not valid TOML: ", e.description());
  }
  PairingConfig config;
  config.path = path;
  std::map<std::string, int> sets;

  for (auto&& [key_node, node] : root) {
    const std::string key(key_node.str());
    if (key != "defaults" && key != "prompts" && key != "pairing") {
      return r.ErrorAtLine(key_node.source().begin.line, key,
                           "unknown key (a config has [defaults], [prompts.NAME] and [[pairing]])");
    }
  }
  if (const toml::node* prompts = root.get("prompts")) {
    if (!prompts->is_table()) return r.Error(*prompts, "prompts", "must be tables [prompts.NAME]");
    for (auto&& [name, set_node] : *prompts->as_table()) {
      ASSIGN_OR_RETURN(PromptSet set, ParsePromptSet(r, std::string(name.str()), set_node));
      sets[set.name] = static_cast<int>(config.prompt_sets.size());
      config.prompt_sets.push_back(std::move(set));
    }
  }
  Draft defaults;
  if (const toml::node* d = root.get("defaults")) {
    if (!d->is_table()) return r.Error(*d, "defaults", "must be a table [defaults]");
    RETURN_IF_ERROR(ApplySettings(r, *d->as_table(), /*is_defaults=*/true, &defaults));
  }
  const toml::node* pairings = root.get("pairing");
  if (pairings == nullptr) return InvalidArgument(path, ": no [[pairing]]");
  if (!pairings->is_array_of_tables()) return r.Error(*pairings, "pairing", "must be [[pairing]] tables");
  std::set<std::string> names;
  for (const toml::node& node : *pairings->as_array()) {
    Draft d = defaults;
    d.own_keys.clear();
    RETURN_IF_ERROR(ApplySettings(r, *node.as_table(), /*is_defaults=*/false, &d));
    const auto line = static_cast<int64_t>(node.source().begin.line);
    RETURN_IF_ERROR(Finish(r, line, &d, sets));
    if (!names.insert(d.pairing.name).second) {
      return r.ErrorAtLine(line, "name", "two pairings are named '", d.pairing.name, "'");
    }
    if (d.enabled) config.pairings.push_back(std::move(d.pairing));
  }
  if (config.pairings.empty()) return InvalidArgument(path, ": every [[pairing]] has enabled = false");
  return config;
}

absl::StatusOr<PairingConfig> LoadPairingConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path, ": cannot open the config");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePairingConfig(ss.str(), path);
}

}  // namespace specgen::bench
