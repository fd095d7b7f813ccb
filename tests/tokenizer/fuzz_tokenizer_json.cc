// libFuzzer target: arbitrary bytes as tokenizer.json (first half) and as text to encode (second half).
// Built only with -DSPECGEN_FUZZ=ON and clang; see tests/tokenizer/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/tokenizer_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::string_view json = all.substr(0, size / 2), text = all.substr(size / 2);
  auto spec = specgen::ParseTokenizerJson(json, "", "fuzz.json");
  if (!spec.ok()) return 0;
  auto tok = specgen::Tokenizer::Create(*std::move(spec));
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode(text);
  if (ids.ok()) (void)(*tok)->Decode(*ids);
  return 0;
}
