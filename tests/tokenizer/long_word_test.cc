// One long pre-token (a word with no split in it) merges as BPE defines it: the lowest-ranked
// adjacent pair first, the leftmost of equal ranks, until no pair has a rank. Tokenizer::MergeByRank
// does it with a heap over a linked list (O(n log n)); this checks its ids against the definition
// applied literally (a rescan of every pair per merge, O(n^2): fine at these lengths) on ASCII words,
// whose byte-level form is the word itself, for the BPE fixture and the bundled pair's tokenizer.
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer_loader.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::vector<int32_t> ReferenceMerge(const TokenizerSpec& spec, const std::string& word) {
  std::unordered_map<std::string, size_t> rank;  // "left\x01right"
  for (size_t r = 0; r < spec.merges.size(); ++r) rank.emplace(spec.merges[r].first + '\x01' + spec.merges[r].second, r);
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < spec.tokens.size(); ++i) id.emplace(spec.tokens[i], static_cast<int32_t>(i));
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find(sym[i] + '\x01' + sym[i + 1]);
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : sym) ids.push_back(id.at(s));
  return ids;
}

std::vector<std::string> Words() {
  std::mt19937 rng(7);
  std::vector<std::string> words = {std::string(1000, 'a'), std::string(1001, 'e')};
  std::string ab, random_letters, few_letters;
  for (int i = 0; i < 1000; ++i) {
    ab += i % 2 ? 'b' : 'a';
    random_letters += static_cast<char>('a' + rng() % 26);
    few_letters += "ets"[rng() % 3];
  }
  words.push_back(ab);
  words.push_back(random_letters);
  words.push_back(few_letters);
  return words;
}

class LongWordTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LongWordTest, HeapMergeGivesTheDefinitionsIds) {
  auto tok = LoadTokenizerForModel(std::string(SPECGEN_SOURCE_DIR) + "/" + GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_FALSE((*tok)->spec().merges.empty());
  for (const std::string& word : Words()) {
    auto ids = (*tok)->Encode(word, EncodeOptions{.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, ReferenceMerge((*tok)->spec(), word)) << word.substr(0, 40) << "... (" << word.size() << " bytes)";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, LongWordTest,
                         ::testing::Values("tests/data/tokenizers/bpe/tokenizer.json", "models/tiny-target"));

}  // namespace
}  // namespace specgen
