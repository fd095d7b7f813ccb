#include "engine/io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "engine/core/status_macros.h"

namespace specgen {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr uint64_t kMaxKeyBytes = 65535;
// Nested arrays are allowed by the spec; the bound keeps recursion (and hostile files) finite.
constexpr int kMaxArrayDepth = 8;
// Each parsed value costs ~50 bytes of memory against 1 byte in the file; capping the total keeps a
// hostile file from turning into an out-of-memory kill. Real files hold well under a million
// (Qwen3: 151936 tokens + 151387 merges + token types).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 26;
// Smallest possible encodings, used to reject absurd counts against the bytes that remain.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims=0, type, offset

std::string TypeName(uint32_t t) {
  static constexpr const char* kNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  if (t < std::size(kNames)) return kNames[t];
  return Cat("type ", t);
}

// Bytes of one element of a fixed-size metadata type; 0 for string and array.
uint64_t FixedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

bool IsValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

uint64_t MinEncodedSize(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 4 + 8;
  return FixedSize(t);
}

// Bounds-checked little-endian cursor over the file image. Every read checks the remaining bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  // Counts parsed metadata values against kMaxMetadataValues.
  absl::Status CountValues(uint64_t n, const std::string& key) {
    values_ += n;
    if (values_ > kMaxMetadataValues) {
      return DataLoss(name_, ": metadata '", key, "' brings the file over ", kMaxMetadataValues,
                      " metadata values");
    }
    return absl::OkStatus();
  }
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return DataLoss(name_, ": truncated GGUF file: ", what, " needs ", n, " bytes at offset ",
                      pos_, " but only ", remaining(), " remain");
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the host is little-endian (x86-64, aarch64)
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(std::string_view what, uint64_t max_len) {
    ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > max_len) {
      return DataLoss(name_, ": ", what, " at offset ", pos_ - 8, " has length ", len,
                      ", over the limit of ", max_len);
    }
    RETURN_IF_ERROR(Need(len, what));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t values_ = 0;
  const std::string& name_;
};

absl::StatusOr<GgufValue> ReadValue(Reader& r, GgufType type, const std::string& name,
                                    const std::string& key, int depth);

absl::StatusOr<GgufValue> ReadScalar(Reader& r, GgufType type, const std::string& name,
                                     const std::string& key) {
  GgufValue out;
  out.type = type;
  const std::string what = Cat("value of '", key, "'");
  switch (type) {
    case GgufType::kU8: { ASSIGN_OR_RETURN(uint8_t v, r.Read<uint8_t>(what)); out.v = uint64_t{v}; break; }
    case GgufType::kI8: { ASSIGN_OR_RETURN(int8_t v, r.Read<int8_t>(what)); out.v = int64_t{v}; break; }
    case GgufType::kU16: { ASSIGN_OR_RETURN(uint16_t v, r.Read<uint16_t>(what)); out.v = uint64_t{v}; break; }
    case GgufType::kI16: { ASSIGN_OR_RETURN(int16_t v, r.Read<int16_t>(what)); out.v = int64_t{v}; break; }
    case GgufType::kU32: { ASSIGN_OR_RETURN(uint32_t v, r.Read<uint32_t>(what)); out.v = uint64_t{v}; break; }
    case GgufType::kI32: { ASSIGN_OR_RETURN(int32_t v, r.Read<int32_t>(what)); out.v = int64_t{v}; break; }
    case GgufType::kU64: { ASSIGN_OR_RETURN(uint64_t v, r.Read<uint64_t>(what)); out.v = v; break; }
    case GgufType::kI64: { ASSIGN_OR_RETURN(int64_t v, r.Read<int64_t>(what)); out.v = v; break; }
    case GgufType::kF32: { ASSIGN_OR_RETURN(float v, r.Read<float>(what)); out.v = double{v}; break; }
    case GgufType::kF64: { ASSIGN_OR_RETURN(double v, r.Read<double>(what)); out.v = v; break; }
    case GgufType::kBool: {
      ASSIGN_OR_RETURN(uint8_t v, r.Read<uint8_t>(what));
      if (v > 1) {
        return DataLoss(name, ": bool ", what, " holds byte ", int{v}, " (expected 0 or 1)");
      }
      out.v = v != 0;
      break;
    }
    case GgufType::kString: {
      ASSIGN_OR_RETURN(std::string s, r.ReadString(what, std::numeric_limits<uint64_t>::max()));
      out.v = std::move(s);
      break;
    }
    case GgufType::kArray:
      break;  // handled by ReadValue
  }
  return out;
}

