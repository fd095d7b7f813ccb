// Encode and decode throughput of the tokenizers (bytes_per_second of UTF-8 text) on ~400 KB of mixed
// text (English prose, Python code, numbers, CJK, Cyrillic, accents and emoji, with special tokens),
// and one 1 MB word encoded (EncodeLongWord).
// Tokenizers are the fixtures in tests/data/tokenizers and the bundled pair's (models/tiny-target).
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen {
namespace {

std::string MixedText(size_t bytes) {
  static const char* kPieces[] = {
      "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "it's", "they'll",
      "def", "return", "self.value", "(x, y)", "{'key': [1, 2, 3]}", "42", "3.14159", "2024-05-01",
      "中文分词", "日本語", "Привет", "мир", "Café", "naïve", "Straße", "😀", "🎉", "👍🏽", "->", "!=", "#",
  };
  static const char* kSeps[] = {" ", " ", " ", " ", ", ", ". ", "\n", "\n    ", "\t", "  ", "\r\n"};
  std::mt19937 rng(1234);
  std::string s;
  s.reserve(bytes + 64);
  while (s.size() < bytes) {
    if (rng() % 500 == 0) s += "<|im_end|>\n<|im_start|>user\n";
    s += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
    s += kSeps[rng() % (sizeof(kSeps) / sizeof(kSeps[0]))];
  }
  return s;
}

const std::string& Text() {
  static const std::string kText = MixedText(400 << 10);
  return kText;
}

std::string Path(const char* rel) { return std::string(SPECGEN_SOURCE_DIR) + "/" + rel; }

void Encode(benchmark::State& state, const char* path, bool cold_cache) {
  auto tok = LoadTokenizerForModel(Path(path));
  if (!tok.ok()) {
    state.SkipWithError(std::string(tok.status().message()).c_str());
    return;
  }
  size_t n_tokens = 0;
  for (auto _ : state) {
    if (cold_cache) {
      state.PauseTiming();
      tok = Tokenizer::Create((*tok)->spec());  // a fresh word cache
      state.ResumeTiming();
    }
    auto ids = (*tok)->Encode(Text());
    if (!ids.ok()) {
      state.SkipWithError(std::string(ids.status().message()).c_str());
      return;
    }
    n_tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes_per_token"] = static_cast<double>(Text().size()) / n_tokens;
}

void Decode(benchmark::State& state, const char* path) {
  auto tok = LoadTokenizerForModel(Path(path));
  if (!tok.ok()) {
    state.SkipWithError(std::string(tok.status().message()).c_str());
    return;
  }
  const auto ids = *(*tok)->Encode(Text());
  for (auto _ : state) {
    auto text = (*tok)->Decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
}

BENCHMARK_CAPTURE(Encode, bpe_fixture_warm_cache, "tests/data/tokenizers/bpe/tokenizer.json", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Encode, bpe_fixture_cold_cache, "tests/data/tokenizers/bpe/tokenizer.json", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Encode, bpe_tiny_target, "models/tiny-target", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Encode, spm_fixture, "tests/data/tokenizers/spm/tokenizer.json", false)->Unit(benchmark::kMillisecond);
// One 1 MB pre-token (letters with no split in it: one word for every pre-tokenizer), cold: what a
// long unbroken input costs the merge (Tokenizer::MergeByRank's heap: O(n log n)).
void EncodeLongWord(benchmark::State& state, const char* path) {
  auto tok = LoadTokenizerForModel(Path(path));
  if (!tok.ok()) {
    state.SkipWithError(std::string(tok.status().message()).c_str());
    return;
  }
  std::mt19937 rng(99);
  std::string word(1 << 20, 'a');
  for (char& c : word) c = static_cast<char>('a' + rng() % 26);
  for (auto _ : state) {
    auto ids = (*tok)->Encode(word);
    if (!ids.ok()) {
      state.SkipWithError(std::string(ids.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * word.size()));
}

BENCHMARK_CAPTURE(EncodeLongWord, bpe_fixture, "tests/data/tokenizers/bpe/tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(EncodeLongWord, bpe_tiny_target, "models/tiny-target")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(EncodeLongWord, spm_fixture, "tests/data/tokenizers/spm/tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Decode, bpe_fixture, "tests/data/tokenizers/bpe/tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Decode, spm_fixture, "tests/data/tokenizers/spm/tokenizer.json")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
