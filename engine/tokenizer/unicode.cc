#include "engine/tokenizer/unicode.h"

#include <algorithm>

#include "engine/core/status_macros.h"
#include "engine/tokenizer/unicode_tables.h"

namespace specgen::unicode {
namespace ut = unicode_tables;

int ValidSequenceLength(std::string_view s, size_t pos, uint32_t* cp) {
  const size_t n = s.size();
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c0 = b(pos);
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  }
  int len;
  uint32_t v, min;
  if ((c0 & 0xE0) == 0xC0) {
    len = 2, v = c0 & 0x1F, min = 0x80;
  } else if ((c0 & 0xF0) == 0xE0) {
    len = 3, v = c0 & 0x0F, min = 0x800;
  } else if ((c0 & 0xF8) == 0xF0) {
    len = 4, v = c0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (pos + len > n) return 0;
  for (int i = 1; i < len; ++i) {
    const uint8_t c = b(pos + i);
    if ((c & 0xC0) != 0x80) return 0;
    v = (v << 6) | (c & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

namespace {
absl::Status InvalidUtf8At(std::string_view s, size_t i) {
  return InvalidArgument("text: invalid UTF-8 at byte offset ", i, " (byte 0x",
                         absl::Hex(static_cast<uint8_t>(s[i]), absl::kZeroPad2), ")");
}
}  // namespace

absl::StatusOr<std::vector<uint32_t>> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = ValidSequenceLength(s, i, &cp);
    if (len == 0) return InvalidUtf8At(s, i);
    out.push_back(cp);
    i += len;
  }
  return out;
}

absl::Status ValidateUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = ValidSequenceLength(s, i, &cp);
    if (len == 0) return InvalidUtf8At(s, i);
    i += len;
  }
  return absl::OkStatus();
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int len = ValidSequenceLength(s, i, &cp);
    if (len == 0) break;
    i += len;
  }
  return i;
}

namespace {

// ASCII answers come from a 128-entry table built once; everything else from a binary search.
struct AsciiFlags {
  uint8_t f[128];
  AsciiFlags() {
    for (uint32_t c = 0; c < 128; ++c) f[c] = 0;
    for (size_t i = 0; i < ut::kCategoryRangeCount && ut::kCategoryRanges[i].first < 128; ++i) {
      const auto& r = ut::kCategoryRanges[i];
      for (uint32_t c = r.first; c <= r.last && c < 128; ++c) f[c] = r.flags;
    }
  }
};
const AsciiFlags& Ascii() {
  static const AsciiFlags kTable;
  return kTable;
}

}  // namespace

uint8_t CategoryFlags(uint32_t cp) {
  if (cp < 128) return Ascii().f[cp];
  const auto* begin = ut::kCategoryRanges;
  const auto* end = ut::kCategoryRanges + ut::kCategoryRangeCount;
  const auto* it = std::upper_bound(begin, end, cp,
                                    [](uint32_t v, const ut::CategoryRange& r) { return v < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->flags : 0;
}

bool IsLetter(uint32_t cp) { return CategoryFlags(cp) & ut::kLetter; }
bool IsNumber(uint32_t cp) { return CategoryFlags(cp) & ut::kNumber; }
bool IsWhitespace(uint32_t cp) { return CategoryFlags(cp) & ut::kWhitespace; }

const char* Version() { return ut::kUnicodeVersion; }

// ---- NFC (Unicode Standard Annex #15: decompose, canonical order, compose) ----
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

uint8_t Ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = ut::kCombiningClasses;
  const auto* end = begin + ut::kCombiningClassCount;
  const auto* it = std::lower_bound(begin, end, cp,
                                    [](const ut::CombiningClass& c, uint32_t v) { return c.cp < v; });
  return (it != end && it->cp == cp) ? it->cls : 0;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto* begin = ut::kDecompositions;
    const auto* end = begin + ut::kDecompositionCount;
    const auto* it = std::lower_bound(begin, end, cp,
                                      [](const ut::Decomposition& d, uint32_t v) { return d.cp < v; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), ut::kDecompositionPool + it->pool_offset,
                  ut::kDecompositionPool + it->pool_offset + it->length);
      return;
    }
  }
  out->push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* begin = ut::kCompositions;
  const auto* end = begin + ut::kCompositionCount;
  const auto* it = std::lower_bound(begin, end, std::pair(a, b), [](const ut::Composition& c, auto v) {
    return c.first < v.first || (c.first == v.first && c.second < v.second);
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

std::string NormalizeNfc(std::string_view s) {
  // Below U+0300 nothing composes or decomposes except Latin-1 letters with decompositions (which
  // are already NFC); text made only of such code points is returned as is.
  bool trivial = true;
  for (unsigned char c : s) {
    if (c >= 0xCC) {  // lead bytes of U+0300 and above
      trivial = false;
      break;
    }
  }
  if (trivial) return std::string(s);

  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int len = ValidSequenceLength(s, i, &cp);
    if (len == 0) {  // callers validate first; keep bytes' count moving regardless
      cp = 0xFFFD;
      len = 1;
    }
    Decompose(cp, &d);
    i += len;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (Ccc(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && Ccc(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](uint32_t a, uint32_t b) { return Ccc(a) < Ccc(b); });
    i = j;
  }
  // Canonical composition.
  if (!d.empty()) {
    size_t starter = 0, out = 1;
    int last_class = Ccc(d[0]) ? 256 : 0;
    for (size_t i = 1; i < d.size(); ++i) {
      const uint32_t ch = d[i];
      const int cls = Ccc(ch);
      const uint32_t composite = Compose(d[starter], ch);
      if (composite && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) starter = out;
      last_class = cls;
      d[out++] = ch;
    }
    d.resize(out);
  }
  std::string r;
  r.reserve(s.size());
  for (uint32_t cp : d) AppendUtf8(cp, &r);
  return r;
}

}  // namespace specgen::unicode