absl::StatusOr<GgufValue> ReadValue(Reader& r, GgufType type, const std::string& name,
                                    const std::string& key, int depth) {
  if (type != GgufType::kArray) return ReadScalar(r, type, name, key);
  if (depth >= kMaxArrayDepth) {
    return DataLoss(name, ": metadata '", key, "' nests arrays deeper than ", kMaxArrayDepth);
  }
  ASSIGN_OR_RETURN(uint32_t elem, r.Read<uint32_t>(Cat("array type of '", key, "'")));
  if (!IsValidType(elem)) {
    return DataLoss(name, ": metadata '", key, "' is an array of unknown value type ", elem);
  }
  ASSIGN_OR_RETURN(uint64_t count, r.Read<uint64_t>(Cat("array length of '", key, "'")));
  const GgufType elem_type = static_cast<GgufType>(elem);
  // Reject absurd counts by the bytes left, before reserving anything.
  const uint64_t min_size = MinEncodedSize(elem_type);
  if (count > r.remaining() / min_size) {
    return DataLoss(name, ": metadata '", key, "' claims ", count, " elements of ",
                    TypeName(elem), " but only ", r.remaining(), " bytes remain in the file");
  }
  RETURN_IF_ERROR(r.CountValues(count, key));
  auto arr = std::make_shared<GgufArray>();
  arr->elem_type = elem_type;
  arr->items.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(GgufValue item, ReadValue(r, elem_type, name, key, depth + 1));
    arr->items.push_back(std::move(item));
  }
  GgufValue out;
  out.type = GgufType::kArray;
  out.v = std::move(arr);
  return out;
}

// ---- Writing ------------------------------------------------------------------------------------

