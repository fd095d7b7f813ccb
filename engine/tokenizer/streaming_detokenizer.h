// Turns generated ids into text as they arrive, never emitting half a UTF-8 character: bytes of an
// incomplete sequence are held until the next token completes it (or Finish() gives up on them).
// SentencePiece tokenizers have their first leading space stripped, as HF's decoder does.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace specgen {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false)
      : tok_(tokenizer), render_special_(render_special) {}

  // Adds one id; returns the text that became complete (possibly empty). Out-of-range id: error.
  absl::StatusOr<std::string> Add(int32_t id);
  // Whatever is held back, with incomplete sequences replaced by U+FFFD.
  std::string Finish();
  // Everything emitted so far plus Finish() equals Tokenizer::Decode of the same ids.

 private:
  const Tokenizer& tok_;
  bool render_special_;
  bool at_start_ = true;  // nothing (not even a space) has been produced yet
  std::string pending_;   // bytes not yet emitted
};

}  // namespace specgen
