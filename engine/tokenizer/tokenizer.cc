#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode.h"

namespace specgen {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 '▁'
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// "<0x0A>" -> 10, else -1.
int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

// Replaces each invalid byte with U+FFFD so the result is valid UTF-8.
std::string Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = unicode::ValidSequenceLength(s, i, &cp);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      out.append(to);
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// Token texts that end generation in the model families we support, besides the declared EOS.
bool LooksLikeEog(std::string_view t) {
  return t == "<|im_end|>" || t == "<|endoftext|>" || t == "<|eot_id|>" || t == "<|eom_id|>" ||
         t == "<|end_of_text|>" || t == "</s>" || t == "<end_of_turn>" || t == "<|end|>";
}

}  // namespace

const char* TokenizerKindName(TokenizerKind kind) { return kind == TokenizerKind::kBpe ? "bpe" : "spm"; }

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(spec)));
  RETURN_IF_ERROR(t->Build());
  return t;
}

absl::Status Tokenizer::Build() {
  const size_t n = spec_.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer: the vocabulary is empty");
  if (n > (1u << 30)) return InvalidArgument("tokenizer: vocabulary of ", n, " tokens is too large");
  if (spec_.types.empty()) spec_.types.assign(n, TokenType::kNormal);
  if (spec_.types.size() != n) {
    return InvalidArgument("tokenizer: ", spec_.types.size(), " token types for ", n, " tokens");
  }
  if (!spec_.scores.empty() && spec_.scores.size() != n) {
    return InvalidArgument("tokenizer: ", spec_.scores.size(), " scores for ", n, " tokens");
  }
  for (auto [name, id] : {std::pair{"bos", spec_.bos_id}, std::pair{"eos", spec_.eos_id},
                          std::pair{"unk", spec_.unk_id}, std::pair{"pad", spec_.pad_id}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return InvalidArgument("tokenizer: ", name, " token id ", id, " is outside the vocabulary of ", n);
    }
  }
  if (spec_.add_bos && spec_.bos_id < 0) return InvalidArgument("tokenizer: add_bos is set but there is no BOS token");
  if (spec_.add_eos && spec_.eos_id < 0) return InvalidArgument("tokenizer: add_eos is set but there is no EOS token");

  token_to_id_.reserve(n);
  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
  for (size_t i = 0; i < n; ++i) {
    token_to_id_.emplace(spec_.tokens[i], static_cast<int32_t>(i));  // first id wins on duplicates
    if (spec_.kind == TokenizerKind::kSpm) {
      const int b = ParseByteToken(spec_.tokens[i]);
      if (b >= 0 && (spec_.types[i] == TokenType::kByte || spec_.types[i] == TokenType::kNormal)) {
        spec_.types[i] = TokenType::kByte;
        if (byte_tokens_[b] < 0) byte_tokens_[b] = static_cast<int32_t>(i);
      }
    }
  }
  if (spec_.unk_id >= 0) spec_.types[spec_.unk_id] = TokenType::kUnknown;

  merge_ranks_.reserve(spec_.merges.size());
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto& [a, b] = spec_.merges[r];
    const int32_t ia = TokenId(a), ib = TokenId(b), im = TokenId(a + b);
    if (ia < 0 || ib < 0 || im < 0) {
      return InvalidArgument("tokenizer: merge #", r, " '", a, " ", b, "': '",
                             ia < 0 ? a : (ib < 0 ? b : a + b), "' is not in the vocabulary");
    }
    merge_ranks_.try_emplace(PairKey(ia, ib), static_cast<int32_t>(r), im);
  }

  // Control, user-defined and unknown tokens are matched in text before BPE (as llama.cpp does;
  // HF matches its added tokens, which are the same set).
  specials_by_first_byte_.assign(256, {});
  for (size_t i = 0; i < n; ++i) {
    const TokenType ty = spec_.types[i];
    if ((ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) &&
        !spec_.tokens[i].empty()) {
      specials_by_first_byte_[static_cast<uint8_t>(spec_.tokens[i][0])].push_back(static_cast<int32_t>(i));
    }
  }
  for (auto& bucket : specials_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return spec_.tokens[a].size() > spec_.tokens[b].size();
    });
  }

  if (spec_.eos_id >= 0) eog_ids_.push_back(spec_.eos_id);
  for (int32_t id : spec_.eog_ids) {
    if (!IsValid(id)) return InvalidArgument("tokenizer: end-of-generation id ", id, " is outside the vocabulary");
    eog_ids_.push_back(id);
  }
  for (size_t i = 0; i < n; ++i) {
    if (spec_.types[i] == TokenType::kControl && LooksLikeEog(spec_.tokens[i])) eog_ids_.push_back(static_cast<int32_t>(i));
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
  return absl::OkStatus();
}

