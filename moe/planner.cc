#include "moe/planner.h"

#include <algorithm>
#include <cmath>

#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "moe/expert_cache_tables.h"

namespace specgen::moe {
namespace {

void Put(Plan& p, ResidentKind k, size_t bytes) { p.resident_bytes[static_cast<int>(k)] += bytes; }

}  // namespace

std::string_view ResidentKindName(ResidentKind k) {
  switch (k) {
    case ResidentKind::kDraft: return "draft";
    case ResidentKind::kKvTarget: return "kv_target";
    case ResidentKind::kKvDraft: return "kv_draft";
    case ResidentKind::kWorkspace: return "workspace";
    case ResidentKind::kEmbedding: return "embedding";
    case ResidentKind::kHead: return "head";
    case ResidentKind::kNorms: return "norms";
    case ResidentKind::kRouters: return "routers";
    case ResidentKind::kAttention: return "attention";
    case ResidentKind::kSharedExperts: return "shared_experts";
    case ResidentKind::kExpertBiases: return "expert_biases";
    case ResidentKind::kDenseLayers: return "dense_layers";
    case ResidentKind::kDenseRing: return "dense_ring";
    case ResidentKind::kExpertsResident: return "experts";
    case ResidentKind::kExpertSlots: return "expert_slots";
    case ResidentKind::kSlotTable: return "slot_table";
  }
  return "?";
}

// Linearity of expectation: expert j is missed by one token with probability C(E−1, k)/C(E, k) =
// 1 − k/E (the token's k distinct choices are a uniform k-subset), and by all n independent tokens
// with probability (1 − k/E)^n; summing over the E experts gives the expected union size exactly.
double ExpectedDistinctExperts(int64_t n_experts, int64_t top_k, int n) {
  if (n_experts <= 0 || top_k <= 0 || n <= 0) return 0.0;
  const double e = static_cast<double>(n_experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(std::min(top_k, n_experts)) / e, n));
}

size_t KvBytes(const ModelSpec& spec, int64_t context, int element_bytes) {
  return 2 * static_cast<size_t>(spec.n_layers) * static_cast<size_t>(spec.kv_dim()) *
         static_cast<size_t>(context) * static_cast<size_t>(element_bytes);
}

size_t WorkspaceBytes(const ModelSpec& spec, int64_t context, int64_t chunk_rows) {
  const size_t rows = static_cast<size_t>(std::max<int64_t>(chunk_rows, 1));
  // fp32 activations per row: residual, normed input, attention and FFN outputs (4 × D); q, k, v;
  // gate, up and activation of the widest FFN a row runs (its k experts, or the dense FFN); router
  // logits.
  const int64_t ffn = std::max(spec.ffn_dim, spec.n_experts_used * spec.expert_ffn_dim);
  const size_t row_floats = static_cast<size_t>(4 * spec.hidden + spec.q_dim() + 2 * spec.kv_dim() + 3 * ffn +
                                                spec.n_experts);
  const size_t activations = rows * row_floats * sizeof(float);
  const size_t scores = rows * static_cast<size_t>(spec.n_heads) * static_cast<size_t>(context) * sizeof(float);
  const size_t logits = static_cast<size_t>(kWorkspaceLogitRows) * static_cast<size_t>(spec.vocab_size) * sizeof(float);
  return activations + scores + logits + kCublasWorkspaceBytes + kStagingRingBytes;
}

