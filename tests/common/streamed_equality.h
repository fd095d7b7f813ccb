// What the streamed-weights GPU tests share: a streamed model's passes must equal a resident model's
// bit for bit. Token ids of a pass, the first differing logit (for the failure message), and the two
// checks every such test runs: eager passes of the given sizes, then greedy decoding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "gtest/gtest.h"
#include "tests/common/speculative_options.h"

namespace specgen::testing {

inline std::shared_ptr<const LoadedModel> LoadShared(const std::string& path) {
  auto m = LoadModel(path);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::shared_ptr<const LoadedModel>(std::move(m).value()) : nullptr;
}

// n token ids for a pass starting at position `from`, different at every position.
inline std::vector<int32_t> PassIds(int64_t from, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((131 * (from + i) + 17) % vocab);
  return ids;
}

// The first element whose bits differ, or "" when none does.
inline std::string FirstDifference(const std::vector<float>& resident, const std::vector<float>& streamed) {
  if (resident.size() != streamed.size()) {
    return "sizes " + std::to_string(resident.size()) + " vs " + std::to_string(streamed.size());
  }
  for (size_t i = 0; i < resident.size(); ++i) {
    if (std::memcmp(&resident[i], &streamed[i], sizeof(float)) != 0) {
      return "element " + std::to_string(i) + ": resident " + std::to_string(resident[i]) + ", streamed " +
             std::to_string(streamed[i]);
    }
  }
  return "";
}

inline int Argmax(const std::vector<float>& row_major, int64_t vocab, int64_t row) {
  const float* r = row_major.data() + row * vocab;
  return static_cast<int>(std::max_element(r, r + vocab) - r);
}

// Eager passes of `sizes` positions each, one after another on both models: the same logits bit for bit.
inline void ExpectSamePasses(Transformer& resident, Transformer& streamed, std::span<const int> sizes) {
  const int64_t vocab = resident.spec().vocab_size;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const auto ids = PassIds(resident.n_past(), sizes[p], vocab);
    std::vector<float> lr, ls;
    ASSERT_TRUE(resident.Forward(ids, &lr).ok());
    auto st = streamed.Forward(ids, &ls);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(FirstDifference(lr, ls), "") << "pass " << p << " of " << sizes[p] << " positions";
  }
}

// `steps` greedy tokens from token 1 on both models: the same tokens.
inline void ExpectSameGreedy(Transformer& resident, Transformer& streamed, int steps) {
  const int64_t vocab = resident.spec().vocab_size;
  std::vector<int32_t> gr, gs;
  int32_t tr = 1, ts = 1;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> lr, ls;
    ASSERT_TRUE(resident.Forward({&tr, 1}, &lr).ok());
    ASSERT_TRUE(streamed.Forward({&ts, 1}, &ls).ok());
    tr = Argmax(lr, vocab, 0);
    ts = Argmax(ls, vocab, 0);
    gr.push_back(tr);
    gs.push_back(ts);
  }
  EXPECT_EQ(gr, gs) << "greedy";
}

// The greedy tokens of `prompts` through the GPU-resident loop with `target` (and `draft` drafting k
// when k > 0), appended in order; the loop's host waits and verification passes where asked.
inline std::vector<int32_t> DeviceGreedyTokens(CudaBackend* backend, Transformer* target, Transformer* draft, int k,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               StepSyncStats* syncs = nullptr, VerifyPassStats* vstats = nullptr) {
  const SpeculativeOptions so = MakeSpeculativeOptions(SamplingParams::Greedy(), k, false, AcceptMode::kRejection, 32);
  auto dec = DeviceSpeculativeDecoder::Create(backend, target, k > 0 ? draft : nullptr, so, {});
  EXPECT_TRUE(dec.ok()) << dec.status();
  if (!dec.ok()) return {};
  std::vector<int32_t> out;
  for (const auto& p : prompts) {
    auto got = (*dec)->Generate(p);
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok()) out.insert(out.end(), got->begin(), got->end());
  }
  if (syncs) *syncs = (*dec)->syncs();
  if (vstats) *vstats = (*dec)->verify_pass_stats();
  return out;
}

}  // namespace specgen::testing
