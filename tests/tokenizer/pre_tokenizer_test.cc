// Pre-tokenizer scanners against the regexes they replace. The expected splits were produced by
// running each regex through Python's `regex` module (backtracking, leftmost alternative first, as
// Oniguruma in HF tokenizers) over these strings; each rule of the pattern has cases below, named in
// the hand-written tests that follow.
#include "engine/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

struct SplitCase {
  PreTokenizerKind kind;
  std::string text;
  std::vector<std::string> pieces;
};

const SplitCase kCases[] = {
    {PreTokenizerKind::kQwen2, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kQwen2, "I'M here, you're THERE'LL 'sup", {"I", "'M", " here", ",", " you", "'re", " THERE", "'LL", " '", "sup"}},
    {PreTokenizerKind::kQwen2, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kQwen2, "x'\xC5""\xBF""", {"x", "'\xC5""\xBF"""}},
    {PreTokenizerKind::kQwen2, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kQwen2, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kQwen2, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kQwen2, "a\x0A""\x0A""b", {"a", "\x0A""\x0A""", "b"}},
    {PreTokenizerKind::kQwen2, "a  \x0A""  b", {"a", "  \x0A""", " ", " b"}},
    {PreTokenizerKind::kQwen2, "  \x0A""  foo", {"  \x0A""", " ", " foo"}},
    {PreTokenizerKind::kQwen2, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kQwen2, "\x09""\x09""foo", {"\x09""", "\x09""foo"}},
    {PreTokenizerKind::kQwen2, "\x09""foo", {"\x09""foo"}},
    {PreTokenizerKind::kQwen2, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""bar"}},
    {PreTokenizerKind::kQwen2, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""y"}},
    {PreTokenizerKind::kQwen2, "12345", {"1", "2", "3", "4", "5"}},
    {PreTokenizerKind::kQwen2, "abc123def", {"abc", "1", "2", "3", "def"}},
    {PreTokenizerKind::kQwen2, "3.14", {"3", ".", "1", "4"}},
    {PreTokenizerKind::kQwen2, "x=-42;", {"x", "=-", "4", "2", ";"}},
    {PreTokenizerKind::kQwen2, " !!!\x0A""\x0A""x", {" !!!\x0A""\x0A""", "x"}},
    {PreTokenizerKind::kQwen2, "...\x0D""\x0A""", {"...\x0D""\x0A"""}},
    {PreTokenizerKind::kQwen2, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kQwen2, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""t", "\xCC""\x81"""}},
    {PreTokenizerKind::kQwen2, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kQwen2, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kQwen2, "\xC2""\xA0""x", {"\xC2""\xA0""x"}},
    {PreTokenizerKind::kQwen2, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""b"}},
    {PreTokenizerKind::kQwen2, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kQwen2, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""", "\xD9""\xA4"""}},
    {PreTokenizerKind::kQwen2, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kQwen2, "don't", {"don", "'t"}},
    {PreTokenizerKind::kQwen2, "  ", {"  "}},
    {PreTokenizerKind::kQwen2, " ", {" "}},
    {PreTokenizerKind::kQwen2, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kQwen2, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kQwen2, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kQwen2, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""bar"}},
    {PreTokenizerKind::kQwen2, "\x1C""x", {"\x1C""x"}},
    {PreTokenizerKind::kQwen2, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""y"}},
    {PreTokenizerKind::kQwen2, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kQwen2, " 123", {" ", "1", "2", "3"}},
    {PreTokenizerKind::kQwen2, "_under_score_", {"_under", "_score", "_"}},
    {PreTokenizerKind::kLlama3, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kLlama3, "I'M here, you're THERE'LL 'sup", {"I", "'M", " here", ",", " you", "'re", " THERE", "'LL", " '", "sup"}},
    {PreTokenizerKind::kLlama3, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kLlama3, "x'\xC5""\xBF""", {"x", "'\xC5""\xBF"""}},
    {PreTokenizerKind::kLlama3, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kLlama3, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kLlama3, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kLlama3, "a\x0A""\x0A""b", {"a", "\x0A""\x0A""", "b"}},
    {PreTokenizerKind::kLlama3, "a  \x0A""  b", {"a", "  \x0A""", " ", " b"}},
    {PreTokenizerKind::kLlama3, "  \x0A""  foo", {"  \x0A""", " ", " foo"}},
    {PreTokenizerKind::kLlama3, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kLlama3, "\x09""\x09""foo", {"\x09""", "\x09""foo"}},
    {PreTokenizerKind::kLlama3, "\x09""foo", {"\x09""foo"}},
    {PreTokenizerKind::kLlama3, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""bar"}},
    {PreTokenizerKind::kLlama3, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""y"}},
    {PreTokenizerKind::kLlama3, "12345", {"123", "45"}},
    {PreTokenizerKind::kLlama3, "abc123def", {"abc", "123", "def"}},
    {PreTokenizerKind::kLlama3, "3.14", {"3", ".", "14"}},
    {PreTokenizerKind::kLlama3, "x=-42;", {"x", "=-", "42", ";"}},
    {PreTokenizerKind::kLlama3, " !!!\x0A""\x0A""x", {" !!!\x0A""\x0A""", "x"}},
    {PreTokenizerKind::kLlama3, "...\x0D""\x0A""", {"...\x0D""\x0A"""}},
    {PreTokenizerKind::kLlama3, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kLlama3, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""t", "\xCC""\x81"""}},
    {PreTokenizerKind::kLlama3, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kLlama3, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kLlama3, "\xC2""\xA0""x", {"\xC2""\xA0""x"}},
    {PreTokenizerKind::kLlama3, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""b"}},
    {PreTokenizerKind::kLlama3, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kLlama3, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""\xD9""\xA4"""}},
    {PreTokenizerKind::kLlama3, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kLlama3, "don't", {"don", "'t"}},
    {PreTokenizerKind::kLlama3, "  ", {"  "}},
    {PreTokenizerKind::kLlama3, " ", {" "}},
    {PreTokenizerKind::kLlama3, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kLlama3, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kLlama3, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kLlama3, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""bar"}},
    {PreTokenizerKind::kLlama3, "\x1C""x", {"\x1C""x"}},
    {PreTokenizerKind::kLlama3, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""y"}},
    {PreTokenizerKind::kLlama3, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kLlama3, " 123", {" ", "123"}},
    {PreTokenizerKind::kLlama3, "_under_score_", {"_under", "_score", "_"}},
    {PreTokenizerKind::kGpt2, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kGpt2, "I'M here, you're THERE'LL 'sup", {"I", "'", "M", " here", ",", " you", "'re", " THERE", "'", "LL", " '", "sup"}},
    {PreTokenizerKind::kGpt2, "'s 't 're 've 'm 'll 'd", {"'s", " '", "t", " '", "re", " '", "ve", " '", "m", " '", "ll", " '", "d"}},
    {PreTokenizerKind::kGpt2, "x'\xC5""\xBF""", {"x", "'", "\xC5""\xBF"""}},
    {PreTokenizerKind::kGpt2, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kGpt2, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kGpt2, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kGpt2, "a\x0A""\x0A""b", {"a", "\x0A""", "\x0A""", "b"}},
    {PreTokenizerKind::kGpt2, "a  \x0A""  b", {"a", "  \x0A"" ", " b"}},
    {PreTokenizerKind::kGpt2, "  \x0A""  foo", {"  \x0A"" ", " foo"}},
    {PreTokenizerKind::kGpt2, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""", "\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kGpt2, "\x09""\x09""foo", {"\x09""", "\x09""", "foo"}},
    {PreTokenizerKind::kGpt2, "\x09""foo", {"\x09""", "foo"}},
    {PreTokenizerKind::kGpt2, "foo\xE3""\x80""\x80""bar", {"foo", "\xE3""\x80""\x80""", "bar"}},
    {PreTokenizerKind::kGpt2, "x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80""", "\xE3""\x80""\x80""", "y"}},
    {PreTokenizerKind::kGpt2, "12345", {"12345"}},
    {PreTokenizerKind::kGpt2, "abc123def", {"abc", "123", "def"}},
    {PreTokenizerKind::kGpt2, "3.14", {"3", ".", "14"}},
    {PreTokenizerKind::kGpt2, "x=-42;", {"x", "=-", "42", ";"}},
    {PreTokenizerKind::kGpt2, " !!!\x0A""\x0A""x", {" !!!", "\x0A""", "\x0A""", "x"}},
    {PreTokenizerKind::kGpt2, "...\x0D""\x0A""", {"...", "\x0D""\x0A"""}},
    {PreTokenizerKind::kGpt2, "Caf\xC3""\xA9"" na\xC3""\xAF""ve", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve"}},
    {PreTokenizerKind::kGpt2, "e\xCC""\x81""t\xCC""\x81""", {"e", "\xCC""\x81""", "t", "\xCC""\x81"""}},
    {PreTokenizerKind::kGpt2, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kGpt2, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kGpt2, "\xC2""\xA0""x", {"\xC2""\xA0""", "x"}},
    {PreTokenizerKind::kGpt2, "a\xE2""\x80""\x8B""b", {"a", "\xE2""\x80""\x8B""", "b"}},
    {PreTokenizerKind::kGpt2, "Stra\xC3""\x9F""e", {"Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kGpt2, "\xD9""\xA3""\xD9""\xA4""", {"\xD9""\xA3""\xD9""\xA4"""}},
    {PreTokenizerKind::kGpt2, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
    {PreTokenizerKind::kGpt2, "don't", {"don", "'t"}},
    {PreTokenizerKind::kGpt2, "  ", {"  "}},
    {PreTokenizerKind::kGpt2, " ", {" "}},
    {PreTokenizerKind::kGpt2, "\x0A""", {"\x0A"""}},
    {PreTokenizerKind::kGpt2, "a \x0A""", {"a", " \x0A"""}},
    {PreTokenizerKind::kGpt2, "hello  world", {"hello", " ", " world"}},
    {PreTokenizerKind::kGpt2, "foo\xC2""\x85""bar", {"foo", "\xC2""\x85""", "bar"}},
    {PreTokenizerKind::kGpt2, "\x1C""x", {"\x1C""", "x"}},
    {PreTokenizerKind::kGpt2, "x\xE2""\x80""\xA8""y", {"x", "\xE2""\x80""\xA8""", "y"}},
    {PreTokenizerKind::kGpt2, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kGpt2, " 123", {" 123"}},
    {PreTokenizerKind::kGpt2, "_under_score_", {"_", "under", "_", "score", "_"}},    // o200k (gpt-oss), each split derived from the regex's branches in order (the first that matches
    // wins; within it, greedy with backtracking). Up = [Lu Lt Lm Lo M], Low = [Ll Lm Lo M]; so Lm, Lo
    // (CJK) and marks are in both. Words: X?Up*Low+C? first, then X?Up+Low*C?, X = [^\r\n\p{L}\p{N}]:
    //  - a contraction stays on its word, either case ("I'M", " THERE'LL" by the second branch); with no
    //    word before it, "'" is the X of the letters after ("'s") or a punctuation run (" '").
    //  - a case change ends a word: "Hello|World"; Up* then Low+ takes "HTTPResponse" whole.
    //  - CJK is Up and Low: "中文ABC": Up* takes all five, gives back to 文 (the last Low), so "中文"
    //    ends before "ABC"; "ABC中文": Low+ ends on 文, one word.
    //  - marks: "e\u0301t\u0301" is one Low+ run; "A\u0301B": Up* gives back to the mark, "A\u0301|B".
    //  - digits in groups of three; an emoji is an X before letters ("😀ok"), else a punctuation run.
    //  - a punctuation run takes the [\r\n/]* after it ("//\n//"); "/" before letters is their X.
    //  - whitespace as Qwen2's: the run's last space goes to the next word, up to the last newline.
    {PreTokenizerKind::kO200k, "Hello, world!", {"Hello", ",", " world", "!"}},
    {PreTokenizerKind::kO200k, "I'M here, you're THERE'LL 'sup", {"I'M", " here", ",", " you're", " THERE'LL", " '", "sup"}},
    {PreTokenizerKind::kO200k, "don't DON'T Don'T", {"don't", " DON'T", " Don'T"}},
    {PreTokenizerKind::kO200k, "'s 't", {"'s", " '", "t"}},
    {PreTokenizerKind::kO200k, "HelloWorld", {"Hello", "World"}},
    {PreTokenizerKind::kO200k, "getHTTPResponse", {"get", "HTTPResponse"}},
    {PreTokenizerKind::kO200k, "camelCase WORLD", {"camel", "Case", " WORLD"}},
    {PreTokenizerKind::kO200k, "12345", {"123", "45"}},
    {PreTokenizerKind::kO200k, "1234567", {"123", "456", "7"}},
    {PreTokenizerKind::kO200k, "x=-42;", {"x", "=-", "42", ";"}},
    {PreTokenizerKind::kO200k, " 123", {" ", "123"}},
    {PreTokenizerKind::kO200k, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95""", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""\xE6""\xB5""\x8B""\xE8""\xAF""\x95"""}},
    {PreTokenizerKind::kO200k, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""abc", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""abc"}},
    {PreTokenizerKind::kO200k, "\xE4""\xB8""\xAD""\xE6""\x96""\x87""ABC", {"\xE4""\xB8""\xAD""\xE6""\x96""\x87""", "ABC"}},
    {PreTokenizerKind::kO200k, "ABC\xE4""\xB8""\xAD""\xE6""\x96""\x87""", {"ABC\xE4""\xB8""\xAD""\xE6""\x96""\x87"""}},
    {PreTokenizerKind::kO200k, "\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89"" ok", {"\xF0""\x9F""\x98""\x80""\xF0""\x9F""\x8E""\x89""", " ok"}},
    {PreTokenizerKind::kO200k, "ok\xF0""\x9F""\x98""\x80""", {"ok", "\xF0""\x9F""\x98""\x80"""}},
    {PreTokenizerKind::kO200k, "\xF0""\x9F""\x98""\x80""ok", {"\xF0""\x9F""\x98""\x80""ok"}},
    {PreTokenizerKind::kO200k, "a  b   c", {"a", " ", " b", "  ", " c"}},
    {PreTokenizerKind::kO200k, "trailing   ", {"trailing", "   "}},
    {PreTokenizerKind::kO200k, "   leading", {"  ", " leading"}},
    {PreTokenizerKind::kO200k, "a\x0A""\x0A""b", {"a", "\x0A""\x0A""", "b"}},
    {PreTokenizerKind::kO200k, "a  \x0A""  b", {"a", "  \x0A""", " ", " b"}},
    {PreTokenizerKind::kO200k, "line\x0D""\x0A""next\x0D""\x0A""", {"line", "\x0D""\x0A""", "next", "\x0D""\x0A"""}},
    {PreTokenizerKind::kO200k, "x\x0A""Foo", {"x", "\x0A""", "Foo"}},
    {PreTokenizerKind::kO200k, "\x09""\x09""foo", {"\x09""", "\x09""foo"}},
    {PreTokenizerKind::kO200k, "a {\x0A""\x0A""  b", {"a", " {\x0A""\x0A""", " ", " b"}},
    {PreTokenizerKind::kO200k, "path/to/file", {"path", "/to", "/file"}},
    {PreTokenizerKind::kO200k, "});\x0A""", {"});\x0A"""}},
    {PreTokenizerKind::kO200k, "//\x0A""//x", {"//\x0A""//", "x"}},
    {PreTokenizerKind::kO200k, "!!! ??", {"!!!", " ??"}},
    {PreTokenizerKind::kO200k, "(FOO", {"(FOO"}},
    {PreTokenizerKind::kO200k, "_under_score_", {"_under", "_score", "_"}},
    {PreTokenizerKind::kO200k, "Caf\xC3""\xA9"" na\xC3""\xAF""ve Stra\xC3""\x9F""e", {"Caf\xC3""\xA9""", " na\xC3""\xAF""ve", " Stra\xC3""\x9F""e"}},
    {PreTokenizerKind::kO200k, "\xD0""\x96""\xD0""\x96""\xD0""\xB6""\xD0""\xB6""", {"\xD0""\x96""\xD0""\x96""\xD0""\xB6""\xD0""\xB6"""}},
    {PreTokenizerKind::kO200k, "e\xCC""\x81""t\xCC""\x81""", {"e\xCC""\x81""t\xCC""\x81"""}},
    {PreTokenizerKind::kO200k, "A\xCC""\x81""B", {"A\xCC""\x81""", "B"}},
    {PreTokenizerKind::kO200k, "\xD9""\xA3""\xD9""\xA4""\xD9""\xA5""\xD9""\xA6""", {"\xD9""\xA3""\xD9""\xA4""\xD9""\xA5""", "\xD9""\xA6"""}},
    {PreTokenizerKind::kO200k, "\xE2""\x85""\xAB""", {"\xE2""\x85""\xAB"""}},
};

std::vector<std::string> Split(PreTokenizerKind kind, const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view w : PreTokenize(kind, text)) out.emplace_back(w);
  return out;
}

TEST(PreTokenizerTest, MatchesRegexOnTable) {
  for (const SplitCase& c : kCases) {
    EXPECT_EQ(Split(c.kind, c.text), c.pieces) << "kind " << static_cast<int>(c.kind) << " text \"" << c.text << "\"";
  }
}

// 400 random strings over letters, digits, every kind of space, newlines, quotes, marks, CJK and
// emoji, split by Python's `regex` (gen_pretokenizer_cases.py).
TEST(PreTokenizerTest, MatchesRegexOnRandomStrings) {
  const std::string path = std::string(SPECGEN_SOURCE_DIR) + "/tests/tokenizer/pretokenizer_cases.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const auto cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array()) << path;
  // 400 strings split by every regex, then 200 over an alphabet with '/', Lt, Lm and a spacing mark
  // split by o200k's only.
  ASSERT_EQ(cases.size(), 600u);
  int o200k_cases = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    if (c.contains("qwen2")) {
      EXPECT_EQ(Split(PreTokenizerKind::kQwen2, text), c.at("qwen2").get<std::vector<std::string>>()) << text;
      EXPECT_EQ(Split(PreTokenizerKind::kLlama3, text), c.at("llama3").get<std::vector<std::string>>()) << text;
      EXPECT_EQ(Split(PreTokenizerKind::kGpt2, text), c.at("gpt2").get<std::vector<std::string>>()) << text;
    }
    EXPECT_EQ(Split(PreTokenizerKind::kO200k, text), c.at("o200k").get<std::vector<std::string>>()) << text;
    ++o200k_cases;
  }
  EXPECT_EQ(o200k_cases, 600);
}

using ::testing::ElementsAre;

TEST(PreTokenizerTest, ContractionsAreCaseInsensitiveForQwen2Only) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "IT'S"), ElementsAre("IT", "'S"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "IT'S"), ElementsAre("IT", "'", "S"));
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "we'LL"), ElementsAre("we", "'LL"));
}

