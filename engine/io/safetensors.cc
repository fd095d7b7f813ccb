#include "engine/io/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

using Json = nlohmann::json;

// safetensors' own reader limit (MAX_HEADER_SIZE in safetensors/src/tensor.rs).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxDims = 8;  // generous: checkpoints here hold at most 3-D tensors

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
std::string DirOf(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}
std::string JoinPath(const std::string& dir, const std::string& file) {
  if (dir.empty() || dir.back() == '/') return dir + file;
  return dir + "/" + file;
}

absl::StatusOr<DType> DTypeOf(const std::string& file, const std::string& tensor, const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return InvalidArgument(file, ": tensor '", tensor, "' has dtype ", s,
                         ", which is not supported (supported: F32, F16, BF16)");
}

// Validates one header and appends its tensors; `buffer` is the byte buffer after the header.
absl::Status ParseHeader(const std::string& file, const uint8_t* bytes, size_t size,
                         std::map<std::string, SafetensorsTensor>& tensors,
                         std::map<std::string, std::string>& metadata) {
  if (size < 8) return DataLoss(file, ": truncated safetensors file: ", size, " bytes, no header length");
  uint64_t n;
  std::memcpy(&n, bytes, 8);
  if (n > kMaxHeaderBytes) {
    return DataLoss(file, ": safetensors header length ", n, " exceeds the limit of ", kMaxHeaderBytes);
  }
  if (n > size - 8) {
    return DataLoss(file, ": truncated safetensors file: header of ", n, " bytes but only ", size - 8,
                    " bytes follow the length");
  }
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  if (n == 0 || text[0] != '{') return DataLoss(file, ": safetensors header is not a JSON object");
  const Json header = Json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return DataLoss(file, ": safetensors header is not valid JSON");
  if (!header.is_object()) return DataLoss(file, ": safetensors header is not a JSON object");

  const uint8_t* buffer = bytes + 8 + n;
  const uint64_t buffer_size = size - 8 - n;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  std::map<std::string, SafetensorsTensor> local;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return DataLoss(file, ": __metadata__ is not a JSON object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return DataLoss(file, ": __metadata__ value '", m.key(), "' is not a string");
        }
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = Cat("tensor '", name, "'");
    if (!entry.is_object()) return DataLoss(file, ": ", what, " is not a JSON object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return DataLoss(file, ": ", what, " lacks a string dtype");
    if (sh == entry.end() || !sh->is_array()) return DataLoss(file, ": ", what, " lacks a shape array");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      return DataLoss(file, ": ", what, " lacks data_offsets [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = file;
    ASSIGN_OR_RETURN(t.dtype, DTypeOf(file, name, dt->get<std::string>()));
    if (sh->size() > static_cast<size_t>(kMaxDims)) {
      return DataLoss(file, ": ", what, " has ", sh->size(), " dimensions (at most ", kMaxDims, ")");
    }
    uint64_t numel = 1;
    for (const Json& d : *sh) {
      if (!d.is_number_unsigned()) {
        return DataLoss(file, ": ", what, " has a shape entry that is not a non-negative integer");
      }
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / v)) {
        return DataLoss(file, ": ", what, " has a shape whose element count overflows");
      }
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const Json& b = (*off)[0];
    const Json& e = (*off)[1];
    if (!b.is_number_unsigned() || !e.is_number_unsigned()) {
      return DataLoss(file, ": ", what, " has data_offsets that are not non-negative integers");
    }
    const uint64_t begin = b.get<uint64_t>();
    const uint64_t end = e.get<uint64_t>();
    if (begin > end || end > buffer_size) {
      return DataLoss(file, ": ", what, " data_offsets [", begin, ", ", end,
                      "] lie outside the data buffer of ", buffer_size, " bytes");
    }
    const uint64_t elem = static_cast<uint64_t>(Info(t.dtype).block_bytes);
    if (numel > std::numeric_limits<uint64_t>::max() / elem || end - begin != numel * elem) {
      return DataLoss(file, ": ", what, " holds ", end - begin, " bytes but its shape and dtype need ",
                      numel, " x ", elem);
    }
    t.data = buffer + begin;
    t.bytes = static_cast<size_t>(end - begin);
    auto [pos, inserted] = local.emplace(name, std::move(t));
    spans.push_back(Span{begin, end, &pos->first});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;  // empty tensors occupy no bytes
    if (prev != nullptr && prev->end > s.begin) {
      return DataLoss(file, ": tensors '", *prev->name, "' and '", *s.name, "' overlap in the data buffer");
    }
    prev = &s;
  }
  for (auto& [name, t] : local) {
    auto existing = tensors.find(name);
    if (existing != tensors.end()) {
      return DataLoss(file, ": tensor '", name, "' also appears in ", existing->second.file);
    }
  }
  tensors.merge(local);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Parse(const uint8_t* bytes, size_t size,
                                                                       std::string name) {
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  if (bytes == nullptr) size = 0;
  RETURN_IF_ERROR(ParseHeader(name, bytes, size, set->tensors_, set->metadata_));
  return set;
}

SafetensorsSet::~SafetensorsSet() {
  for (const Mapping& m : mappings_) ::munmap(m.addr, m.size);
}

const SafetensorsTensor* SafetensorsSet::Find(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

// Maps one file read-only; the caller records the mapping so the set unmaps it.
absl::StatusOr<std::pair<void*, size_t>> MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path, ": cannot open safetensors file: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path, ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return DataLoss(path, ": truncated safetensors file: ", size, " bytes, no header length");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return absl::InternalError(Cat(path, ": mmap failed: ", std::strerror(e)));
  return std::make_pair(addr, size);
}

// Shard names come from a file: keep them inside the checkpoint's directory.
bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Open(const std::string& path) {
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  std::vector<std::string> shards;
  std::string index_path;
  if (IsDir(path)) {
    if (IsFile(JoinPath(path, "model.safetensors.index.json"))) {
      index_path = JoinPath(path, "model.safetensors.index.json");
    } else if (IsFile(JoinPath(path, "model.safetensors"))) {
      shards.push_back(JoinPath(path, "model.safetensors"));
    } else {
      DIR* d = ::opendir(path.c_str());
      if (d == nullptr) return NotFound(path, ": cannot list directory: ", std::strerror(errno));
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (EndsWith(n, ".safetensors") && IsFile(JoinPath(path, n))) shards.push_back(JoinPath(path, n));
      }
      ::closedir(d);
      std::sort(shards.begin(), shards.end());
      if (shards.empty()) {
        return NotFound(path, ": no model.safetensors.index.json or *.safetensors files in the directory");
      }
    }
  } else if (EndsWith(path, ".json")) {
    index_path = path;
  } else {
    shards.push_back(path);
  }

  std::map<std::string, std::string> weight_map;  // tensor -> shard path
  if (!index_path.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path));
    const Json index = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) {
      return DataLoss(index_path, ": safetensors index is not a JSON object");
    }
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return DataLoss(index_path, ": safetensors index lacks a weight_map object");
    }
    std::set<std::string> files;
    const std::string dir = DirOf(index_path);
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string() || !IsPlainFileName(it.value().get<std::string>())) {
        return DataLoss(index_path, ": weight_map entry for '", it.key(),
                        "' is not a file name in the index's directory");
      }
      const std::string shard = JoinPath(dir, it.value().get<std::string>());
      weight_map[it.key()] = shard;
      files.insert(shard);
    }
    for (const std::string& f : files) {
      if (!IsFile(f)) {
        return NotFound(index_path, ": shard ", f, " named by the index is missing");
      }
      shards.push_back(f);
    }
  }

  for (const std::string& shard : shards) {
    ASSIGN_OR_RETURN(auto mapping, MapFile(shard));
    set->mappings_.push_back(Mapping{mapping.first, mapping.second});
    RETURN_IF_ERROR(ParseHeader(shard, static_cast<const uint8_t*>(mapping.first), mapping.second,
                                set->tensors_, set->metadata_));
  }
  for (const auto& [tensor, shard] : weight_map) {
    auto it = set->tensors_.find(tensor);
    if (it == set->tensors_.end() || it->second.file != shard) {
      return DataLoss(index_path, ": the index places tensor '", tensor, "' in ", shard,
                      " but that shard does not hold it");
    }
  }
  return set;
}

}  // namespace specgen
