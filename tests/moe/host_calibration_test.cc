// The calibration file (moe/host/calibration.h): round trip, and refusal of garbage naming the field:
// every truncation, wrong types, missing fields, NaN (JSON writes it as null), zero, negative, a wrong
// version or array length; written whole or not at all; and a (short) measurement.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "moe/host/calibration.h"
#include "nlohmann/json.hpp"

namespace specgen::moe_host {
namespace {

using nlohmann::json;

Calibration Example() {
  Calibration c;
  c.isa = "avx512vnni";
  c.threads = 16;
  c.expert_type = DType::kQ4_K;
  c.hidden = 2048, c.ffn = 768, c.expert_bytes = 2654208;
  for (int i = 0; i < kCalibratedTokens; ++i) c.experts_per_second[i] = 4000.0 / (1 + 0.25 * i);
  c.link_gbps = 53.5;
  return c;
}

std::string ErrorOf(const json& j) {
  const auto parsed = ParseCalibration(j.dump(), "test.json");
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(HostCalibration, RoundTrips) {
  for (bool link : {true, false}) {
    Calibration c = Example();
    if (!link) c.link_gbps.reset();
    const auto back = ParseCalibration(CalibrationJson(c), "test.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->isa, c.isa);
    EXPECT_EQ(back->threads, c.threads);
    EXPECT_EQ(back->expert_type, c.expert_type);
    EXPECT_EQ(back->hidden, c.hidden);
    EXPECT_EQ(back->ffn, c.ffn);
    EXPECT_EQ(back->expert_bytes, c.expert_bytes);
    EXPECT_EQ(back->experts_per_second, c.experts_per_second);  // JSON keeps a double's 17 digits
    EXPECT_EQ(back->link_gbps, c.link_gbps);
  }
}

TEST(HostCalibration, RefusesEveryTruncation) {
  const std::string text = json::parse(CalibrationJson(Example())).dump();
  for (size_t len = 0; len < text.size(); ++len) {
    EXPECT_FALSE(ParseCalibration(text.substr(0, len), "t.json").ok()) << "prefix of " << len;
  }
}

TEST(HostCalibration, RefusesBadFieldsNamingThem) {
  const json good = json::parse(CalibrationJson(Example()));
  struct Case {
    json::json_pointer where;
    json value;
    std::string field;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Case cases[] = {
      {json::json_pointer("/format"), "other", "'format'"},
      {json::json_pointer("/version"), 2, "'version'"},
      {json::json_pointer("/version"), "1", "'version'"},
      {json::json_pointer("/host"), 3, "'host'"},
      {json::json_pointer("/host/isa"), "sse9", "'host.isa'"},
      {json::json_pointer("/host/threads"), -4, "'host.threads'"},
      {json::json_pointer("/host/threads"), 1.5, "'host.threads'"},
      {json::json_pointer("/expert/type"), "f16", "'expert.type'"},
      {json::json_pointer("/expert/hidden"), 0, "'expert.hidden'"},
      {json::json_pointer("/expert/ffn"), "768", "'expert.ffn'"},
      {json::json_pointer("/expert/bytes"), -1, "'expert.bytes'"},
      {json::json_pointer("/experts_per_second"), json::array({1, 2, 3}), "'experts_per_second'"},
      {json::json_pointer("/experts_per_second"), 5, "'experts_per_second'"},
      {json::json_pointer("/experts_per_second/3"), -2.0, "'experts_per_second[3]'"},
      {json::json_pointer("/experts_per_second/0"), 0.0, "'experts_per_second[0]'"},
      {json::json_pointer("/experts_per_second/15"), nan, "'experts_per_second[15]'"},  // dumps as null
      {json::json_pointer("/experts_per_second/7"), "fast", "'experts_per_second[7]'"},
      {json::json_pointer("/link_gbps"), -55.0, "'link_gbps'"},
      {json::json_pointer("/link_gbps"), "55", "'link_gbps'"},
      {json::json_pointer("/link_gbps"), json::object(), "'link_gbps'"},
  };
  for (const Case& c : cases) {
    json bad = good;
    bad[c.where] = c.value;
    const std::string error = ErrorOf(bad);
    EXPECT_NE(error.find(c.field), std::string::npos) << c.where.to_string() << " = " << c.value.dump() << ": '"
                                                       << error << "'";
    EXPECT_NE(error.find("test.json"), std::string::npos) << error;
  }
  for (const char* key : {"format", "version", "host", "expert", "experts_per_second", "link_gbps"}) {
    json bad = good;
    bad.erase(key);
    EXPECT_NE(ErrorOf(bad).find(std::string("'") + key + "' is missing"), std::string::npos) << key;
  }
  json bad = good;
  bad["expert"].erase("ffn");
  EXPECT_NE(ErrorOf(bad).find("'expert.ffn' is missing"), std::string::npos);
  EXPECT_NE(ParseCalibration("[1, 2]", "a.json").status().message().find("not a JSON object"), std::string::npos);
  EXPECT_NE(ParseCalibration("{\"version\": NaN}", "a.json").status().message().find("not JSON"), std::string::npos);
  EXPECT_FALSE(ParseCalibration("", "a.json").ok());
}

// Random byte edits of a valid file (a fuzzer's mutations, seeded): each parses to values the split can
// use (every rate finite and positive, sizes positive) or is refused with the file's name; never a
// crash or an exception.
TEST(HostCalibration, MutatedFilesParseToUsableValuesOrAreRefused) {
  const std::string good = CalibrationJson(Example());
  std::mt19937_64 rng(4406);
  std::uniform_int_distribution<int> byte(0, 255), edits(1, 4), kind(0, 2);
  const std::string alphabet = "0123456789-+.eE\"{}[]:,nulltrueNaN ";
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = good;
    for (int e = edits(rng); e > 0 && !text.empty(); --e) {
      const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
      const char c = kind(rng) == 0 ? static_cast<char>(byte(rng)) : alphabet[byte(rng) % alphabet.size()];
      switch (kind(rng)) {
        case 0: text[at] = c; break;
        case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: text.erase(at, 1); break;
      }
    }
    const auto parsed = ParseCalibration(text, "fuzz.json");
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("fuzz.json"), std::string::npos) << parsed.status();
      continue;
    }
    ++accepted;
    for (double r : parsed->experts_per_second) ASSERT_TRUE(std::isfinite(r) && r > 0) << text;
    ASSERT_TRUE(parsed->threads > 0 && parsed->hidden > 0 && parsed->ffn > 0 && parsed->expert_bytes > 0) << text;
    if (parsed->link_gbps) ASSERT_TRUE(std::isfinite(*parsed->link_gbps) && *parsed->link_gbps > 0) << text;
  }
  EXPECT_GT(accepted, 0);  // some edits land in digits and stay valid: the accepting side is exercised too
}

TEST(HostCalibration, WrittenWholeAndReadBack) {
  const std::string dir = ::testing::TempDir() + "/calib/nested";
  const std::string path = dir + "/c.json";
  ASSERT_TRUE(WriteCalibration(Example(), path).ok());
  const auto back = ReadCalibration(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->experts_per_second, Example().experts_per_second);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A folder where the file should go: refused, nothing left behind.
  const std::string blocked = ::testing::TempDir() + "/calib/blocked";
  std::filesystem::create_directories(blocked + "/c.json");
  EXPECT_FALSE(WriteCalibration(Example(), blocked + "/c.json").ok());
  EXPECT_FALSE(std::filesystem::exists(blocked + "/c.json.tmp"));
  EXPECT_EQ(ReadCalibration(::testing::TempDir() + "/none.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(HostCalibration, DefaultPathFollowsXdgCacheHome) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old != nullptr ? old : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultCalibrationPath(), "/x/cache/specgen/calibration.json");
  unsetenv("XDG_CACHE_HOME");
  const std::string home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : ".";
  EXPECT_EQ(DefaultCalibrationPath(), home + "/.cache/specgen/calibration.json");
  if (old != nullptr) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

TEST(HostCalibration, MeasuresEveryTokenCount) {
  HostPool pool({.threads = 2});
  int calls = 0;
  const auto c = MeasureHost(pool, BestIsa(), DType::kQ8_0, 256, 256, [&](int n) { EXPECT_EQ(n, ++calls); }, 0.0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(calls, kCalibratedTokens);
  EXPECT_EQ(c->expert_bytes, 3u * 256 * 8 * 34);
  for (double r : c->experts_per_second) EXPECT_TRUE(std::isfinite(r) && r > 0) << r;
  EXPECT_TRUE(ParseCalibration(CalibrationJson(*c), "measured").ok());
}

// gpt-oss's experts are MXFP4 (17 bytes a block of 32): measured and read back as such.
TEST(HostCalibration, MeasuresMxfp4Experts) {
  HostPool pool({.threads = 2});
  const auto c = MeasureHost(pool, BestIsa(), DType::kMXFP4, 256, 256, [](int) {}, 0.0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->expert_bytes, 3u * 256 * 8 * 17);
  for (double r : c->experts_per_second) EXPECT_TRUE(std::isfinite(r) && r > 0) << r;
  const auto back = ParseCalibration(CalibrationJson(*c), "measured");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->expert_type, DType::kMXFP4);
}

}  // namespace
}  // namespace specgen::moe_host
