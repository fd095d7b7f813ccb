// GPT-2's bytes_to_unicode: every byte maps to one printable code point, so byte-level BPE vocabularies
// store arbitrary bytes as text. Bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68,
// in increasing order, to U+0100, U+0101, ... (0x20 -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace specgen::byte_level {

uint32_t ByteToCodepoint(uint8_t b);
// The byte a code point stands for, or -1 when the code point is not in the map.
int CodepointToByte(uint32_t cp);

// Bytes -> their code points' UTF-8 (what vocabulary entries look like).
std::string Encode(std::string_view bytes);
// Mapped UTF-8 -> raw bytes. Returns false (and leaves a best effort in *out) when `mapped` holds a
// code point outside the map or is not valid UTF-8.
bool Decode(std::string_view mapped, std::string* out);

}  // namespace specgen::byte_level
