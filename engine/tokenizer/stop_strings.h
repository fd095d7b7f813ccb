// Stop strings (--stop, llama.cpp's -r / --reverse-prompt) over streamed text: generation ends where
// the text first contains one of them, and the output ends just before it. Text that could still be
// the start of a stop string is held back until the next piece decides, so nothing of a stop string
// is ever printed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace specgen {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);  // empty strings are ignored

  // Adds a piece of streamed text; returns what may be printed now. After a stop string appears,
  // stopped() is true and every later piece returns nothing.
  std::string Add(std::string_view piece);
  // At the end of generation: what was held back (empty when stopped).
  std::string Finish();

  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace specgen