TEST(PreTokenizerTest, OptionalNonLetterPrefixJoinsTheWord) {
  // [^\r\n\p{L}\p{N}]?\p{L}+ : punctuation or a space (not a newline) sticks to the letters after it.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "(foo .bar\nbaz"), ElementsAre("(foo", " .", "bar", "\n", "baz"));
}

TEST(PreTokenizerTest, DigitsAreSingleForQwen2AndTriplesForLlama3) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "2024"), ElementsAre("2", "0", "2", "4"));
  EXPECT_THAT(Split(PreTokenizerKind::kLlama3, "2024"), ElementsAre("202", "4"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "a 2024"), ElementsAre("a", " 2024"));
}

TEST(PreTokenizerTest, PunctuationRunTakesTrailingNewlines) {
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a {\n\n  b"), ElementsAre("a", " {\n\n", " ", " b"));
}

TEST(PreTokenizerTest, WhitespaceEndsAtLastNewline) {
  // \s*[\r\n]+ takes spaces up to and including the last newline of the run.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a \n \n  b"), ElementsAre("a", " \n \n", " ", " b"));
}

TEST(PreTokenizerTest, SpaceRunLeavesLastSpaceForNextWord) {
  // \s+(?!\S): a run before a word gives up its last space; at the end of text it keeps all.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a    b  "), ElementsAre("a", "   ", " b", "  "));
  // A single space before a digit cannot be left behind: \s+ takes it alone.
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "a 1"), ElementsAre("a", " ", "1"));
}

// The regex text tokenizer.json must carry for kO200k: gpt-oss's, as llama.cpp's llama-vocab.cpp quotes
// it ("original regex from tokenizer.json", LLAMA_VOCAB_PRE_TYPE_GPT4O).
TEST(PreTokenizerTest, O200kRegexIsGptOssTokenizerJsons) {
  EXPECT_EQ(PreTokenizerRegex(PreTokenizerKind::kO200k),
            R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
            R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
            R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
}

// A long run that makes the first word branch give back all the way (every letter upper, no Low)
// stays linear: each code point is looked at a bounded number of times.
TEST(PreTokenizerTest, O200kLongUpperRunIsOneWord) {
  const std::string text(200000, 'A');
  const auto pieces = PreTokenize(PreTokenizerKind::kO200k, text);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].size(), text.size());
}

TEST(PreTokenizerTest, EmptyTextGivesNoPieces) { EXPECT_TRUE(PreTokenize(PreTokenizerKind::kQwen2, "").empty()); }

}  // namespace
}  // namespace specgen