absl::StatusOr<Plan> MakePlan(const ModelBytes& target, const ModelBytes* draft, const PlanOptions& options) {
  if (options.context < 0) return InvalidArgument("context ", options.context, ": must be >= 0 (0 = default)");
  if (options.draft_max < 0) return InvalidArgument("draft length bound ", options.draft_max, ": must be >= 0");
  if (options.kv_element_bytes <= 0) {
    return InvalidArgument("KV element size ", options.kv_element_bytes, ": must be >= 1 byte");
  }
  if (options.vram_budget == 0) return InvalidArgument("VRAM budget: must be > 0");
  const ModelSpec& spec = target.spec;
  Plan plan;
  plan.vram_budget = options.vram_budget;
  plan.context = options.context > 0 ? options.context : std::min<int64_t>(spec.context_length, 4096);

  // Always resident: the draft whole, both KV caches, the workspaces, and every non-FFN target weight.
  if (draft != nullptr) {
    Put(plan, ResidentKind::kDraft, draft->device_total());
    Put(plan, ResidentKind::kKvDraft, KvBytes(draft->spec, plan.context, options.kv_element_bytes));
    Put(plan, ResidentKind::kWorkspace, WorkspaceBytes(draft->spec, plan.context));
  }
  Put(plan, ResidentKind::kKvTarget, KvBytes(spec, plan.context, options.kv_element_bytes));
  Put(plan, ResidentKind::kWorkspace, WorkspaceBytes(spec, plan.context));
  Put(plan, ResidentKind::kEmbedding, target.embedding);
  Put(plan, ResidentKind::kHead, target.head);
  size_t dense_total = 0, largest_dense = 0;
  for (const LayerBytes& l : target.layers) {
    Put(plan, ResidentKind::kNorms, l.norms);
    Put(plan, ResidentKind::kRouters, l.router);
    Put(plan, ResidentKind::kAttention, l.attention);
    Put(plan, ResidentKind::kSharedExperts, l.shared_experts);
    Put(plan, ResidentKind::kExpertBiases, l.expert_biases);
    dense_total += l.dense_ffn;
    largest_dense = std::max(largest_dense, l.dense_ffn);
  }
  size_t fixed = 0;
  for (size_t b : plan.resident_bytes) fixed += b;

  // The least the experts can run in: one verification pass's union of a layer must be resident at
  // once (a cached expert in the current union is never evicted), so min(E, (draft_max + 1)·k) slots
  // and the slot table, unless every expert takes less than that.
  plan.total_experts = target.n_moe_layers() * spec.n_experts;
  plan.slot_bytes = target.slot_bytes();
  const size_t experts_total = target.experts_total();
  // A cache of s slots in the arena: the slots, and its tables, address tables and staging slot
  // (expert_cache_tables.h), each allocation rounded up to the arena's alignment.
  auto cache_bytes = [&](int64_t s) {
    return ArenaBytes(static_cast<size_t>(s) * plan.slot_bytes) +
           ExpertCacheOverheadBytes(target.n_moe_layers(), spec.n_experts, s, plan.slot_bytes, target.expert_bias_roles);
  };
  const int64_t union_max =
      std::min<int64_t>(spec.n_experts, (options.draft_max + 1) * spec.n_experts_used);
  const int64_t union_slots = std::min(plan.total_experts, union_max);
  const size_t min_experts = plan.total_experts == 0 ? 0 : std::min(experts_total, cache_bytes(union_slots));
  const size_t ring = static_cast<size_t>(kDenseRingLayers) * largest_dense;
  const size_t min_dense = std::min(dense_total, ring);
  plan.minimum_budget = fixed + min_dense + min_experts;
  if (options.vram_budget < plan.minimum_budget) {
    return absl::ResourceExhaustedError(Cat(
        "VRAM budget ", FormatBytes(static_cast<double>(options.vram_budget)), " is below the minimum of ",
        FormatBytes(static_cast<double>(plan.minimum_budget)), " (", plan.minimum_budget, " B) for ",
        target.source, draft != nullptr ? Cat(" drafted by ", draft->source) : std::string(), " at context ",
        plan.context, ": draft ", FormatBytes(static_cast<double>(plan.resident(ResidentKind::kDraft))),
        ", KV caches ",
        FormatBytes(static_cast<double>(plan.resident(ResidentKind::kKvTarget) +
                                        plan.resident(ResidentKind::kKvDraft))),
        ", workspaces ", FormatBytes(static_cast<double>(plan.resident(ResidentKind::kWorkspace))),
        ", the target's embedding, head, norms, routers and attention ",
        FormatBytes(static_cast<double>(fixed - plan.resident(ResidentKind::kDraft) -
                                        plan.resident(ResidentKind::kKvTarget) -
                                        plan.resident(ResidentKind::kKvDraft) -
                                        plan.resident(ResidentKind::kWorkspace))),
        min_dense > 0 ? Cat(", dense layer buffers ", FormatBytes(static_cast<double>(min_dense))) : std::string(),
        min_experts > 0 ? Cat(", expert slots for one pass's union ", FormatBytes(static_cast<double>(min_experts)))
                        : std::string(),
        "; a smaller -c, a smaller --draft-max or a smaller draft lowers it"));
  }

  // Dense layers in layer order; when they do not all fit, a ring of buffers streams the rest.
  size_t room = options.vram_budget - fixed;
  if (dense_total + min_experts <= room) {
    Put(plan, ResidentKind::kDenseLayers, dense_total);
    room -= dense_total;
  } else {
    Put(plan, ResidentKind::kDenseRing, ring);
    room -= ring;
    size_t placed = 0;
    for (size_t l = 0; l < target.layers.size(); ++l) {
      const size_t b = target.layers[l].dense_ffn;
      if (b == 0) continue;
      if (placed + b + min_experts <= room) {
        placed += b;
      } else {
        plan.streamed_dense_layers.push_back(static_cast<int>(l));
        plan.streamed_dense += b;
      }
    }
    Put(plan, ResidentKind::kDenseLayers, placed);
    room -= placed;
    if (!plan.streamed_dense_layers.empty()) plan.dense_ring_layers = kDenseRingLayers;
  }

  // Experts: all of them when they fit, else as many cache slots as the rest of the budget holds.
  if (experts_total <= room) {
    Put(plan, ResidentKind::kExpertsResident, experts_total);
    plan.expert_cache_slots = -1;
    plan.slot_share = 1.0;
  } else {
    // Streamed experts: each prompt chunk streams nearly every expert, so a larger chunk
    // (kStreamedPrefillRows) streams the model fewer times per prompt. Its activations come out of
    // the slots' room: taken when they cost at most 1 / kStreamedChunkRoomShare of it and leave one
    // pass's union.
    const size_t larger = WorkspaceBytes(spec, plan.context, kStreamedPrefillRows) -
                          WorkspaceBytes(spec, plan.context, kWorkspaceRows);
    if (larger * kStreamedChunkRoomShare <= room && larger + cache_bytes(union_slots) <= room) {
      Put(plan, ResidentKind::kWorkspace, larger);
      room -= larger;
      plan.prefill_chunk = kStreamedPrefillRows;
    }
    // As many slots as fit with their tables: a slot costs its bytes and 8 B of table (owner and
    // stamp); the estimate is then walked to the exact count past the alignments' rounding.
    const size_t fixed_overhead = cache_bytes(0);
    int64_t slots = std::min<int64_t>(
        plan.total_experts - 1,
        room > fixed_overhead ? static_cast<int64_t>((room - fixed_overhead) / (plan.slot_bytes + 8)) : 0);
    while (slots + 1 < plan.total_experts && cache_bytes(slots + 1) <= room) ++slots;
    while (slots > 0 && cache_bytes(slots) > room) --slots;
    plan.expert_cache_slots = slots;
    const size_t slot_bytes_total = static_cast<size_t>(slots) * plan.slot_bytes;
    Put(plan, ResidentKind::kExpertSlots, slot_bytes_total);
    Put(plan, ResidentKind::kSlotTable, cache_bytes(slots) - slot_bytes_total);
    plan.streamed_experts = experts_total;
    plan.slot_share = static_cast<double>(plan.expert_cache_slots) / static_cast<double>(plan.total_experts);
  }
  for (size_t b : plan.resident_bytes) plan.resident_total += b;
  plan.host_bytes = plan.streamed_experts + plan.streamed_dense;
  if (options.host_available > 0 && static_cast<double>(plan.host_bytes) > options.host_available) {
    return absl::ResourceExhaustedError(
        Cat("host RAM: the streamed part of ", target.source, " needs ",
            FormatBytes(static_cast<double>(plan.host_bytes)), " (", plan.host_bytes, " B) of pinned host memory, ",
            "but only ", FormatBytes(options.host_available), " is available (MemAvailable); a larger "
            "--vram-budget, a smaller weight type or a machine with more RAM would fit"));
  }

  // Predictions under uniform routing. The model: each MoE layer's union is ExpectedDistinctExperts;
  // the cache's slots are spread evenly over the MoE layers (uniform routing loads every layer alike)
  // and hold a random subset of each layer's experts, so a routed expert misses with probability
  // 1 − slots_per_layer / E; every miss crosses PCIe once, and so does every streamed dense layer.
  // VRAM is read for the target's non-expert weights (the embedding only gathers n rows, left out) and
  // for every distinct expert, hit or fetched. floor = PCIe bytes / 55 GB/s + VRAM bytes / 4.2 TB/s:
  // a layer's experts wait for their fetch and the next layer waits for them, so the two add up.
  size_t non_expert = target.head;
  for (const LayerBytes& l : target.layers) {
    non_expert += l.norms + l.attention + l.router + l.dense_ffn + l.shared_experts + l.expert_biases;
  }
  const int64_t n_moe = target.n_moe_layers();
  const double cached_share =
      plan.expert_cache_slots < 0 || n_moe == 0
          ? 1.0
          : std::min(1.0, static_cast<double>(plan.expert_cache_slots) / static_cast<double>(n_moe) /
                              static_cast<double>(spec.n_experts));
  for (int n = 1; n <= kMaxPredictedPositions; ++n) {
    PassPrediction p;
    p.n = n;
    p.distinct_experts = n_moe > 0 ? ExpectedDistinctExperts(spec.n_experts, spec.n_experts_used, n) : 0.0;
    p.missed_experts = p.distinct_experts * (1.0 - cached_share);
    p.streamed_bytes = static_cast<double>(plan.streamed_dense);
    p.hbm_bytes = static_cast<double>(non_expert);
    for (const LayerBytes& l : target.layers) {
      if (!l.moe) continue;
      p.streamed_bytes += p.missed_experts * static_cast<double>(l.expert);
      p.hbm_bytes += p.distinct_experts * static_cast<double>(l.expert);
    }
    p.pcie_seconds = p.streamed_bytes / kPcieBytesPerSecond;
    p.hbm_seconds = p.hbm_bytes / kHbmBytesPerSecond;
    p.floor_seconds = p.pcie_seconds + p.hbm_seconds;
    plan.passes.push_back(p);
  }
  return plan;
}

}  // namespace specgen::moe
