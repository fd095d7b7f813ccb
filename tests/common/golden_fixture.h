// Test helper shared by the golden-logit tests (CPU reference against transformers; CUDA backend
// against the CPU reference): a committed fixture's golden.json (input ids, transformers' greedy
// continuation, vocabulary size) and its fp32 logits file. A short logits file is a test failure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen::testing {

struct GoldenFixture {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> greedy;
  int64_t vocab = 0;
  std::vector<float> logits;  // [input_ids.size(), vocab]
};

inline GoldenFixture ReadGoldenFixture(const std::filesystem::path& dir) {
  GoldenFixture f;
  std::ifstream in(dir / "golden.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  f.input_ids = j.at("input_ids").get<std::vector<int32_t>>();
  f.greedy = j.at("greedy").get<std::vector<int32_t>>();
  f.vocab = j.at("vocab_size").get<int64_t>();
  const std::filesystem::path logits_path = dir / j.at("logits_file").get<std::string>();
  f.logits.resize(f.input_ids.size() * f.vocab);
  std::ifstream lf(logits_path, std::ios::binary);
  lf.read(reinterpret_cast<char*>(f.logits.data()),
          static_cast<std::streamsize>(f.logits.size() * sizeof(float)));
  EXPECT_EQ(static_cast<size_t>(lf.gcount()), f.logits.size() * sizeof(float)) << logits_path;
  return f;
}

}  // namespace specgen::testing