template <typename T>
void AppendPod(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void AppendString(std::vector<uint8_t>& out, std::string_view s) {
  AppendPod<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// The integer a value holds, whichever of the two integer alternatives it uses.
std::optional<__int128> IntegerOf(const GgufValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<__int128>(*u);
  return std::nullopt;
}

absl::Status CheckIntRange(const GgufValue& v, __int128 lo, __int128 hi, const std::string& key) {
  const std::optional<__int128> i = IntegerOf(v);
  if (!i) return InvalidArgument("GGUF metadata '", key, "': ", TypeName(static_cast<uint32_t>(v.type)),
                                 " value does not hold an integer");
  if (*i < lo || *i > hi) {
    return InvalidArgument("GGUF metadata '", key, "': value out of range for ",
                           TypeName(static_cast<uint32_t>(v.type)));
  }
  return absl::OkStatus();
}

absl::Status EncodeValue(const GgufValue& v, const std::string& key, int depth,
                         std::vector<uint8_t>& out) {
  const auto i = [&]() { return IntegerOf(v).value_or(0); };
  switch (v.type) {
    case GgufType::kU8: RETURN_IF_ERROR(CheckIntRange(v, 0, UINT8_MAX, key)); AppendPod<uint8_t>(out, i()); break;
    case GgufType::kI8: RETURN_IF_ERROR(CheckIntRange(v, INT8_MIN, INT8_MAX, key)); AppendPod<int8_t>(out, i()); break;
    case GgufType::kU16: RETURN_IF_ERROR(CheckIntRange(v, 0, UINT16_MAX, key)); AppendPod<uint16_t>(out, i()); break;
    case GgufType::kI16: RETURN_IF_ERROR(CheckIntRange(v, INT16_MIN, INT16_MAX, key)); AppendPod<int16_t>(out, i()); break;
    case GgufType::kU32: RETURN_IF_ERROR(CheckIntRange(v, 0, UINT32_MAX, key)); AppendPod<uint32_t>(out, i()); break;
    case GgufType::kI32: RETURN_IF_ERROR(CheckIntRange(v, INT32_MIN, INT32_MAX, key)); AppendPod<int32_t>(out, i()); break;
    case GgufType::kU64: RETURN_IF_ERROR(CheckIntRange(v, 0, UINT64_MAX, key)); AppendPod<uint64_t>(out, i()); break;
    case GgufType::kI64: RETURN_IF_ERROR(CheckIntRange(v, INT64_MIN, INT64_MAX, key)); AppendPod<int64_t>(out, i()); break;
    case GgufType::kF32:
    case GgufType::kF64: {
      const std::optional<double> d = v.AsFloat();
      if (!d) return InvalidArgument("GGUF metadata '", key, "': float value holds no number");
      if (v.type == GgufType::kF32) {
        AppendPod<float>(out, static_cast<float>(*d));
      } else {
        AppendPod<double>(out, *d);
      }
      break;
    }
    case GgufType::kBool: {
      const auto* b = std::get_if<bool>(&v.v);
      if (!b) return InvalidArgument("GGUF metadata '", key, "': bool value holds no bool");
      AppendPod<uint8_t>(out, *b ? 1 : 0);
      break;
    }
    case GgufType::kString: {
      const auto* s = std::get_if<std::string>(&v.v);
      if (!s) return InvalidArgument("GGUF metadata '", key, "': string value holds no string");
      AppendString(out, *s);
      break;
    }
    case GgufType::kArray: {
      const GgufArray* a = v.AsArray();
      if (!a) return InvalidArgument("GGUF metadata '", key, "': array value holds no array");
      if (depth >= kMaxArrayDepth) {
        return InvalidArgument("GGUF metadata '", key, "': arrays nested deeper than ", kMaxArrayDepth);
      }
      AppendPod<uint32_t>(out, static_cast<uint32_t>(a->elem_type));
      AppendPod<uint64_t>(out, a->items.size());
      for (const GgufValue& item : a->items) {
        if (item.type != a->elem_type) {
          return InvalidArgument("GGUF metadata '", key, "': array of ",
                                 TypeName(static_cast<uint32_t>(a->elem_type)), " holds a ",
                                 TypeName(static_cast<uint32_t>(item.type)));
        }
        RETURN_IF_ERROR(EncodeValue(item, key, depth + 1, out));
      }
      break;
    }
    default:
      return InvalidArgument("GGUF metadata '", key, "': unknown value type ",
                             static_cast<uint32_t>(v.type));
  }
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

// ---- GgufValue ----------------------------------------------------------------------------------

std::optional<int64_t> GgufValue::AsInt() const {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  // Integers convert too: some converters write float hyper-parameters (rope base) as integers.
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const { return std::get_if<std::string>(&v); }

const GgufArray* GgufValue::AsArray() const {
  if (const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v)) return a->get();
  return nullptr;
}

// ---- GgufFile -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path, ": cannot open GGUF file: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(Cat(path, ": fstat failed: ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path, ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return DataLoss(path, ": empty file, not a GGUF file");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return absl::InternalError(Cat(path, ": mmap failed: ", std::strerror(e)));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(addr);
  f->size_ = size;
  f->mapping_ = addr;
  RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* bytes, size_t size,
                                                          std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->base_ = bytes;
  f->size_ = bytes == nullptr ? 0 : size;
  RETURN_IF_ERROR(f->ParseAll());
  return f;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status GgufFile::ParseAll() {
  const std::string& name = path_;
  Reader r(base_, size_, name);
  if (size_ < 4) return DataLoss(name, ": truncated GGUF file: ", size_, " bytes, too short for the magic");
  ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kMagic) {
    return DataLoss(name, ": not a GGUF file (bad magic 0x", absl::Hex(magic, absl::kZeroPad8),
                    ", expected \"GGUF\")");
  }
  ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("version"));
  if ((version_ & 0xFFFFu) == 0 && version_ != 0) {
    return DataLoss(name, ": GGUF version field 0x", absl::Hex(version_),
                    " looks byte-swapped: big-endian GGUF files are not supported");
  }
  if (version_ != 2 && version_ != 3) {
    return DataLoss(name, ": unsupported GGUF version ", version_, " (supported: 2, 3)");
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata count"));
  // Absurd counts (2^60) are rejected against the bytes left before anything is allocated.
  if (n_kv > r.remaining() / kMinKvBytes) {
    return DataLoss(name, ": metadata count ", n_kv, " is impossible: only ", r.remaining(),
                    " bytes remain in the file");
  }
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    return DataLoss(name, ": tensor count ", n_tensors, " is impossible: only ", r.remaining(),
                    " bytes remain in the file");
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string key, r.ReadString(Cat("metadata key #", i), kMaxKeyBytes));
    ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>(Cat("value type of '", key, "'")));
    if (!IsValidType(type)) {
      return DataLoss(name, ": metadata '", key, "' has unknown value type ", type);
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(r, static_cast<GgufType>(type), name, key, 0));
    if (kv_.count(key) != 0) return DataLoss(name, ": duplicate metadata key '", key, "'");
    kv_.emplace(std::move(key), std::move(value));
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment")) {
    if (a->type != GgufType::kU32) {
      return DataLoss(name, ": general.alignment must be u32, found ",
                      TypeName(static_cast<uint32_t>(a->type)));
    }
    const uint64_t v = std::get<uint64_t>(a->v);
    if (!IsPowerOfTwo(v)) {
      return DataLoss(name, ": general.alignment ", v, " is not a power of two");
    }
    alignment_ = static_cast<uint32_t>(v);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    ASSIGN_OR_RETURN(t.name, r.ReadString(Cat("name of tensor #", i), kMaxKeyBytes));
    if (t.name.empty()) return DataLoss(name, ": tensor #", i, " has an empty name");
    const std::string what = Cat("tensor '", t.name, "'");
    ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>(Cat("n_dims of ", what)));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return DataLoss(name, ": ", what, " has ", n_dims, " dimensions (expected 1 to ", kMaxDims, ")");
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(int64_t ne, r.Read<int64_t>(Cat("shape of ", what)));
      if (ne < 0) return DataLoss(name, ": ", what, " has negative dimension ne[", d, "] = ", ne);
      if (ne != 0 && numel > std::numeric_limits<int64_t>::max() / ne) {
        return DataLoss(name, ": ", what, " has an element count that overflows int64");
      }
      numel *= ne;
      t.ne.push_back(ne);
    }
    ASSIGN_OR_RETURN(uint32_t ggml_type, r.Read<uint32_t>(Cat("type of ", what)));
    const std::optional<DType> dt = DTypeFromGgmlId(ggml_type);
    if (!dt) {
      const std::string_view type_name = GgmlTypeName(ggml_type);
      return DataLoss(name, ": ", what, ": type ",
                      type_name.empty() ? Cat("id ", ggml_type, " (not a ggml type)")
                                        : Cat(type_name, " (", ggml_type, ")"),
                      " is not supported; supported: ", SupportedGgmlTypeNames());
    }
    t.dtype = *dt;
    ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>(Cat("data offset of ", what)));
    const int64_t row = t.ne[0];
    const int64_t rows = row == 0 ? 0 : numel / row;
    absl::StatusOr<size_t> bytes = TensorBytes(t.dtype, row, rows);
    if (!bytes.ok()) return DataLoss(name, ": ", what, ": ", bytes.status().message());
    t.bytes = *bytes;
    if (tensor_index_.count(t.name) != 0) return DataLoss(name, ": duplicate tensor name '", t.name, "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = AlignUp(r.pos(), alignment_);
  if (data_offset_ > size_) {
    if (!tensors_.empty()) {
      return DataLoss(name, ": truncated GGUF file: tensor data would start at ", data_offset_,
                      " but the file has ", size_, " bytes");
    }
    data_offset_ = size_;
  }
  const uint64_t data_size = size_ - data_offset_;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset % alignment_ != 0) {
      return DataLoss(name, ": tensor '", t.name, "' offset ", t.offset,
                      " is not a multiple of the alignment ", alignment_);
    }
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return DataLoss(name, ": tensor '", t.name, "' (", t.bytes, " bytes at data offset ", t.offset,
                      ") extends past the end of the file (data section holds ", data_size, " bytes)");
    }
  }
  // Overlaps: sort the non-empty tensors by offset and compare neighbours.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.bytes > b.offset) {
      return DataLoss(name, ": tensors '", a.name, "' and '", b.name, "' overlap (", a.offset, "+",
                      a.bytes, " > ", b.offset, ")");
    }
  }
  return absl::OkStatus();
}

