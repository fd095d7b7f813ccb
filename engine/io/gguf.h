// GGUF v3 files: reading (every metadata type, tensor infos, alignment, data offsets) and writing.
// Nothing in a file is trusted: every count, length, offset and shape is checked against the file size
// and for overflow before use; errors name the file and what is wrong (docs/formats.md §1).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/safe_write.h"

namespace specgen {

// GGUF metadata value types (enum gguf_type).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufType elem_type = GgufType::kU8;
  std::vector<GgufValue> items;
};
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Integers of every width are held as int64/uint64, floats as double, bool as bool.
  std::variant<int64_t, uint64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  // Typed access; nullopt when the value is not of a compatible kind (any integer type converts to
  // an integer if it fits; f32/f64 to double).
  std::optional<int64_t> AsInt() const;
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const GgufArray* AsArray() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // as in the file: ne[0] fastest
  DType dtype = DType::kF32;
  uint64_t offset = 0;      // relative to the data section
  size_t bytes = 0;         // exact byte size
};

// A GGUF file opened read-only and memory-mapped (never registered with CUDA).
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive the GgufFile.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* bytes, size_t size,
                                                         std::string name);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t file_size() const { return size_; }

  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // Pointer to a tensor's bytes inside the mapping (valid while this GgufFile lives).
  const uint8_t* TensorData(const GgufTensorInfo& t) const { return base_ + data_offset_ + t.offset; }

 private:
  GgufFile() = default;
  absl::Status ParseAll();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // non-null when this object owns an mmap
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file. Tensors are laid out contiguously in the order added, each aligned.
class GgufWriter {
 public:
  void SetU32(std::string key, uint32_t v);
  void SetI32(std::string key, int32_t v);
  void SetU64(std::string key, uint64_t v);
  void SetF32(std::string key, float v);
  void SetBool(std::string key, bool v);
  void SetString(std::string key, std::string v);
  void SetStringArray(std::string key, std::vector<std::string> v);
  void SetI32Array(std::string key, std::vector<int32_t> v);
  void SetF32Array(std::string key, std::vector<float> v);
  void Set(std::string key, GgufValue v);  // any value, including nested arrays

  // Adds a tensor: `ne` in GGUF order (ne[0] fastest); `data` must hold exactly the tensor's bytes and
  // stay valid until Write returns.
  absl::Status AddTensor(std::string name, std::vector<int64_t> ne, DType dtype, const void* data,
                         size_t bytes);
  // Writes to `path` through a SafeFileWriter (safe_write.h): no partial file on error, no target
  // that is not a regular file or is one of `output.inputs`. `progress` (may be empty) gets the tensor
  // bytes written of their total after every 64 MiB and every tensor: a large model's file takes
  // seconds to write.
  absl::Status Write(const std::string& path, uint32_t alignment = 32, const SafeWriteOptions& output = {},
                     const std::function<void(size_t done, size_t total)>& progress = nullptr) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> ne;
    DType dtype;
    const void* data;
    size_t bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace specgen
