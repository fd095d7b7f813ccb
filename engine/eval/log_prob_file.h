// The reference run of `specgen perplexity --save-logits FILE`, read back by `--kl-base FILE`: the
// tokens the text gave and, for every scored position, the run's log-likelihood of the next token, its
// top token and its whole distribution in the 16-bit encoding of log_probs.h. Layout in
// docs/formats.md §9. Written through SafeFileWriter (never half a file); read one position at a time,
// so neither side holds more than one distribution.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/eval/log_probs.h"
#include "engine/io/safe_write.h"

namespace specgen {

inline constexpr char kLogProbMagic[4] = {'S', 'G', 'L', 'P'};
inline constexpr uint32_t kLogProbVersion = 1;

struct LogProbHeader {
  uint32_t vocab_size = 0;
  uint32_t window = 0;  // tokens a window
  uint64_t n_positions = 0;
  std::vector<int32_t> tokens;
};

struct LogProbRecord {
  float nll = 0.0f;  // −log p(next token)
  int32_t top = 0;   // the most likely token (lowest id on ties)
  EncodedLogProbs log_probs;
};

class LogProbFileWriter {
 public:
  // Checks the output path (CheckOutputPath) and writes the header.
  static absl::StatusOr<LogProbFileWriter> Create(const std::string& path, const LogProbHeader& header,
                                                  SafeWriteOptions options);
  // Appends one position; its distribution must have header.vocab_size entries.
  absl::Status Append(const LogProbRecord& record);
  // Renames the file into place once every position of the header was appended.
  absl::Status Commit();

 private:
  explicit LogProbFileWriter(SafeFileWriter file) : file_(std::move(file)) {}
  std::optional<SafeFileWriter> file_;
  uint32_t vocab_size_ = 0;
  uint64_t n_positions_ = 0, appended_ = 0;
  std::string path_;
};

class LogProbFileReader {
 public:
  // Reads and checks the header (magic, version, counts against the file's size).
  static absl::StatusOr<std::unique_ptr<LogProbFileReader>> Open(const std::string& path);
  const LogProbHeader& header() const { return header_; }
  // The next position's record; an error past the last one or on a read failure.
  absl::Status Next(LogProbRecord* record);

 private:
  LogProbFileReader() = default;
  std::string path_;
  std::ifstream in_;
  LogProbHeader header_;
  uint64_t read_ = 0;
  std::vector<uint8_t> buffer_;
};

}  // namespace specgen
