// The VRAM budget planner: from the target's and the draft's weight bytes (ModelBytes, headers only),
// the context length, the draft length bound, the KV element size and the budget, decides what lives
// in VRAM and what streams from host RAM, before anything is allocated. Placement order: the draft
// whole, both KV caches, the workspaces, the target's embedding, head, norms, routers and attention,
// then its dense FFN layers in layer order, then as many expert-cache slots as fit. What is not placed
// stays in host RAM and streams. It also predicts the bytes and floor time of a verification pass.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/causal_lm.h"
#include "moe/model_bytes.h"

namespace specgen::moe {

// Bounded sizes the planner reserves; each comes out of the budget.
// cuBLAS's workspace, as the CUDA backend allocates it for each model (engine/backend/cuda).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// The CUDA backend's pinned ring that stages small host arguments (ids, positions, masks) per model
// (CudaBackendOptions::staging_bytes).
inline constexpr size_t kStagingRingBytes = size_t{8} << 20;
// Rows of the largest pass a model runs: a prefill chunk (engine/model/causal_lm.h).
inline constexpr int64_t kWorkspaceRows = static_cast<int64_t>(kPrefillChunk);
// The prefill chunk of a target whose experts stream, where the budget has room for it (MakePlan):
// a chunk of a few hundred positions routes to nearly every expert, so each chunk streams nearly the
// whole model, and fewer, larger chunks stream less.
inline constexpr int64_t kStreamedPrefillRows = 1024;
// The larger chunk is taken when its extra workspace is at most this fraction's inverse of the room
// left for expert slots (the slots serve every decode step; the chunk only prompts).
inline constexpr size_t kStreamedChunkRoomShare = 8;
// Rows of logits a model's passes hold: a verification pass's (prefill chunks compute the head on
// their last row only), once for the pass's output and once for the processed distributions (the
// target's p, the draft's q).
inline constexpr int64_t kWorkspaceLogitRows = 2 * kLogitRowsReserved;
// Dense layers that do not fit stream through a ring of this many layer buffers (layer L + 1
// copying while layer L computes).
inline constexpr int kDenseRingLayers = 2;
// The measured link rates of the performance model (docs/design.md §2, §3.1).
inline constexpr double kPcieBytesPerSecond = 55e9;
inline constexpr double kHbmBytesPerSecond = 4.2e12;
// Passes the prediction covers: n = 1..kMaxPredictedPositions positions.
inline constexpr int kMaxPredictedPositions = 16;

struct PlanOptions {
  int64_t context = 0;        // positions both KV caches hold; 0: min(target's trained length, 4096)
  int draft_max = 4;          // draft length bound: a verification pass has up to draft_max + 1 positions
  int kv_element_bytes = 2;   // bytes per K/V element (16-bit on the GPU by default)
  size_t vram_budget = 0;     // bytes the plan may place in VRAM
  // Host RAM this process may still allocate (MemAvailable); <= 0: unknown, not checked.
  double host_available = 0;
};

// What is resident, by kind (the placement order).
enum class ResidentKind {
  kDraft,
  kKvTarget,
  kKvDraft,
  kWorkspace,
  kEmbedding,
  kHead,
  kNorms,
  kRouters,
  kAttention,
  kSharedExperts,  // MoE layers' shared experts (GLM, Qwen2-MoE): every token runs them, so resident
  kExpertBiases,   // every expert's biases (gpt-oss): small and resident, even where the experts stream
  kDenseLayers,
  kDenseRing,
  kExpertsResident,  // every expert, when all fit
  kExpertSlots,      // the expert cache when they do not
  kSlotTable,
};
inline constexpr int kResidentKinds = static_cast<int>(ResidentKind::kSlotTable) + 1;
std::string_view ResidentKindName(ResidentKind k);  // "draft", "kv_target", …

// A verification pass over n positions under uniform routing (the worst case for caching).
struct PassPrediction {
  int n = 0;
  double distinct_experts = 0;  // expected distinct experts per MoE layer
  double missed_experts = 0;    // of them, expected not in the cache, per MoE layer
  double streamed_bytes = 0;    // host→device: missed experts and streamed dense layers
  double hbm_bytes = 0;         // read from VRAM: the target's non-expert weights and the distinct experts
  double pcie_seconds = 0;
  double hbm_seconds = 0;
  double floor_seconds = 0;     // pcie_seconds + hbm_seconds
};

struct Plan {
  std::array<size_t, kResidentKinds> resident_bytes{};  // bytes by ResidentKind
  size_t resident_total = 0;
  size_t vram_budget = 0;
  size_t minimum_budget = 0;  // the smallest budget this pair, context and draft bound can run in
  int64_t context = 0;

  // Streamed from host RAM (bytes as the GPU holds them, which is how the host arena keeps them).
  size_t streamed_experts = 0;  // every expert, when the cache cannot hold them all
  size_t streamed_dense = 0;    // the dense layers listed below
  std::vector<int> streamed_dense_layers;
  int dense_ring_layers = 0;    // the ring they stream through: kDenseRingLayers buffers, 0 when none stream
  size_t host_bytes = 0;        // the pinned host arena: streamed_experts + streamed_dense

  // The expert cache: what TransformerOptions::expert_cache_slots takes (-1: every expert resident).
  int64_t expert_cache_slots = -1;
  int64_t total_experts = 0;  // E times the MoE layers
  // The target's prompt chunk (TransformerOptions::prefill_chunk): kWorkspaceRows, or
  // kStreamedPrefillRows when the experts stream and the budget has room for its workspace.
  int64_t prefill_chunk = kWorkspaceRows;
  size_t slot_bytes = 0;      // one slot: the largest expert's gate + up + down, each 256-byte aligned
  double slot_share = 1.0;    // slots / total_experts; 1 when every expert is resident (or there are none)

  std::vector<PassPrediction> passes;  // n = 1..kMaxPredictedPositions
  size_t resident(ResidentKind k) const { return resident_bytes[static_cast<int>(k)]; }
};

// Expected distinct experts among n tokens that each choose top-k of E experts uniformly without
// replacement: E·(1 − (1 − k/E)^n).
double ExpectedDistinctExperts(int64_t n_experts, int64_t top_k, int n);

// Workspace bytes one model's passes need on the GPU (activations of `rows` rows, their attention
// scores over `context` keys, kWorkspaceLogitRows of logits, cuBLAS and the staging ring).
size_t WorkspaceBytes(const ModelSpec& spec, int64_t context, int64_t rows = kWorkspaceRows);

// Bytes of a model's K and V caches at `context` positions of `element_bytes` each.
size_t KvBytes(const ModelSpec& spec, int64_t context, int element_bytes);

// The plan, or: InvalidArgument for bad options; ResourceExhausted when the budget is below the
// minimum (the message states the minimum and what it is made of) or when host RAM cannot hold the
// streamed part (stating both sizes). `draft` may be null.
absl::StatusOr<Plan> MakePlan(const ModelBytes& target, const ModelBytes* draft, const PlanOptions& options);

}  // namespace specgen::moe
