// `specgen tokenize`: text -> token ids (a JSON array) with the model's own tokenizer, or ids -> text
// with --decode. MODEL is a GGUF file or a Hugging Face folder; --tokenizer names a tokenizer.json.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/cli/command.h"
#include "engine/cli/id_list.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::string file;
  std::string decode;
  bool no_special = false;
};

absl::Status RunTokenize(const TokenizeFlags& f) {
  if (f.model.empty() == f.tokenizer.empty()) return InvalidArgument("tokenize: give exactly one of -m MODEL or --tokenizer FILE");
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizerForModel(f.model.empty() ? f.tokenizer : f.model));
  if (!f.decode.empty()) {
    if (!f.prompt.empty() || !f.file.empty()) return InvalidArgument("tokenize: --decode takes no -p/-f");
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIdList("--decode", f.decode));
    ASSIGN_OR_RETURN(std::string text, tok->Decode(ids, {.render_special = !f.no_special}));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return absl::OkStatus();
  }
  if (f.prompt.empty() == f.file.empty()) return InvalidArgument("tokenize: give exactly one of -p TEXT or -f FILE");
  std::string text = f.prompt;
  if (!f.file.empty()) {
    std::ifstream in(f.file, std::ios::binary);
    if (!in) return NotFound("-f ", f.file, ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tok->Encode(text, {.add_special = !f.no_special, .parse_special = !f.no_special}));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += Cat(i ? ", " : "", ids[i]);
  out += "]\n";
  std::fputs(out.c_str(), stdout);
  return absl::OkStatus();
}

Registrar kTokenize{{"tokenize", "Text to token ids (JSON) with the model's tokenizer, or ids to text", [](CLI::App& app) {
                       auto flags = std::make_shared<TokenizeFlags>();
                       app.add_option("-m,--model", flags->model, "GGUF file or Hugging Face model folder");
                       app.add_option("--tokenizer", flags->tokenizer, "tokenizer.json (tokenizer_config.json beside it is read too)");
                       app.add_option("-p,--prompt", flags->prompt, "text to tokenize");
                       app.add_option("-f,--file", flags->file, "file whose text to tokenize");
                       app.add_option("--decode", flags->decode, "comma-separated ids to turn back into text");
                       app.add_flag("--no-special", flags->no_special,
                                    "no BOS/EOS, special-token text stays text; with --decode, control tokens are not shown");
                       return [flags]() { return RunTokenize(*flags); };
                     }}};

}  // namespace
}  // namespace specgen::cli
