#include "engine/tokenizer/pre_tokenizer.h"

#include <cstdint>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/unicode_tables.h"

namespace specgen {
namespace {

using unicode_tables::kLetter;
using unicode_tables::kLower;
using unicode_tables::kMark;
using unicode_tables::kNumber;
using unicode_tables::kUpper;
using unicode_tables::kWhitespace;

// The text as code points with their byte offsets (off has one extra entry: the end).
struct CodePoints {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> flags;
  std::vector<uint32_t> off;
  explicit CodePoints(std::string_view text) {
    cp.reserve(text.size());
    flags.reserve(text.size());
    off.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
      uint32_t c;
      int len = unicode::ValidSequenceLength(text, i, &c);
      if (len == 0) {  // callers validate; an invalid byte is treated as a symbol of its own
        c = 0xFFFD;
        len = 1;
      }
      cp.push_back(c);
      flags.push_back(unicode::CategoryFlags(c));
      off.push_back(static_cast<uint32_t>(i));
      i += len;
    }
    off.push_back(static_cast<uint32_t>(text.size()));
  }
  size_t size() const { return cp.size(); }
  bool L(size_t k) const { return k < cp.size() && (flags[k] & kLetter); }
  bool N(size_t k) const { return k < cp.size() && (flags[k] & kNumber); }
  bool S(size_t k) const { return k < cp.size() && (flags[k] & kWhitespace); }
  // [^\s\p{L}\p{N}]
  bool Other(size_t k) const { return k < cp.size() && !(flags[k] & (kLetter | kNumber | kWhitespace)); }
  bool CrLf(size_t k) const { return k < cp.size() && (cp[k] == '\r' || cp[k] == '\n'); }
  // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: a letter that is not Ll, or a mark.
  bool UpperLike(size_t k) const {
    return k < cp.size() && (((flags[k] & kLetter) && !(flags[k] & kLower)) || (flags[k] & kMark));
  }
  // o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}]: a letter that is not Lu or Lt, or a mark.
  bool LowerLike(size_t k) const {
    return k < cp.size() && (((flags[k] & kLetter) && !(flags[k] & kUpper)) || (flags[k] & kMark));
  }
};

// ASCII lowercase, plus U+017F LATIN SMALL LETTER LONG S, which Unicode case folding (and so
// Oniguruma's (?i:...)) maps to 's'.
uint32_t FoldCase(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

// Length in code points of a contraction 's 't 're 've 'm 'll 'd at k (0 if none).
size_t Contraction(const CodePoints& t, size_t k, bool ignore_case) {
  if (k + 1 >= t.size() || t.cp[k] != '\'') return 0;
  const auto at = [&](size_t j) -> uint32_t {
    if (j >= t.size()) return 0;
    return ignore_case ? FoldCase(t.cp[j]) : t.cp[j];
  };
  const uint32_t c1 = at(k + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  const uint32_t c2 = at(k + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// End (exclusive, in code points) of the match at i for the Qwen2 / Llama-3 regex.
size_t MatchQwen2(const CodePoints& t, size_t i, size_t max_digits) {
  const size_t n = t.size();
  if (size_t len = Contraction(t, i, /*ignore_case=*/true)) return i + len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t j = i;
  if (!t.CrLf(i) && !t.L(i) && !t.N(i) && t.L(i + 1)) j = i + 1;
  if (t.L(j)) {
    while (t.L(j)) ++j;
    return j;
  }
  // \p{N} or \p{N}{1,3}
  if (t.N(i)) {
    j = i + 1;
    while (j < n && j - i < max_digits && t.N(j)) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  j = (t.cp[i] == ' ' && t.Other(i + 1)) ? i + 1 : i;
  if (t.Other(j)) {
    while (t.Other(j)) ++j;
    while (t.CrLf(j)) ++j;
    return j;
  }
  // What is left starts with whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+
  size_t end = i;
  size_t last_newline = SIZE_MAX;
  while (t.S(end)) {
    if (t.CrLf(end)) last_newline = end;
    ++end;
  }
  if (end == i) return i + 1;  // unreachable: every code point is L, N, whitespace or other
  if (last_newline != SIZE_MAX) return last_newline + 1;
  if (end == n) return end;
  if (end - i >= 2) return end - 1;  // leave the last space to prefix the next word
  return end;
}

// o200k's first word branch from s: [Up]*[Low]+(contraction)? with Oniguruma's backtracking: the
// greedy [Up]* gives back one code point at a time until [Low]+ can start (at the run's end only an Ll
// can; inside the run only an Lm, Lo or mark, the code points both classes hold). 0 if none can.
size_t O200kLowerWord(const CodePoints& t, size_t s) {
  size_t e = s;
  while (t.UpperLike(e)) ++e;
  for (size_t k = e;; --k) {
    if (t.LowerLike(k)) {
      size_t j = k;
      while (t.LowerLike(j)) ++j;
      return j + Contraction(t, j, /*ignore_case=*/true);
    }
    if (k == s) return 0;
  }
}

// The second word branch from s: [Up]+[Low]*(contraction)? (greedy; it never needs to backtrack).
size_t O200kUpperWord(const CodePoints& t, size_t s) {
  size_t e = s;
  while (t.UpperLike(e)) ++e;
  if (e == s) return 0;
  while (t.LowerLike(e)) ++e;
  return e + Contraction(t, e, /*ignore_case=*/true);
}

size_t MatchO200k(const CodePoints& t, size_t i) {
  const size_t n = t.size();
  // [^\r\n\p{L}\p{N}]? before either word branch: tried taken first (greedy), then not.
  const bool prefix = !t.CrLf(i) && !t.L(i) && !t.N(i);
  for (auto word : {O200kLowerWord, O200kUpperWord}) {
    if (prefix) {
      if (size_t j = word(t, i + 1)) return j;
    }
    if (size_t j = word(t, i)) return j;
  }
  // \p{N}{1,3}
  if (t.N(i)) {
    size_t j = i + 1;
    while (j - i < 3 && t.N(j)) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  size_t j = (t.cp[i] == ' ' && t.Other(i + 1)) ? i + 1 : i;
  if (t.Other(j)) {
    while (t.Other(j)) ++j;
    while (t.CrLf(j) || (j < n && t.cp[j] == '/')) ++j;
    return j;
  }
  // Whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+, as in MatchQwen2.
  size_t end = i;
  size_t last_newline = SIZE_MAX;
  while (t.S(end)) {
    if (t.CrLf(end)) last_newline = end;
    ++end;
  }
  if (end == i) return i + 1;  // unreachable: every code point is L, N, whitespace or other
  if (last_newline != SIZE_MAX) return last_newline + 1;
  if (end == n) return end;
  if (end - i >= 2) return end - 1;
  return end;
}

size_t MatchGpt2(const CodePoints& t, size_t i) {
  const size_t n = t.size();
  if (size_t len = Contraction(t, i, /*ignore_case=*/false)) return i + len;
  const size_t k = (t.cp[i] == ' ' && i + 1 < n && !t.S(i + 1)) ? i + 1 : i;
  size_t j = k;
  if (t.L(k)) {
    while (t.L(j)) ++j;
    return j;
  }
  if (t.N(k)) {
    while (t.N(j)) ++j;
    return j;
  }
  if (t.Other(k)) {
    while (t.Other(j)) ++j;
    return j;
  }
  size_t end = i;
  while (t.S(end)) ++end;
  if (end == i) return i + 1;
  if (end == n) return end;
  if (end - i >= 2) return end - 1;
  return end;
}

}  // namespace

std::string_view PreTokenizerRegex(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kQwen2:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case PreTokenizerKind::kLlama3:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case PreTokenizerKind::kGpt2:
      return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    case PreTokenizerKind::kO200k:
      return "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
             "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
             "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  }
  return "";
}

std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  const CodePoints t(text);
  for (size_t i = 0; i < t.size();) {
    size_t j;
    switch (kind) {
      case PreTokenizerKind::kQwen2:
        j = MatchQwen2(t, i, 1);
        break;
      case PreTokenizerKind::kLlama3:
        j = MatchQwen2(t, i, 3);
        break;
      case PreTokenizerKind::kO200k:
        j = MatchO200k(t, i);
        break;
      default:
        j = MatchGpt2(t, i);
        break;
    }
    words.push_back(text.substr(t.off[i], t.off[j] - t.off[i]));
    i = j;
  }
  return words;
}

}  // namespace specgen
