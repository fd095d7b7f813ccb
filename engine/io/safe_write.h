// The one way specgen writes an output file (logits, convert, synth): never half a file, never over
// something that is not a regular file, never over one of the run's own inputs.
//
// SafeFileWriter creates a unique temporary file in the target's folder (mkstemp: O_CREAT | O_EXCL,
// so a symlink planted at a guessable name is never followed), and Commit() flushes, fsyncs and
// renames it over the target, then fsyncs the folder. Until Commit succeeds the target is untouched;
// a writer destroyed uncommitted removes its temporary file.
//
// The target is checked when the writer is created and again just before the rename:
//  - a target that exists must be a regular file (a directory, device node, FIFO or socket is
//    refused); a symlink is written through: the file it names is replaced and the link kept;
//  - the target must not be the same file (st_dev and st_ino, through symlinks and hard links) as
//    any input; an input that is a directory stands for every file in it (a Hugging Face checkpoint).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen {

struct SafeWriteOptions {
  // Files (or folders of files) the run reads; the output may be none of them.
  std::vector<std::string> inputs;
  // How errors name the output, e.g. "--out m.bin" or "OUT x.gguf"; empty: the path itself.
  std::string label;
  // Permissions of the new file (mkstemp creates 0600; umask is not consulted).
  mode_t mode = 0644;
};

// The checks SafeFileWriter makes, alone: run them before expensive work so that a bad output path
// fails at once rather than after an hour of conversion.
absl::Status CheckOutputPath(const std::string& path, const SafeWriteOptions& options);

class SafeFileWriter {
 public:
  static absl::StatusOr<SafeFileWriter> Create(const std::string& path, SafeWriteOptions options = {});

  SafeFileWriter(SafeFileWriter&& other) noexcept;
  SafeFileWriter& operator=(SafeFileWriter&& other) noexcept;
  SafeFileWriter(const SafeFileWriter&) = delete;
  SafeFileWriter& operator=(const SafeFileWriter&) = delete;
  ~SafeFileWriter();  // an uncommitted temporary file is removed

  // Appends bytes (buffered).
  absl::Status Write(const void* data, size_t bytes);
  absl::Status WriteZeros(size_t bytes);
  uint64_t written() const { return written_; }

  // Flush, fsync, re-check the target, rename into place, fsync the folder. Once only.
  absl::Status Commit();

  const std::string& temp_path() const { return temp_; }

 private:
  SafeFileWriter() = default;
  absl::Status WriteAll(const uint8_t* p, size_t n);
  absl::Status Flush();
  absl::Status Error(std::string_view what, int err) const;
  void Abandon();

  std::string target_;   // where the file goes (symlinks resolved)
  std::string temp_;     // the mkstemp file beside it
  SafeWriteOptions options_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::vector<uint8_t> buffer_;
};

// Writes `bytes` to `path` through a SafeFileWriter.
absl::Status WriteFileSafely(const std::string& path, std::span<const uint8_t> bytes,
                             const SafeWriteOptions& options = {});

}  // namespace specgen
