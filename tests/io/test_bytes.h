// Test helpers for the io readers: a little-endian byte builder for hand-made (and deliberately
// broken) file images, and a per-test temporary directory.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace specgen::testing {

class Bytes {
 public:
  template <typename T>
  Bytes& Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& U8(uint8_t v) { return Pod(v); }
  Bytes& U32(uint32_t v) { return Pod(v); }
  Bytes& U64(uint64_t v) { return Pod(v); }
  Bytes& I64(int64_t v) { return Pod(v); }
  Bytes& Str(std::string_view s) {  // GGUF string: u64 length + bytes
    U64(s.size());
    return Raw(s);
  }
  Bytes& Raw(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  Bytes& PadTo(size_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
    return *this;
  }
  size_t size() const { return b_.size(); }
  const uint8_t* data() const { return b_.data(); }
  std::vector<uint8_t>& vec() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

// A fresh directory under TMPDIR, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/specgen_io_test.XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}
inline void WriteFile(const std::string& path, std::string_view text) {
  WriteFile(path, text.data(), text.size());
}

}  // namespace specgen::testing
