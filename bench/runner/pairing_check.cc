#include "bench/runner/pairing_check.h"

#include <map>
#include <memory>

#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/tokenizer/compatibility.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen::bench {
namespace {

struct ModelInfo {
  ModelSpec spec;
  std::unique_ptr<Tokenizer> tokenizer;  // null: the model has none
};

// Specs and tokenizers read once per path (configs name the same models many times).
class InfoCache {
 public:
  absl::StatusOr<const ModelInfo*> Get(const std::string& path, const SourceRef& ref) {
    auto it = infos_.find(path);
    if (it != infos_.end()) return it->second.get();
    auto info = std::make_unique<ModelInfo>();
    auto spec = LoadModelSpec(path);
    if (!spec.ok()) return InvalidArgument(ref.ToString(), ": ", spec.status().message());
    info->spec = *std::move(spec);
    auto tok = LoadTokenizerIfPresent(path);
    if (!tok.ok()) return InvalidArgument(ref.ToString(), ": ", tok.status().message());
    info->tokenizer = *std::move(tok);
    return (infos_[path] = std::move(info)).get();
  }

 private:
  std::map<std::string, std::unique_ptr<ModelInfo>> infos_;
};

}  // namespace

absl::Status CheckPairingModels(const PairingConfig& config) {
  InfoCache cache;
  for (const Pairing& p : config.pairings) {
    ASSIGN_OR_RETURN(const ModelInfo* target, cache.Get(p.target, p.target_ref));
    if (p.context > target->spec.context_length) {
      return InvalidArgument(config.path, ": pairing '", p.name, "': context ", p.context,
                             " exceeds the target's trained context of ", target->spec.context_length);
    }
    if (p.draft.empty()) continue;
    ASSIGN_OR_RETURN(const ModelInfo* draft, cache.Get(p.draft, p.draft_ref));
    absl::Status status = absl::OkStatus();
    if (target->tokenizer != nullptr && draft->tokenizer != nullptr) {
      status = CheckCompatible(*target->tokenizer, *draft->tokenizer);
    } else if (target->spec.vocab_size != draft->spec.vocab_size) {
      status = absl::FailedPreconditionError(Cat("vocabulary sizes differ: target ", target->spec.vocab_size,
                                                 ", draft ", draft->spec.vocab_size));
    }
    if (!status.ok()) {
      return InvalidArgument(p.draft_ref.ToString(), ": pairing '", p.name, "': ", p.draft,
                             " cannot draft for ", p.target, ": ", status.message());
    }
  }
  return absl::OkStatus();
}

}  // namespace specgen::bench
