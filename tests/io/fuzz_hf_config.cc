// libFuzzer target: arbitrary bytes as a Hugging Face config.json. Every input must give a ModelSpec
// that passes Validate or an error, never a crash, a sanitizer report or an exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = specgen::ModelSpecFromHfConfigText(text, "fuzz/config.json");
  if (spec.ok() && !specgen::Validate(*spec, "fuzz/config.json").ok()) std::abort();
  return 0;
}