int32_t Tokenizer::TokenId(std::string_view text) const {
  auto it = token_to_id_.find(AsAbsl(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsEog(int32_t id) const { return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id); }

bool Tokenizer::StripsLeadingSpace() const {
  return spec_.kind == TokenizerKind::kSpm && spec_.space_prefix != SpacePrefix::kNone;
}

std::vector<Tokenizer::Segment> Tokenizer::SplitSpecial(std::string_view text, bool parse_special) const {
  std::vector<Segment> segs;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t found = -1;
    for (int32_t id : specials_by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (!parse_special && spec_.types[id] != TokenType::kUserDefined) continue;
      const std::string& t = spec_.tokens[id];
      if (text.compare(i, t.size(), t) == 0) {
        found = id;
        break;  // longest first
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (i > start) segs.push_back({text.substr(start, i - start), -1, start});
    segs.push_back({{}, found, i});
    i += spec_.tokens[found].size();
    start = i;
  }
  if (start < text.size()) segs.push_back({text.substr(start), -1, start});
  return segs;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, EncodeOptions options) const {
  RETURN_IF_ERROR(unicode::ValidateUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_special && spec_.add_bos) ids.push_back(spec_.bos_id);
  bool first_text_segment = true;
  for (const Segment& seg : SplitSpecial(text, options.parse_special)) {
    if (seg.token >= 0) {
      ids.push_back(seg.token);
    } else if (spec_.kind == TokenizerKind::kBpe) {
      RETURN_IF_ERROR(EncodeBpeSegment(seg.text, &ids));
    } else {
      RETURN_IF_ERROR(EncodeSpmSegment(seg.text, first_text_segment, &ids));
      first_text_segment = false;
    }
  }
  if (options.add_special && spec_.add_eos) ids.push_back(spec_.eos_id);
  return ids;
}

absl::Status Tokenizer::EncodeBpeSegment(std::string_view text, std::vector<int32_t>* out) const {
  std::string normalized;
  if (spec_.nfc) {
    normalized = unicode::NormalizeNfc(text);
    text = normalized;
  }
  std::vector<int32_t> symbols;
  for (std::string_view word : PreTokenize(spec_.pre_tokenizer, text)) {
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(AsAbsl(word));
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const std::string mapped = byte_level::Encode(word);
    symbols.clear();
    const int32_t whole = spec_.ignore_merges ? TokenId(mapped) : -1;
    if (whole >= 0) {
      symbols.push_back(whole);
    } else {
      for (size_t i = 0; i < mapped.size();) {
        uint32_t cp;
        const int len = unicode::ValidSequenceLength(mapped, i, &cp);
        const int32_t id = TokenId(std::string_view(mapped).substr(i, len));
        if (id < 0) {
          return InvalidArgument("tokenizer: the byte-level symbol for byte 0x",
                                 absl::Hex(byte_level::CodepointToByte(cp), absl::kZeroPad2),
                                 " is not in the vocabulary");
        }
        symbols.push_back(id);
        i += len;
      }
      MergeByRank(&symbols);
    }
    out->insert(out->end(), symbols.begin(), symbols.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      cache_.try_emplace(std::string(word), symbols);
    }
  }
  return absl::OkStatus();
}

// Merges the adjacent pair with the lowest rank, leftmost on ties, until no pair has a rank: a heap of
// candidate pairs over a linked list of symbols, stale entries skipped when popped (as HF's word.rs).
void Tokenizer::MergeByRank(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const int n = static_cast<int>(s.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    auto it = merge_ranks_.find(PairKey(s[i], s[next[i]]));
    if (it != merge_ranks_.end()) heap.push({it->second.first, i, s[i], s[next[i]], it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int i = c.pos;
    if (dead[i] || s[i] != c.left || next[i] < 0 || s[next[i]] != c.right) continue;
    const int j = next[i];
    s[i] = c.merged;
    dead[j] = true;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  int w = 0;
  for (int i = 0; i < n; ++i) {
    if (!dead[i]) s[w++] = s[i];
  }
  s.resize(w);
}

void Tokenizer::AppendByteFallback(std::string_view chars, std::vector<int32_t>* out) const {
  const int32_t whole = TokenId(chars);
  if (whole >= 0) {
    out->push_back(whole);
    return;
  }
  bool all_bytes = spec_.byte_fallback;
  for (unsigned char b : chars) all_bytes = all_bytes && byte_tokens_[b] >= 0;
  if (all_bytes) {
    for (unsigned char b : chars) out->push_back(byte_tokens_[b]);
  } else if (spec_.unk_id >= 0) {
    out->push_back(spec_.unk_id);
  }
}

absl::Status Tokenizer::EncodeSpmSegment(std::string_view text, bool first, std::vector<int32_t>* out) const {
  if (text.empty()) return absl::OkStatus();
  std::string s = ReplaceAll(text, " ", kSpmSpace);
  const bool starts_with_space = std::string_view(s).substr(0, kSpmSpace.size()) == kSpmSpace;
  bool prepend = false;
  switch (spec_.space_prefix) {
    case SpacePrefix::kEverySegment: prepend = true; break;
    case SpacePrefix::kFirstSegment: prepend = first && !starts_with_space; break;
    case SpacePrefix::kAlways: prepend = !starts_with_space; break;
    case SpacePrefix::kNone: break;
  }
  if (prepend) s.insert(0, kSpmSpace);

  std::vector<std::string_view> words;
  if (spec_.split_on_space) {
    // Split before every '▁' (HF Metaspace split=true, behaviour MergedWithNext).
    size_t start = 0;
    for (size_t i = kSpmSpace.size(); i < s.size(); ++i) {
      if (std::string_view(s).compare(i, kSpmSpace.size(), kSpmSpace) == 0 && i > start) {
        words.push_back(std::string_view(s).substr(start, i - start));
        start = i;
      }
    }
    words.push_back(std::string_view(s).substr(start));
  } else {
    words.push_back(s);
  }

  for (std::string_view word : words) {
    if (spec_.merges.empty() && !spec_.scores.empty()) {
      MergeByScore(word, out);
      continue;
    }
    // HF BPE with byte_fallback: characters (or their bytes) as initial symbols, then merges.
    std::vector<int32_t> symbols;
    bool prev_unk = false;
    for (size_t i = 0; i < word.size();) {
      uint32_t cp;
      const int len = unicode::ValidSequenceLength(word, i, &cp);
      const size_t before = symbols.size();
      AppendByteFallback(word.substr(i, len), &symbols);
      // fuse_unk: consecutive unknowns collapse into one <unk>.
      const bool is_unk = symbols.size() == before + 1 && symbols.back() == spec_.unk_id;
      if (is_unk && prev_unk) symbols.pop_back();
      prev_unk = is_unk;
      i += len;
    }
    MergeByRank(&symbols);
    out->insert(out->end(), symbols.begin(), symbols.end());
  }
  return absl::OkStatus();
}

// llama.cpp's llm_tokenizer_spm: repeatedly merge the adjacent pair whose concatenation is a token with
// the highest score (leftmost on ties); characters left unknown fall back to byte tokens.
void Tokenizer::MergeByScore(std::string_view text, std::vector<int32_t>* out) const {
  struct Sym {
    int prev, next;
    size_t start, len;
  };
  std::vector<Sym> sym;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const int len = unicode::ValidSequenceLength(text, i, &cp);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, -1, i, static_cast<size_t>(len)});
    if (idx > 0) sym[idx - 1].next = idx;
    i += len;
  }
  struct Bigram {
    float score;
    int left, right;
    size_t len;
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t len = sym[l].len + sym[r].len;
    const int32_t id = TokenId(text.substr(sym[l].start, len));
    if (id >= 0) queue.push({spec_.scores[id], l, r, len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = sym[b.left];
    Sym& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    AppendByteFallback(text.substr(sym[i].start, sym[i].len), out);
  }
}

std::string Tokenizer::TokenBytes(int32_t id, bool render_special) const {
  const std::string& t = spec_.tokens[id];
  switch (spec_.types[id]) {
    case TokenType::kControl:
      if (!render_special) return {};
      return t;
    case TokenType::kUnused:
      return {};
    case TokenType::kByte: {
      const int b = ParseByteToken(t);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : t;
    }
    default:
      break;
  }
  if (spec_.kind == TokenizerKind::kSpm) return ReplaceAll(t, kSpmSpace, " ");
  // As HF's ByteLevel decoder: a token whose characters are all in the byte map decodes to those
  // bytes; any other token (an added token with a space, say) is copied as it is.
  std::string bytes;
  if (!byte_level::Decode(t, &bytes)) return t;
  return bytes;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, DecodeOptions options) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsValid(ids[i])) {
      return InvalidArgument("decode: token id ", ids[i], " at position ", i,
                             " is outside the vocabulary of ", vocab_size());
    }
    bytes += TokenBytes(ids[i], options.render_special);
  }
  if (StripsLeadingSpace() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
  return Lossy(bytes);
}

}  // namespace specgen
