#include "moe/host/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "engine/core/str_cat.h"
#include "engine/core/status_macros.h"
#include "moe/host/host_expert.h"
#include "nlohmann/json.hpp"

namespace specgen::moe_host {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "specgen-calibration";

absl::Status Bad(std::string_view source, std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(Cat("calibration ", source, ": field '", field, "' ", what));
}

absl::StatusOr<double> PositiveNumber(const json& j, std::string_view source, std::string_view field) {
  if (!j.is_number()) return Bad(source, field, Cat("must be a number, got ", j.dump()));
  const double v = j.get<double>();
  if (!std::isfinite(v) || v <= 0) return Bad(source, field, Cat("must be a positive finite number, got ", j.dump()));
  return v;
}

absl::StatusOr<int64_t> PositiveInt(const json& j, std::string_view source, std::string_view field) {
  if (!j.is_number_integer() || j.get<int64_t>() <= 0) {
    return Bad(source, field, Cat("must be a positive integer, got ", j.dump()));
  }
  return j.get<int64_t>();
}

absl::StatusOr<const json*> Field(const json& obj, std::string_view source, std::string_view path,
                                  const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(source, Cat(path, key), "is missing");
  return &*it;
}

// The f16 scale fields of a block (docs/formats.md §2): given one normal value in the random weights,
// so that no product meets a subnormal (which would time a slow path a real model never takes).
std::vector<int> HalfOffsets(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: return {0};
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

std::vector<uint8_t> RandomMatrix(std::mt19937_64& rng, DType t, int64_t rows, int64_t cols) {
  const DTypeInfo& info = Info(t);
  std::vector<uint8_t> b(static_cast<size_t>(rows * (cols / info.block_elems) * info.block_bytes));
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(&b[i], &r, 8);
  }
  const uint16_t scale = 0x2c00;  // 1/16
  for (size_t blk = 0; blk < b.size() / static_cast<size_t>(info.block_bytes); ++blk) {
    for (int off : HalfOffsets(t)) std::memcpy(&b[blk * info.block_bytes + off], &scale, 2);
    if (t == DType::kMXFP4) b[blk * info.block_bytes] = 123;  // its E8M0 scale: 2^(123 - 127) = 1/16
  }
  return b;
}

}  // namespace

double Calibration::HostSeconds(int64_t experts, size_t bytes, int n) const {
  const int i = std::clamp(n, 1, kCalibratedTokens) - 1;
  const double per_expert = 1.0 / experts_per_second[i] * static_cast<double>(bytes) / static_cast<double>(expert_bytes);
  return static_cast<double>(experts) * per_expert;
}

std::string DefaultCalibrationPath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return Cat(xdg, "/specgen/calibration.json");
  const char* home = std::getenv("HOME");
  return Cat(home != nullptr ? home : ".", "/.cache/specgen/calibration.json");
}

std::string CalibrationJson(const Calibration& c) {
  json j;
  j["format"] = kFormat;
  j["version"] = kCalibrationVersion;
  j["host"] = {{"isa", c.isa}, {"threads", c.threads}};
  j["expert"] = {{"type", Name(c.expert_type)}, {"hidden", c.hidden}, {"ffn", c.ffn}, {"bytes", c.expert_bytes}};
  j["experts_per_second"] = c.experts_per_second;
  j["link_gbps"] = c.link_gbps ? json(*c.link_gbps) : json(nullptr);
  return j.dump(2) + "\n";
}

