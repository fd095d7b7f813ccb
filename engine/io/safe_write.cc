#include "engine/io/safe_write.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/core/status_macros.h"

namespace specgen {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

std::string Label(const std::string& path, const SafeWriteOptions& options) {
  return options.label.empty() ? path : options.label;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string_view KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Where the bytes go: `path` itself, or the file a symlink at `path` names (so the link survives).
absl::StatusOr<std::string> ResolveTarget(const std::string& path, const std::string& label) {
  if (path.empty()) return InvalidArgument(label, ": empty output path");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return path;
    return InvalidArgument(label, ": cannot inspect the output path: ", std::strerror(errno));
  }
  if (!S_ISLNK(st.st_mode)) return path;
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return InvalidArgument(label, ": is a symlink that cannot be followed (", std::strerror(errno),
                           "); remove it or name the file it should point at");
  }
  return std::string(resolved);
}

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

// Every regular file an input stands for: itself, or the files directly in a folder.
void InputIds(const std::string& input, std::vector<std::pair<FileId, std::string>>* out) {
  struct stat st;
  if (::stat(input.c_str(), &st) != 0) return;  // not a file (synth:PRESET) or unreadable: nothing
  if (!S_ISDIR(st.st_mode)) {
    out->push_back({FileId{st.st_dev, st.st_ino}, input});
    return;
  }
  DIR* dir = ::opendir(input.c_str());
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = input + "/" + name;
    struct stat cst;
    if (::stat(child.c_str(), &cst) == 0 && !S_ISDIR(cst.st_mode)) {
      out->push_back({FileId{cst.st_dev, cst.st_ino}, child});
    }
  }
  ::closedir(dir);
}

// The target (already resolved) may be absent or a regular file that is none of the inputs.
absl::Status CheckTarget(const std::string& target, const std::string& label,
                         const SafeWriteOptions& options) {
  struct stat st;
  if (::stat(target.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return InvalidArgument(label, ": cannot inspect ", target, ": ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        Cat(label, ": ", target, " exists and is ", KindOf(st.st_mode), "; refusing to replace it"));
  }
  const FileId id{st.st_dev, st.st_ino};
  std::vector<std::pair<FileId, std::string>> inputs;
  for (const std::string& input : options.inputs) InputIds(input, &inputs);
  for (const auto& [input_id, input_path] : inputs) {
    if (input_id == id) {
      return absl::FailedPreconditionError(Cat(label, ": is the same file as the input ", input_path,
                                               "; refusing to overwrite an input"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckOutputPath(const std::string& path, const SafeWriteOptions& options) {
  const std::string label = Label(path, options);
  ASSIGN_OR_RETURN(std::string target, ResolveTarget(path, label));
  return CheckTarget(target, label, options);
}

absl::StatusOr<SafeFileWriter> SafeFileWriter::Create(const std::string& path, SafeWriteOptions options) {
  const std::string label = Label(path, options);
  ASSIGN_OR_RETURN(std::string target, ResolveTarget(path, label));
  RETURN_IF_ERROR(CheckTarget(target, label, options));
  // Replacing a file keeps its permission bits, as editors do.
  struct stat st;
  if (::stat(target.c_str(), &st) == 0) options.mode = st.st_mode & 07777;

  SafeFileWriter w;
  w.target_ = target;
  w.options_ = std::move(options);
  w.options_.label = label;
  std::string tmpl = Cat(DirName(target), "/.", BaseName(target), ".tmp.XXXXXX");
  w.fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (w.fd_ < 0) {
    return InvalidArgument(label, ": cannot create a temporary file in ", DirName(target), ": ",
                           std::strerror(errno));
  }
  w.temp_ = tmpl;
  w.buffer_.reserve(kBufferBytes);
  return w;
}

SafeFileWriter::SafeFileWriter(SafeFileWriter&& o) noexcept
    : target_(std::move(o.target_)),
      temp_(std::move(o.temp_)),
      options_(std::move(o.options_)),
      fd_(std::exchange(o.fd_, -1)),
      written_(o.written_),
      buffer_(std::move(o.buffer_)) {
  o.temp_.clear();
}

SafeFileWriter& SafeFileWriter::operator=(SafeFileWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    target_ = std::move(o.target_);
    temp_ = std::move(o.temp_);
    options_ = std::move(o.options_);
    fd_ = std::exchange(o.fd_, -1);
    written_ = o.written_;
    buffer_ = std::move(o.buffer_);
    o.temp_.clear();
  }
  return *this;
}

SafeFileWriter::~SafeFileWriter() { Abandon(); }

void SafeFileWriter::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

absl::Status SafeFileWriter::Error(std::string_view what, int err) const {
  return absl::DataLossError(Cat(options_.label, ": ", what, ": ", std::strerror(err)));
}

absl::Status SafeFileWriter::WriteAll(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, n < (size_t{1} << 30) ? n : (size_t{1} << 30));
    if (k < 0) {
      if (errno == EINTR) continue;
      return Error("write failed", errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status SafeFileWriter::Flush() {
  RETURN_IF_ERROR(WriteAll(buffer_.data(), buffer_.size()));
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status SafeFileWriter::Write(const void* data, size_t bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(Cat(options_.label, ": writer is closed"));
  const auto* p = static_cast<const uint8_t*>(data);
  written_ += bytes;
  while (bytes > 0) {
    if (buffer_.empty() && bytes >= kBufferBytes) return WriteAll(p, bytes);  // no copy for large
    const size_t room = kBufferBytes - buffer_.size();
    const size_t k = bytes < room ? bytes : room;
    buffer_.insert(buffer_.end(), p, p + k);
    p += k;
    bytes -= k;
    if (buffer_.size() == kBufferBytes) RETURN_IF_ERROR(Flush());
  }
  return absl::OkStatus();
}

absl::Status SafeFileWriter::WriteZeros(size_t bytes) {
  static const uint8_t kZeros[4096] = {};
  while (bytes > 0) {
    const size_t k = bytes < sizeof(kZeros) ? bytes : sizeof(kZeros);
    RETURN_IF_ERROR(Write(kZeros, k));
    bytes -= k;
  }
  return absl::OkStatus();
}

absl::Status SafeFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(Cat(options_.label, ": writer is closed"));
  absl::Status status = Flush();
  if (status.ok() && ::fchmod(fd_, options_.mode) != 0) status = Error("cannot set permissions", errno);
  if (status.ok() && ::fsync(fd_) != 0) status = Error("fsync failed", errno);
  if (status.ok()) {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) status = Error("close failed", errno);
  }
  // The target may have changed since Create (another process, a slow conversion): check again.
  if (status.ok()) status = CheckTarget(target_, options_.label, options_);
  if (status.ok() && ::rename(temp_.c_str(), target_.c_str()) != 0) {
    status = Error(Cat("cannot rename ", temp_, " into place"), errno);
  }
  if (!status.ok()) {
    Abandon();
    return status;
  }
  temp_.clear();
  // The rename is durable once the folder is synced; some filesystems refuse fsync on a folder, which
  // leaves the file itself intact, so that failure is not an error.
  const int dir = ::open(DirName(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return absl::OkStatus();
}

absl::Status WriteFileSafely(const std::string& path, std::span<const uint8_t> bytes,
                             const SafeWriteOptions& options) {
  ASSIGN_OR_RETURN(SafeFileWriter writer, SafeFileWriter::Create(path, options));
  RETURN_IF_ERROR(writer.Write(bytes.data(), bytes.size()));
  return writer.Commit();
}

}  // namespace specgen
