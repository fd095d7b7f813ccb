// libFuzzer entry: any byte string through the safetensors header parser must give a set of tensors or
// an error, never a crash or sanitizer report; every accepted tensor's bytes are read back.
#include <cstddef>
#include <cstdint>

#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto set = specgen::SafetensorsSet::Parse(data, size, "fuzz.safetensors");
  if (!set.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : (*set)->tensors()) {
    for (size_t i = 0; i < t.bytes; ++i) sink = sink ^ t.data[i];
  }
  return 0;
}