// ---- GgufWriter ---------------------------------------------------------------------------------

namespace {
GgufValue MakeScalar(GgufType t, std::variant<int64_t, uint64_t, double, bool, std::string,
                                              std::shared_ptr<GgufArray>> v) {
  GgufValue out;
  out.type = t;
  out.v = std::move(v);
  return out;
}
}  // namespace

void GgufWriter::Set(std::string key, GgufValue v) {
  for (auto& [k, old] : kv_) {
    if (k == key) {  // later Set of a key replaces the earlier value
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::SetU32(std::string key, uint32_t v) { Set(std::move(key), MakeScalar(GgufType::kU32, uint64_t{v})); }
void GgufWriter::SetI32(std::string key, int32_t v) { Set(std::move(key), MakeScalar(GgufType::kI32, int64_t{v})); }
void GgufWriter::SetU64(std::string key, uint64_t v) { Set(std::move(key), MakeScalar(GgufType::kU64, v)); }
void GgufWriter::SetF32(std::string key, float v) { Set(std::move(key), MakeScalar(GgufType::kF32, double{v})); }
void GgufWriter::SetBool(std::string key, bool v) { Set(std::move(key), MakeScalar(GgufType::kBool, v)); }
void GgufWriter::SetString(std::string key, std::string v) {
  Set(std::move(key), MakeScalar(GgufType::kString, std::move(v)));
}

void GgufWriter::SetStringArray(std::string key, std::vector<std::string> v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kString;
  a->items.reserve(v.size());
  for (std::string& s : v) a->items.push_back(MakeScalar(GgufType::kString, std::move(s)));
  Set(std::move(key), MakeScalar(GgufType::kArray, std::move(a)));
}

void GgufWriter::SetI32Array(std::string key, std::vector<int32_t> v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kI32;
  a->items.reserve(v.size());
  for (int32_t x : v) a->items.push_back(MakeScalar(GgufType::kI32, int64_t{x}));
  Set(std::move(key), MakeScalar(GgufType::kArray, std::move(a)));
}

void GgufWriter::SetF32Array(std::string key, std::vector<float> v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kF32;
  a->items.reserve(v.size());
  for (float x : v) a->items.push_back(MakeScalar(GgufType::kF32, double{x}));
  Set(std::move(key), MakeScalar(GgufType::kArray, std::move(a)));
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> ne, DType dtype,
                                   const void* data, size_t bytes) {
  if (name.empty()) return InvalidArgument("GGUF tensor: empty name");
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
    return InvalidArgument("GGUF tensor '", name, "': ", ne.size(), " dimensions (expected 1 to ",
                           kMaxDims, ")");
  }
  int64_t numel = 1;
  for (int64_t d : ne) {
    if (d < 0) return InvalidArgument("GGUF tensor '", name, "': negative dimension ", d);
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
      return InvalidArgument("GGUF tensor '", name, "': element count overflows int64");
    }
    numel *= d;
  }
  const int64_t rows = ne[0] == 0 ? 0 : numel / ne[0];
  absl::StatusOr<size_t> want = TensorBytes(dtype, ne[0], rows);
  if (!want.ok()) return InvalidArgument("GGUF tensor '", name, "': ", want.status().message());
  if (*want != bytes) {
    return InvalidArgument("GGUF tensor '", name, "': ", bytes, " bytes given, its shape and ",
                           Name(dtype), " need ", *want);
  }
  if (data == nullptr && bytes > 0) return InvalidArgument("GGUF tensor '", name, "': null data");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgument("GGUF tensor '", name, "' added twice");
  }
  tensors_.push_back(PendingTensor{std::move(name), std::move(ne), dtype, data, bytes});
  return absl::OkStatus();
}

