#include "engine/tokenizer/compatibility.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "engine/core/status_macros.h"

namespace specgen {
namespace {

absl::Status Incompatible(const std::string& why) {
  return absl::FailedPreconditionError(
      Cat("draft and target tokenizers are incompatible: ", why,
          " (speculation would propose tokens the target reads differently)"));
}

std::string Quote(const std::string& s) { return Cat("\"", absl::Utf8SafeCEscape(s), "\""); }

// One past the last token that is not an unused placeholder: GGUF converters pad the vocabulary to
// the embedding size ([PAD151669]...), tokenizer.json files do not, and the same vocabulary must
// compare equal either way.
int32_t UsedVocabSize(const Tokenizer& t) {
  int32_t n = t.vocab_size();
  while (n > 0 && t.Type(n - 1) == TokenType::kUnused) --n;
  return n;
}

bool IsSpecialType(TokenType t) { return t == TokenType::kControl || t == TokenType::kUserDefined; }

}  // namespace

absl::Status CheckCompatible(const Tokenizer& target, const Tokenizer& draft) {
  if (target.kind() != draft.kind()) {
    return Incompatible(Cat("the target's tokenizer is ", target.kind_name(), ", the draft's ", draft.kind_name()));
  }
  const int32_t nt = UsedVocabSize(target), nd = UsedVocabSize(draft);
  if (std::abs(nt - nd) > kMaxVocabSizeDifference) {
    return Incompatible(Cat("vocabulary sizes ", nt, " (target) and ", nd, " (draft) differ by more than ",
                            kMaxVocabSizeDifference));
  }
  if (target.add_bos() != draft.add_bos() || target.bos_id() != draft.bos_id()) {
    return Incompatible(Cat("BOS differs: target add_bos=", target.add_bos(), " id ", target.bos_id(),
                            ", draft add_bos=", draft.add_bos(), " id ", draft.bos_id()));
  }
  if (target.add_eos() != draft.add_eos() || target.eos_id() != draft.eos_id()) {
    return Incompatible(Cat("EOS differs: target add_eos=", target.add_eos(), " id ", target.eos_id(),
                            ", draft add_eos=", draft.add_eos(), " id ", draft.eos_id()));
  }
  const int32_t shared = std::min(nt, nd);
  for (int32_t id = 0; id < shared; ++id) {
    if (target.TokenText(id) != draft.TokenText(id)) {
      return Incompatible(Cat("token ", id, " is ", Quote(target.TokenText(id)), " in the target and ",
                              Quote(draft.TokenText(id)), " in the draft"));
    }
    if (IsSpecialType(target.Type(id)) != IsSpecialType(draft.Type(id))) {
      return Incompatible(Cat("token ", id, " ", Quote(target.TokenText(id)), " is ",
                              IsSpecialType(target.Type(id)) ? "special" : "ordinary", " in the target but ",
                              IsSpecialType(draft.Type(id)) ? "special" : "ordinary", " in the draft"));
    }
    if (target.IsEog(id) != draft.IsEog(id)) {
      return Incompatible(Cat("token ", id, " ", Quote(target.TokenText(id)), " ends generation in the ",
                              target.IsEog(id) ? "target" : "draft", " only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace specgen
