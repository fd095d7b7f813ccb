// The element-wise formulas of the GLM-4.5 / gpt-oss expert FFN on the device (issue 45), defined once
// for the op kernels (arch_elementwise.cu: LaunchAddBias, LaunchSwiGluClamped, LaunchScaleRowsBySigmoid)
// and the routed experts' epilogues (routed_experts.cu), which must give those ops' bits: every product
// and sum is rounded on its own (the _rn intrinsics, so nvcc cannot contract them into an FMA) in the
// CPU's order, and both translation units are built with the same flags, so expf is the same sequence.
// Device code only.
#pragma once

namespace specgen::kernels::detail {

// 1 / (1 + e^−z) as the CPU writes it: each step one IEEE rounding.
__device__ __forceinline__ float SigmoidRn(float z) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z))); }

// gpt-oss's activation: (clamp(u, −limit, limit) + 1) · (g' · σ(alpha · g')), g' = min(g, limit), with
// std::min's and std::clamp's comparisons, so a NaN passes through as on the CPU.
__device__ __forceinline__ float SwiGluClampedRn(float g, float u, float alpha, float limit) {
  const float gc = limit < g ? limit : g;
  const float uc = u < -limit ? -limit : (limit < u ? limit : u);
  const float glu = __fmul_rn(gc, SigmoidRn(__fmul_rn(gc, alpha)));
  return __fmul_rn(__fadd_rn(uc, 1.0f), glu);
}

}  // namespace specgen::kernels::detail
