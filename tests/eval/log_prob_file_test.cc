// The reference run's file: what is written reads back the same, and a file that is truncated,
// foreign, of another version or incomplete is an error naming it (and never a partial file).
#include "engine/eval/log_prob_file.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

LogProbHeader Header() {
  LogProbHeader h;
  h.vocab_size = 5;
  h.window = 4;
  h.n_positions = 2;
  h.tokens = {0, 4, 2, 3, 1};
  return h;
}

LogProbRecord Record(float shift) {
  LogProbRecord r;
  const std::vector<float> logits = {0.0f, shift, 1.0f, -2.0f, 0.5f};
  EncodeLogProbs(logits, &r.log_probs);
  r.top = ArgMax(logits);
  r.nll = 1.25f + shift;
  return r;
}

absl::Status WriteTwo(const std::string& path) {
  auto w = LogProbFileWriter::Create(path, Header(), {});
  if (!w.ok()) return w.status();
  if (absl::Status s = w->Append(Record(3.0f)); !s.ok()) return s;
  if (absl::Status s = w->Append(Record(-1.0f)); !s.ok()) return s;
  return w->Commit();
}

std::vector<char> Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Put(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(LogProbFile, RoundTrip) {
  const std::string path = TempPath("round.sglp");
  ASSERT_TRUE(WriteTwo(path).ok());
  // Header 32 bytes, 5 tokens of 4, 2 records of 16 + 2·5.
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 20u + 2u * 26u);
  auto r = LogProbFileReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->header().vocab_size, 5u);
  EXPECT_EQ((*r)->header().window, 4u);
  EXPECT_EQ((*r)->header().tokens, Header().tokens);
  for (float shift : {3.0f, -1.0f}) {
    LogProbRecord got;
    ASSERT_TRUE((*r)->Next(&got).ok());
    const LogProbRecord want = Record(shift);
    EXPECT_EQ(got.nll, want.nll);
    EXPECT_EQ(got.top, want.top);
    EXPECT_EQ(got.log_probs.min_log_prob, want.log_probs.min_log_prob);
    EXPECT_EQ(got.log_probs.scale, want.log_probs.scale);
    EXPECT_EQ(got.log_probs.q, want.log_probs.q);
  }
  LogProbRecord extra;
  EXPECT_FALSE((*r)->Next(&extra).ok());
}

TEST(LogProbFile, BadFilesNameThePath) {
  const std::string good = TempPath("good.sglp");
  ASSERT_TRUE(WriteTwo(good).ok());
  const std::vector<char> bytes = Bytes(good);
  auto expect_error = [](const std::string& path, const std::string& what) {
    auto r = LogProbFileReader::Open(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(what));
  };
  const std::string cut = TempPath("cut.sglp");
  for (size_t n : {size_t{0}, size_t{10}, size_t{40}, bytes.size() - 1}) {
    Put(cut, std::vector<char>(bytes.begin(), bytes.begin() + n));
    expect_error(cut, n < 32 ? "shorter than its header" : "truncated or corrupt");
  }
  std::vector<char> longer = bytes;
  longer.push_back(0);
  Put(cut, longer);
  expect_error(cut, "truncated or corrupt");
  std::vector<char> foreign = bytes;
  foreign[0] = 'X';
  Put(cut, foreign);
  expect_error(cut, "not a specgen log-prob file");
  std::vector<char> version = bytes;
  version[4] = 9;
  Put(cut, version);
  expect_error(cut, "version 9");
  std::vector<char> bad_token = bytes;
  bad_token[32] = 7;  // token 0 = 7, outside the vocabulary of 5
  Put(cut, bad_token);
  expect_error(cut, "token 0 is 7");
  std::vector<char> huge = bytes;
  huge[24 + 7] = 0x7f;  // n_positions near 2^63: rejected before any allocation
  Put(cut, huge);
  expect_error(cut, "truncated or corrupt");
  expect_error(TempPath("missing.sglp"), "cannot read");
}

TEST(LogProbFile, IncompleteWriteLeavesNoFile) {
  const std::string path = TempPath("partial.sglp");
  std::filesystem::remove(path);
  {
    auto w = LogProbFileWriter::Create(path, Header(), {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(Record(0.0f)).ok());
    LogProbRecord wrong = Record(0.0f);
    wrong.log_probs.q.resize(3);
    EXPECT_FALSE(w->Append(wrong).ok());
    EXPECT_FALSE(w->Commit().ok());  // one of two positions
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace specgen
