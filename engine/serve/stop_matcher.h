// StopMatcher: the OpenAI `stop` strings over text that arrives piece by piece. Text that could still
// turn out to begin a stop string is held back, so a streamed reply never shows the start of a stop
// string that the next piece completes; once one matches, the text before it is the reply's end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace specgen::serve {

class StopMatcher {
 public:
  // Empty strings among `stops` are ignored (they would match everywhere).
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a piece; returns the text now safe to emit (possibly empty). After a match, returns the text
  // before the stop string once and nothing more.
  std::string Add(std::string_view piece);
  // The text held back (generation ended without a match): all of it is reply.
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace specgen::serve
