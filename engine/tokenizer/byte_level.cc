#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/unicode.h"

namespace specgen::byte_level {
namespace {

struct Maps {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  Maps() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? b : next++;
      to_utf8[b] = unicode::EncodeUtf8(to_cp[b]);
    }
  }
};
const Maps& M() {
  static const Maps kMaps;
  return kMaps;
}

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return M().to_cp[b]; }

int CodepointToByte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    return static_cast<int>(cp);
  }
  if (cp < 256 || cp >= 256 + 68) return -1;
  // The 68 remapped bytes, in increasing order.
  static const std::array<uint8_t, 68> kRemapped = [] {
    std::array<uint8_t, 68> r{};
    int k = 0;
    for (int b = 0; b < 256; ++b) {
      if (M().to_cp[b] >= 256) r[k++] = static_cast<uint8_t>(b);
    }
    return r;
  }();
  return kRemapped[cp - 256];
}

std::string Encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += M().to_utf8[b];
  return out;
}

bool Decode(std::string_view mapped, std::string* out) {
  bool ok = true;
  for (size_t i = 0; i < mapped.size();) {
    uint32_t cp;
    const int len = unicode::ValidSequenceLength(mapped, i, &cp);
    if (len == 0) {
      ok = false;
      ++i;
      continue;
    }
    const int b = CodepointToByte(cp);
    if (b < 0) {
      ok = false;
      out->append(mapped.substr(i, len));
    } else {
      out->push_back(static_cast<char>(b));
    }
    i += len;
  }
  return ok;
}

}  // namespace specgen::byte_level
