// libFuzzer entry: any byte string through the safetensors header parser must give a set of tensors or
// an error, never a crash or sanitizer report; every accepted tensor's bytes are read back.
#include <cstddef>
#include <cstdint>

#include "engine/io/safetensors.h"

#include <cstring>
#include <vector>

namespace {
void ParseAndTouch(const uint8_t* data, size_t size) {
  auto set = specgen::SafetensorsSet::Parse(data, size, "fuzz.safetensors");
  if (!set.ok()) return;
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : (*set)->tensors()) {
    for (size_t i = 0; i < t.bytes; ++i) sink = sink ^ t.data[i];
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParseAndTouch(data, size);
  // Mutations of the JSON rarely keep the u64 header length consistent, so also parse a copy whose
  // length field makes the header everything after it except a data tail whose length the last byte
  // picks.
  if (size >= 9) {
    std::vector<uint8_t> fixed(data, data + size);
    const uint64_t rest = size - 8;
    const uint64_t tail = data[size - 1] % 64;
    const uint64_t header = tail < rest ? rest - tail : rest;
    std::memcpy(fixed.data(), &header, 8);
    ParseAndTouch(fixed.data(), fixed.size());
  }
  return 0;
}
