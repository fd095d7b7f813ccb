// Safetensors checkpoints: a single model.safetensors or a sharded set named by
// model.safetensors.index.json. Headers are validated (offsets inside the buffer, no overlaps, byte
// counts equal to numel x element size) before any tensor is used (docs/formats.md §3).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"

namespace specgen {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;     // F32, F16 or BF16 (others are rejected with a clear error)
  std::vector<int64_t> shape;    // row-major, as in the header
  const uint8_t* data = nullptr; // inside the owning file's mapping
  size_t bytes = 0;
  std::string file;              // the shard it lives in
};

// One or more mapped .safetensors files seen as one set of tensors.
class SafetensorsSet {
 public:
  // `path` is a .safetensors file, an index .json, or a directory holding either.
  static absl::StatusOr<std::unique_ptr<SafetensorsSet>> Open(const std::string& path);
  // Parses one in-memory file image (fuzzing, tests); `bytes` must outlive the set.
  static absl::StatusOr<std::unique_ptr<SafetensorsSet>> Parse(const uint8_t* bytes, size_t size,
                                                               std::string name);
  ~SafetensorsSet();

  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // __metadata__

 private:
  SafetensorsSet() = default;
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  std::vector<Mapping> mappings_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace specgen
