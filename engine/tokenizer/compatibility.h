// Whether a draft model's tokenizer can propose tokens for a target model's: the ids must mean the
// same text, or speculation silently proposes garbage. Rule (llama.cpp's common_speculative_are_
// compatible, made stricter): same kind; every id in the shared range has the same text and the same
// control/normal type (llama.cpp skips ids < 5, we check them all); vocabulary sizes, not counting
// trailing unused padding tokens, differ by at most kMaxVocabSizeDifference (llama.cpp's margin); same
// BOS/EOS ids and add_bos/add_eos (llama.cpp compares the ids only when they are added; we always
// do); the same end-of-generation ids in the shared range. Callers let the user override a failure.
#pragma once

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {

inline constexpr int32_t kMaxVocabSizeDifference = 128;  // llama.cpp SPEC_VOCAB_MAX_SIZE_DIFFERENCE

// OK, or FailedPrecondition saying exactly why (the first differing id and both texts, ...).
absl::Status CheckCompatible(const Tokenizer& target, const Tokenizer& draft);

}  // namespace specgen
