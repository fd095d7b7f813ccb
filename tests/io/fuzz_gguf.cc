// libFuzzer entry: any byte string through the GGUF parser must give a file or an error, never a
// crash, leak or sanitizer report. Reading every metadata value and tensor byte checks that what the
// parser accepted is really inside the buffer.
#include <cstddef>
#include <cstdint>

#include "engine/io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = specgen::GgufFile::Parse(data, size, "fuzz.gguf");
  if (!f.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const specgen::GgufTensorInfo& t : (*f)->tensors()) {
    const uint8_t* p = (*f)->TensorData(t);
    for (size_t i = 0; i < t.bytes; ++i) sink = sink ^ p[i];
  }
  for (const auto& [key, value] : (*f)->metadata()) {
    (void)value.AsInt();
    (void)value.AsFloat();
    (void)value.AsString();
  }
  return 0;
}