absl::StatusOr<Calibration> ParseCalibration(std::string_view text, std::string_view source) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(Cat("calibration ", source, ": not JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(Cat("calibration ", source, ": not a JSON object"));
  Calibration c;
  ASSIGN_OR_RETURN(const json* format, Field(j, source, "", "format"));
  if (*format != kFormat) return Bad(source, "format", Cat("must be \"", kFormat, "\", got ", format->dump()));
  ASSIGN_OR_RETURN(const json* version, Field(j, source, "", "version"));
  if (!version->is_number_integer() || version->get<int64_t>() != kCalibrationVersion) {
    return Bad(source, "version", Cat("must be ", kCalibrationVersion, " (this build's; calibrate again), got ",
                                      version->dump()));
  }
  ASSIGN_OR_RETURN(const json* host, Field(j, source, "", "host"));
  if (!host->is_object()) return Bad(source, "host", "must be an object");
  ASSIGN_OR_RETURN(const json* isa, Field(*host, source, "host.", "isa"));
  if (!isa->is_string() || !ParseIsa(isa->get<std::string>()).ok()) {
    return Bad(source, "host.isa", Cat("must be scalar, avx2, avx512 or avx512vnni, got ", isa->dump()));
  }
  c.isa = isa->get<std::string>();
  ASSIGN_OR_RETURN(const json* threads, Field(*host, source, "host.", "threads"));
  ASSIGN_OR_RETURN(const int64_t t, PositiveInt(*threads, source, "host.threads"));
  c.threads = static_cast<int>(std::min<int64_t>(t, 1 << 20));
  ASSIGN_OR_RETURN(const json* expert, Field(j, source, "", "expert"));
  if (!expert->is_object()) return Bad(source, "expert", "must be an object");
  ASSIGN_OR_RETURN(const json* type, Field(*expert, source, "expert.", "type"));
  bool known = false;
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}) {
    if (type->is_string() && type->get<std::string>() == Name(d)) c.expert_type = d, known = true;
  }
  if (!known) {
    return Bad(source, "expert.type", Cat("must be q8_0, q4_0, q4_k, q5_k, q6_k or mxfp4, got ", type->dump()));
  }
  ASSIGN_OR_RETURN(const json* hidden, Field(*expert, source, "expert.", "hidden"));
  ASSIGN_OR_RETURN(c.hidden, PositiveInt(*hidden, source, "expert.hidden"));
  ASSIGN_OR_RETURN(const json* ffn, Field(*expert, source, "expert.", "ffn"));
  ASSIGN_OR_RETURN(c.ffn, PositiveInt(*ffn, source, "expert.ffn"));
  ASSIGN_OR_RETURN(const json* bytes, Field(*expert, source, "expert.", "bytes"));
  ASSIGN_OR_RETURN(const int64_t b, PositiveInt(*bytes, source, "expert.bytes"));
  c.expert_bytes = static_cast<size_t>(b);
  ASSIGN_OR_RETURN(const json* rates, Field(j, source, "", "experts_per_second"));
  if (!rates->is_array() || rates->size() != kCalibratedTokens) {
    return Bad(source, "experts_per_second", Cat("must be an array of ", kCalibratedTokens, " numbers (n = 1..",
                                                 kCalibratedTokens, "), got ", rates->dump()));
  }
  for (int i = 0; i < kCalibratedTokens; ++i) {
    ASSIGN_OR_RETURN(c.experts_per_second[i],
                     PositiveNumber((*rates)[i], source, Cat("experts_per_second[", i, "]")));
  }
  ASSIGN_OR_RETURN(const json* link, Field(j, source, "", "link_gbps"));
  if (!link->is_null()) {
    ASSIGN_OR_RETURN(const double gbps, PositiveNumber(*link, source, "link_gbps"));
    c.link_gbps = gbps;
  }
  return c;
}

absl::Status WriteCalibration(const Calibration& c, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) return absl::PermissionDeniedError(Cat("calibration ", path, ": cannot create its folder: ", ec.message()));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << CalibrationJson(c);
    if (!out.flush()) return absl::PermissionDeniedError(Cat("calibration ", path, ": cannot write ", tmp));
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::PermissionDeniedError(Cat("calibration ", path, ": cannot move it into place"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Calibration> ReadCalibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat("calibration ", path, ": cannot open it (run `specgen plan --calibrate`)"));
  std::stringstream s;
  s << in.rdbuf();
  return ParseCalibration(s.str(), path);
}

absl::StatusOr<Calibration> MeasureHost(HostPool& pool, Isa isa, DType type, int64_t hidden, int64_t ffn,
                                        const std::function<void(int n)>& progress, double min_seconds) {
  // Enough distinct experts to exceed any last-level cache (at least 64 MiB in all, at most 32).
  std::mt19937_64 rng(44);
  struct Owned {
    std::vector<uint8_t> gate, up, down;
  };
  const DTypeInfo& info = Info(type);
  const size_t expert_bytes = static_cast<size_t>(3 * ffn * (hidden / info.block_elems) * info.block_bytes);
  const int count = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / std::max<size_t>(expert_bytes, 1) + 1, 2, 32));
  std::vector<Owned> owned(static_cast<size_t>(count));
  std::vector<HostExpert> experts;
  for (Owned& o : owned) {
    o.gate = RandomMatrix(rng, type, ffn, hidden);
    o.up = RandomMatrix(rng, type, ffn, hidden);
    o.down = RandomMatrix(rng, type, hidden, ffn);
    experts.push_back({{type, o.gate.data(), ffn, hidden}, {type, o.up.data(), ffn, hidden}, {type, o.down.data(), hidden, ffn}});
  }
  RETURN_IF_ERROR(CheckHostExpert(experts[0]));
  Calibration c;
  c.isa = std::string(IsaName(isa));
  c.threads = pool.threads();
  c.expert_type = type, c.hidden = hidden, c.ffn = ffn, c.expert_bytes = expert_bytes;
  HostExpertRunner runner(pool, isa);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(kCalibratedTokens * hidden)), y(x.size());
  for (float& v : x) v = normal(rng);
  int next = 0;
  for (int n = 1; n <= kCalibratedTokens; ++n) {
    // Warm once, then at least 3 runs and min_seconds; the best run's rate (the least disturbed).
    RETURN_IF_ERROR(runner.Run(experts[next++ % count], x.data(), n, y.data()));
    double best = 1e30, spent = 0;
    for (int rep = 0; rep < 3 || spent < min_seconds; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(runner.Run(experts[next++ % count], x.data(), n, y.data()));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      spent += s;
      if (rep > 1000) break;
    }
    c.experts_per_second[n - 1] = 1.0 / std::max(best, 1e-9);
    if (progress) progress(n);
  }
  return c;
}

}  // namespace specgen::moe_host
