#include "engine/model/model_spec.h"

namespace specgen {

std::string_view ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kMixtral: return "mixtral";
  }
  return "unknown";
}

}  // namespace specgen
