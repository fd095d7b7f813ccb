#include "tests/tokenizer/test_tokenizers.h"

#include <array>
#include <cstdio>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer_loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen::testing_tokenizers {

using nlohmann::json;

std::string BpeTokenizerJson(const Merges& merges) {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level::Encode(std::string(1, static_cast<char>(b)))] = id++;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    const std::string ma = byte_level::Encode(a), mb = byte_level::Encode(b);
    if (!vocab.contains(ma + mb)) vocab[ma + mb] = id++;
    merge_list.push_back(ma + " " + mb);
  }
  json added = json::array();
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", s}, {"special", true}, {"normalized", false}});
  }
  added.push_back({{"id", id++}, {"content", "<|im"}, {"special", false}, {"normalized", false}});
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern", {{"Regex", std::string(PreTokenizerRegex(PreTokenizerKind::kQwen2))}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  json root = {{"version", "1.0"},
               {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer", pre},
               {"post_processor", nullptr},
               {"decoder", {{"type", "ByteLevel"}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"byte_fallback", false}}}};
  return root.dump();
}

std::string BpeTokenizerConfig() {
  json cfg = {{"add_bos_token", false},
              {"bos_token", nullptr},
              {"eos_token", "<|im_end|>"},
              {"pad_token", "<|endoftext|>"},
              {"chat_template", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}{% endfor %}"}};
  return cfg.dump();
}

std::string SpmTokenizerJson() {
  json vocab = json::object();
  int id = 0;
  for (const char* s : {"<unk>", "<s>", "</s>"}) vocab[s] = id++;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    vocab[buf] = id++;
  }
  for (const char* s : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) vocab[s] = id++;
  const Merges merges = {{"\xE2\x96\x81", "h"},   {"l", "l"},  {"\xE2\x96\x81h", "e"}, {"\xE2\x96\x81he", "ll"},
                         {"\xE2\x96\x81hell", "o"}, {"\xE2\x96\x81", "w"}, {"o", "r"}, {"\xE2\x96\x81w", "or"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    merge_list.push_back(json::array({a, b}));  // the newer ["A", "B"] spelling
  }
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", std::array{"<unk>", "<s>", "</s>"}[i]}, {"special", true}, {"normalized", false}});
  }
  json root = {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"unk_token", "<unk>"},
        {"byte_fallback", true}, {"fuse_unk", true}}}};
  return root.dump();
}

std::string SpmTokenizerConfig() {
  json cfg = {{"add_bos_token", true},
              {"add_eos_token", false},
              {"bos_token", "<s>"},
              {"eos_token", "</s>"},
              {"unk_token", "<unk>"},
              {"chat_template", "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"}};
  return cfg.dump();
}

std::unique_ptr<Tokenizer> MakeBpe(const Merges& merges) {
  auto spec = ParseTokenizerJson(BpeTokenizerJson(merges), BpeTokenizerConfig(), "test-bpe");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  auto tok = Tokenizer::Create(*std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::unique_ptr<Tokenizer> MakeSpm() {
  auto spec = ParseTokenizerJson(SpmTokenizerJson(), SpmTokenizerConfig(), "test-spm");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  auto tok = Tokenizer::Create(*std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

}  // namespace specgen::testing_tokenizers