absl::Status GgufWriter::Write(const std::string& path, uint32_t alignment, const SafeWriteOptions& output,
                              const std::function<void(size_t done, size_t total)>& progress) const {
  if (!IsPowerOfTwo(alignment)) {
    return InvalidArgument(path, ": GGUF alignment ", alignment, " is not a power of two");
  }
  // Header and tensor infos are built in memory first, so every encoding error surfaces before a
  // temporary file exists.
  std::vector<std::pair<std::string, GgufValue>> kv = kv_;
  bool have_alignment = false;
  for (const auto& [k, v] : kv) {
    if (k != "general.alignment") continue;
    have_alignment = true;
    if (v.type != GgufType::kU32 || v.AsInt() != static_cast<int64_t>(alignment)) {
      return InvalidArgument(path, ": metadata general.alignment disagrees with the alignment ",
                             alignment, " the writer was asked for");
    }
  }
  if (!have_alignment && alignment != kDefaultAlignment) {
    kv.emplace_back("general.alignment", MakeScalar(GgufType::kU32, uint64_t{alignment}));
  }

  std::vector<uint8_t> head;
  AppendPod<uint32_t>(head, kMagic);
  AppendPod<uint32_t>(head, 3);
  AppendPod<uint64_t>(head, tensors_.size());
  AppendPod<uint64_t>(head, kv.size());
  for (const auto& [k, v] : kv) {
    if (k.size() > kMaxKeyBytes) return InvalidArgument(path, ": metadata key longer than 65535 bytes");
    AppendString(head, k);
    AppendPod<uint32_t>(head, static_cast<uint32_t>(v.type));
    absl::Status s = EncodeValue(v, k, 0, head);
    if (!s.ok()) return InvalidArgument(path, ": ", s.message());
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const PendingTensor& t : tensors_) {
    AppendString(head, t.name);
    AppendPod<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) AppendPod<int64_t>(head, d);
    AppendPod<uint32_t>(head, static_cast<uint32_t>(t.dtype));
    AppendPod<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = AlignUp(offset + t.bytes, alignment);
  }
  const uint64_t data_start = AlignUp(head.size(), alignment);

  ASSIGN_OR_RETURN(SafeFileWriter w, SafeFileWriter::Create(path, output));
  RETURN_IF_ERROR(w.Write(head.data(), head.size()));
  RETURN_IF_ERROR(w.WriteZeros(data_start - head.size()));
  size_t total = 0, done = 0;
  for (const PendingTensor& t : tensors_) total += t.bytes;
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    RETURN_IF_ERROR(w.WriteZeros(data_start + offsets[i] - w.written()));
    const auto* data = static_cast<const uint8_t*>(tensors_[i].data);
    for (size_t at = 0; at < tensors_[i].bytes; at += kChunk) {
      const size_t n = std::min(kChunk, tensors_[i].bytes - at);
      RETURN_IF_ERROR(w.Write(data + at, n));
      done += n;
      if (progress) progress(done, total);
    }
  }
  if (!tensors_.empty()) RETURN_IF_ERROR(w.WriteZeros(data_start + offset - w.written()));  // padding
  RETURN_IF_ERROR(w.Commit());
  return absl::OkStatus();
}

}  // namespace specgen
