// An MoE layer's experts applied with the routing decided on the device (docs/design.md §6.2: when every expert
// is resident the host need not learn the expert union, so the pass keeps running without a host wait).
// Bit for bit the host-routed composition of Backend ops (RouteWith, then per expert in ascending id:
// GatherRows, MatMul gate/up, AddBias on each where the experts have biases, SwiGlu or SwiGluClamped,
// MatMul down, AddBias, ScatterAddScaled into a zeroed buffer) for 1..16 tokens: each dot product is
// reduced in the order of the GEMV that MatMul would have used, the epilogues round as the element-wise
// kernels do (kernels/arch_math.cuh), and each token's expert outputs are added in ascending expert id
// with the same fmaf.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

inline constexpr int kRoutedExpertsMaxTokens = 16;

// One MoE layer's experts: device tables of `experts` device addresses each (gate and up [ffn, hidden],
// down [hidden, ffn], row-major; 16-byte aligned). Plain experts (f32/f16/bf16) are all of `type`.
// Packed experts: gate and up all of `type`, down all of `down_type`, each a packed block type of its
// own (a Q4_K_M file keeps some layers' ffn_down in Q6_K beside Q4_K gate and up).
struct ExpertTables {
  const void* const* gate = nullptr;
  const void* const* up = nullptr;
  const void* const* down = nullptr;
  int experts = 0;
  int hidden = 0;
  int ffn = 0;
  ElemType type = ElemType::kBF16;
  ElemType down_type = ElemType::kBF16;  // read only when `type` is packed
  // Biases by expert id (gpt-oss), each [ffn], [ffn] or [hidden] of bias_type (kF32, kF16 or kBF16):
  // device tables of device addresses, each null where the experts have no such bias (no add at all,
  // as the host path skips AddBias: adding +0 would turn a −0 into +0).
  const void* const* gate_bias = nullptr;
  const void* const* up_bias = nullptr;
  const void* const* down_bias = nullptr;
  ElemType bias_type = ElemType::kF32;
};

// What a general MoE model (issue 45) does beyond the plain SwiGLU experts, per launch.
struct ExpertFfn {
  // gpt-oss's activation (LaunchSwiGluClamped's formula) instead of SwiGLU.
  bool clamped = false;
  float alpha = 1.702f;
  float limit = 7.0f;
  // Each route weight times this, one rounding, before it scales its expert's output (a softmax
  // router's routed scale, which the host path applies to the routing it reads; a sigmoid router's
  // kernel applies its own: 1 there).
  float route_scale = 1.0f;
};
// Whether a launch needs the general epilogues (biases or the clamped activation). Otherwise the kernels
// are the plain models' own instantiations, compiled without a trace of the general case.
constexpr bool NeedsGeneralEpilogue(const ExpertTables& t, const ExpertFfn& f) {
  return t.gate_bias != nullptr || t.up_bias != nullptr || t.down_bias != nullptr || f.clamped;
}
// Whether LaunchRoutedExperts takes experts whose gate/up are of `gate_up` and down of `down`: one
// plain type for all, or packed gate/up with packed down.
constexpr bool RoutedExpertTypesSupported(ElemType gate_up, ElemType down) {
  return IsPacked(gate_up) ? IsPacked(down) : gate_up == down;
}

size_t RoutedExpertsWorkspaceBytes(int n, int k, int hidden, int ffn);

// out[t] = sum over token t's k experts e (ascending id) of route_w[t, j] * down_e(silu(gate_e x_t) *
// up_e x_t), for t < n (1..kRoutedExpertsMaxTokens); with `ffn` and the tables' biases: route_w[t, j] ·
// ffn.route_scale times (down_e(act(gate_e x_t + bg_e, up_e x_t + bu_e)) + bd_e), act SwiGLU or clamped. route_ids / route_w [n, k] as LaunchRouterTopK
// writes them (distinct ids per token). x [n, hidden], out [n, hidden] fp32, device. Four launches,
// no host wait; packed experts' products run as one wave of blocks over the active experts' row tiles
// (the number of active experts is known only on the device), plain ones over min(n k, experts). On
// sm_90+ the four are launched with programmatic dependent launch (each waits for its predecessor in
// the kernel, so the launch gaps overlap the previous kernel's tail). accumulate: out[t] += that sum
// instead (the residual add, as LaunchAdd's), one kernel fewer a layer. Each expert product is reduced
// as LaunchGemv in `order` reduces it (the row kernel's order where GemvTakes is false), so the result
// equals the host-routed composition of MatMuls in the same order bit for bit. Packed experts take the
// packed product's one definition, as MatMul on them does, whatever `order` or `layout` (speed only:
// kAuto takes rows up to kPackedRowsMaxTokens tokens, as LaunchPackedGemvSegments).
cudaError_t LaunchRoutedExperts(const ExpertTables& tables, const float* x, int n, const int32_t* route_ids,
                                const float* route_w, int k, void* workspace, size_t workspace_bytes,
                                float* out, bool accumulate, cudaStream_t stream,
                                GemvOrder order = kDefaultGemvOrder, PackedLayout layout = PackedLayout::kAuto,
                                const ExpertFfn& ffn = {});

}  // namespace specgen::kernels
