#include <algorithm>
#include <type_traits>

#include "kernels/arch_math.cuh"
#include "kernels/device_util.cuh"
#include "kernels/packed.cuh"
#include "kernels/gemv.cuh"
#include "kernels/mma_tile.cuh"
#include "kernels/packed_blocks.cuh"
#include "kernels/packed_mma.cuh"
#include "kernels/packed_rows.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/routed_experts.cuh"
#include "kernels/router.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = 4;  // warps per block of the expert GEMVs: one output row a warp
constexpr int kMaxT = kRoutedExpertsMaxTokens;

// The routing turned into work lists, in the workspace (S = n k entries):
//   n_active; per active expert u (ascending id): its id, token count and first slot; per slot (grouped by
//   expert in ascending id, tokens ascending within an expert, as the host's grouping) its token; per
//   token its k (slot, weight) pairs in ascending expert id; then the SwiGLU activations [S, ffn] and the
//   expert outputs [S, hidden].
struct Plan {
  int* n_active;
  int* expert;
  int* count;
  int* first;
  int* slot_token;
  int* token_slot;
  float* token_w;
  float* act;
  float* y;
};

__host__ __device__ inline size_t Align16(size_t b) { return (b + 15) / 16 * 16; }

__host__ __device__ inline Plan CarvePlan(void* ws, int s, int ffn) {
  char* p = static_cast<char*>(ws);
  Plan plan;
  const auto take = [&p](size_t bytes) {
    char* q = p;
    p += Align16(bytes);
    return q;
  };
  plan.n_active = reinterpret_cast<int*>(take(sizeof(int)));
  plan.expert = reinterpret_cast<int*>(take(sizeof(int) * s));
  plan.count = reinterpret_cast<int*>(take(sizeof(int) * s));
  plan.first = reinterpret_cast<int*>(take(sizeof(int) * s));
  plan.slot_token = reinterpret_cast<int*>(take(sizeof(int) * s));
  plan.token_slot = reinterpret_cast<int*>(take(sizeof(int) * s));
  plan.token_w = reinterpret_cast<float*>(take(sizeof(float) * s));
  plan.act = reinterpret_cast<float*>(take(sizeof(float) * static_cast<size_t>(s) * ffn));
  plan.y = reinterpret_cast<float*>(p);
  return plan;
}

// One block of kPlanThreads (>= experts, >= n k): counts by direct scans (S <= 512 entries), the
// active experts' order by a scan over the experts' presence flags.
constexpr int kPlanThreads = kRouterMaxExperts;
__global__ void __launch_bounds__(kPlanThreads) PlanKernel(const int32_t* __restrict__ ids,
                                                           const float* __restrict__ w, int n, int k,
                                                           int experts, float route_scale, Plan plan) {
  static_assert(kPlanThreads == 32 * 32, "the scan below takes 32 warps");
  __shared__ int scan[64];
  __shared__ int ids_s[kMaxT * kRouterMaxTopK];  // the scans below read every id once a thread
  LetDependentsLaunch();
  WaitForPrecedingGrid();  // the router's ids and weights
  const int s = n * k, t = threadIdx.x;
  for (int i = t; i < s; i += kPlanThreads) ids_s[i] = ids[i];
  __syncthreads();
  int count = 0, before = 0;  // entries routed to expert t; entries routed to experts below t
  if (t < experts) {
    for (int i = 0; i < s; ++i) {
      const int e = ids_s[i];
      count += e == t;
      before += e < t;
    }
  }
  // The active experts' order: an exclusive scan of the presence flags, within a warp by ballot, then
  // over the warps' totals by warp 0 (two barriers, where a block-wide scan takes twenty).
  const int lane = t & 31, warp = t >> 5;
  const unsigned present = __ballot_sync(0xffffffffu, count > 0);
  if (lane == 0) scan[warp] = __popc(present);
  __syncthreads();
  if (warp == 0) {
    const int total = scan[lane];  // kPlanThreads / 32 == 32 warps
    int incl = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    scan[32 + lane] = incl - total;
    if (lane == 31) *plan.n_active = incl;
  }
  __syncthreads();
  if (count > 0) {
    const int u = scan[32 + warp] + __popc(present & ((1u << lane) - 1u));
    plan.expert[u] = t;
    plan.count[u] = count;
    plan.first[u] = before;
  }
  if (t < s) {
    const int i = t / k, e = ids_s[t];
    int slot = 0, rank = 0;  // slot: entries below e, plus earlier tokens of e; rank among token i's
    for (int j = 0; j < s; ++j) {
      const int ej = ids_s[j];
      slot += ej < e || (ej == e && j / k < i);
      rank += j / k == i && ej < e;
    }
    plan.slot_token[slot] = i;
    plan.token_slot[i * k + rank] = slot;
    plan.token_w[i * k + rank] = __fmul_rn(w[t], route_scale);  // x · 1 is x: the plain models' bits
  }
}

// The epilogues of the products. kGen false: the plain models' SwiGLU and raw down product, exactly
// the code they had before the general models came (a compile-time variant, not a runtime branch: the
// plain kernels' registers and instructions stay as they were). kGen true: the host-routed op sequence
// of a general model, op for op: + gate/up bias (AddBiasKernel's one fp32 add), then SwiGLU or
// SwiGluClampedKernel's formula; down product + down bias. Which bias or activation a layer has is a
// uniform branch on kernel parameters, negligible beside the products.
template <bool kGen>
__device__ __forceinline__ float ExpertActivation(const ExpertTables& tab, const ExpertFfn& ffn, int e, int row,
                                                  float g, float u) {
  if constexpr (kGen) {
    if (tab.gate_bias != nullptr) g = __fadd_rn(g, detail::LoadAsF32(tab.gate_bias[e], tab.bias_type, row));
    if (tab.up_bias != nullptr) u = __fadd_rn(u, detail::LoadAsF32(tab.up_bias[e], tab.bias_type, row));
    if (ffn.clamped) return detail::SwiGluClampedRn(g, u, ffn.alpha, ffn.limit);
  }
  return portable::SiluMul(g, u);  // SwiGluKernel's
}
template <bool kGen>
__device__ __forceinline__ float ExpertOutput(const ExpertTables& tab, int e, int row, float y) {
  if constexpr (kGen) {
    if (tab.down_bias != nullptr) y = __fadd_rn(y, detail::LoadAsF32(tab.down_bias[e], tab.bias_type, row));
  }
  return y;
}

// sum_k w_r[k] x_t[k] for each of the warp's kRows rows (gate and up share their inputs: their loads go
// out together) and each of the m tokens, in the order MatMul's kernel for this shape reduces it:
// kChunked (GemvTakes: the GEMV of gemv.cu) lane l takes k = 8 l + 256 s + j; otherwise
// (MatMulRowsKernel) k = l + 32 s; then the same butterfly. Every lane gets the sums.
template <ElemType kW, bool kChunked, int kRows>
__device__ __forceinline__ void RowDots(const void* const (&w_row)[kRows], const float* const (&x)[kMaxT], int m,
                                        int in, float (&acc)[kRows][kMaxT]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) acc[r][t] = 0.f;
  if constexpr (kChunked) {
    // kAhead chunks of each row loaded before any is used (a warp's loads in flight; the sums still
    // take the chunks in k order).
    constexpr int kAhead = 4;
    for (int k0 = lane * 8; k0 < in; k0 += 256 * kAhead) {
      uint4 wv[kRows][kAhead];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          wv[r][a] = k0 + 256 * a < in
                         ? detail::LoadWeights16(static_cast<const uint16_t*>(w_row[r]) + k0 + 256 * a)
                         : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int k = k0 + 256 * a;
        if (k >= in) break;
        float wf[kRows][8];
#pragma unroll
        for (int r = 0; r < kRows; ++r) detail::Unpack8<kW>(wv[r][a], wf[r]);
        detail::FmaChunk8<kRows, kMaxT>(wf, m, [&](int t) { return x[t] + k; }, acc);
      }
    }
  } else {
    for (int k = lane; k < in; k += 32) {
      float wk[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) wk[r] = detail::LoadAsF32(w_row[r], kW, k);
#pragma unroll
      for (int t = 0; t < kMaxT; ++t) {
        if (t >= m) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] = __fmaf_rn(wk[r], x[t][k], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) acc[r][t] = detail::WarpSum(acc[r][t]);
}

// grid (ffn / kWarps rounded up, min(n k, experts)): block y = the y-th active expert, warp = one row of
// Lane 0 of a warp stores row `row` of the activations of the expert's m tokens (slots first ..):
// the activation (ExpertActivation) of gu[0] (gate) and gu[1] (up) of expert e.
template <bool kGen, int N>
__device__ __forceinline__ void StoreSwiGlu(const ExpertTables& tab, const ExpertFfn& fo, const Plan& plan, int e,
                                            int first, int m, int ffn, int row, const float (&gu)[2][N]) {
  if ((threadIdx.x & 31) != 0) return;  // (a return from this helper only: callers loop on)
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (t >= m) break;
    const float g = gu[0][t];
    plan.act[static_cast<int64_t>(first + t) * ffn + row] = ExpertActivation<kGen>(tab, fo, e, row, g, gu[1][t]);
  }
}

// Lane 0 of a warp stores row `row` of expert e's outputs (ExpertOutput) of its m tokens (slots first ..).
template <bool kGen, int N>
__device__ __forceinline__ void StoreExpertOutputs(const ExpertTables& tab, const Plan& plan, int e, int first, int m,
                                                   int hidden, int row, const float (&y)[1][N]) {
  if ((threadIdx.x & 31) != 0) return;  // (a return from this helper only: callers loop on)
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (t >= m) break;
    plan.y[static_cast<int64_t>(first + t) * hidden + row] = ExpertOutput<kGen>(tab, e, row, y[0][t]);
  }
}

// gate and up for all the expert's tokens; writes their activation (ExpertActivation).
template <ElemType kW, bool kChunked, bool kGen>
__global__ void __launch_bounds__(kWarps * 32) GateUpKernel(ExpertTables tab, const float* __restrict__ x,
                                                            Plan plan, ExpertFfn fo) {
  WaitForPrecedingGrid();  // the plan
  const int u = blockIdx.y;
  if (u >= *plan.n_active) return;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= tab.ffn) return;
  const int e = plan.expert[u], m = plan.count[u], first = plan.first[u];
  const float* xs[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    xs[t] = x + static_cast<int64_t>(t < m ? plan.slot_token[first + t] : 0) * tab.hidden;
  }
  const size_t off = static_cast<size_t>(row) * tab.hidden * ElemBytes(kW);
  const void* const rows[2] = {static_cast<const char*>(tab.gate[e]) + off, static_cast<const char*>(tab.up[e]) + off};
  float gu[2][kMaxT];
  RowDots<kW, kChunked, 2>(rows, xs, m, tab.hidden, gu);
  // The down kernel's blocks may be scheduled once every block here has read its weights (earlier, they
  // would hold multiprocessors that this grid's later waves still need).
  LetDependentsLaunch();
  StoreSwiGlu<kGen>(tab, fo, plan, e, first, m, tab.ffn, row, gu);
}

// grid (hidden / kWarps rounded up, min(n k, experts)): one row of down a warp, every token of the expert.
template <ElemType kW, bool kChunked, bool kGen>
__global__ void __launch_bounds__(kWarps * 32) DownKernel(ExpertTables tab, Plan plan) {
  WaitForPrecedingGrid();  // the activations
  const int u = blockIdx.y;
  if (u >= *plan.n_active) return;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= tab.hidden) return;
  const int m = plan.count[u], first = plan.first[u];
  const float* xs[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) xs[t] = plan.act + static_cast<int64_t>(first + (t < m ? t : 0)) * tab.ffn;
  const int e = plan.expert[u];
  const void* const rows[1] = {static_cast<const char*>(tab.down[e]) + static_cast<size_t>(row) * tab.ffn * ElemBytes(kW)};
  float y[1][kMaxT];
  RowDots<kW, kChunked, 1>(rows, xs, m, tab.ffn, y);
  LetDependentsLaunch();  // as in GateUpKernel
  StoreExpertOutputs<kGen>(tab, plan, e, first, m, tab.hidden, row, y);
}

// grid (hidden / 256 rounded up, n): acc = 0, then += weight * expert output in ascending expert id,
// with ScatterAddScaledKernel's fmaf; out = acc, or out + acc (accumulate: LaunchAdd's sum).
__global__ void CombineKernel(Plan plan, int k, int hidden, float* __restrict__ out, bool accumulate) {
  WaitForPrecedingGrid();  // the expert outputs; what follows is not launched programmatically
  const int c = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (c >= hidden) return;
  float acc = 0.f;
  for (int r = 0; r < k; ++r) {
    const int slot = plan.token_slot[i * k + r];
    acc = __fmaf_rn(plan.token_w[i * k + r], plan.y[static_cast<int64_t>(slot) * hidden + c], acc);
  }
  float* o = out + static_cast<int64_t>(i) * hidden + c;
  *o = accumulate ? *o + acc : acc;
}

// GateUpKernel and DownKernel in GemvOrder::kTensorCores (kernels/mma_tile.cuh), taken where
// detail::MmaOrder says LaunchGemv takes it: a warp is part
// warp % P of a 16-row tile of the expert's rows (P = MmaParts of the matrix's shape, as LaunchGemv on
// that matrix alone), every token of the expert a column. A row's bits depend only on its weights, its
// inputs and the parts, so they equal MatMul's on the gathered rows.
template <int NT, int P, bool kGen, int W = (P > 8 ? P : 8)>
__global__ void __launch_bounds__(W * 32) MmaGateUpKernel(ExpertTables tab, const float* __restrict__ x, Plan plan,
                                                          ExpertFfn fo) {
  WaitForPrecedingGrid();  // the plan
  const int u = blockIdx.y;
  if (u >= *plan.n_active) return;  // the whole block: AddParts' barrier is not reached by any warp
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int tile = blockIdx.x * (W / P) + warp / P;
  const bool live = tile * 16 < tab.ffn;
  const int e = plan.expert[u], m = plan.count[u], first = plan.first[u];
  const uint16_t* wrow[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t off = static_cast<int64_t>(min(tile * 16 + g + 8 * h, tab.ffn - 1)) * tab.hidden;
    wrow[h * 2] = static_cast<const uint16_t*>(tab.gate[e]) + off;
    wrow[h * 2 + 1] = static_cast<const uint16_t*>(tab.up[e]) + off;
  }
  int b0, b1;
  detail::PartBlocks(tab.hidden, P, warp % P, &b0, &b1);
  float sum[2][NT][4];
  detail::MmaTilePart<NT, 2, 2>(
      wrow, live, b0, b1, m,
      detail::XFromRows([&](int t) { return x + static_cast<int64_t>(plan.slot_token[first + t]) * tab.hidden; }),
      [] {}, sum);
  LetDependentsLaunch();  // as in GateUpKernel
  if (!detail::AddParts<W, P, 2 * NT * 4>(&sum[0][0][0]) || !live) return;
  detail::ForEachTileSum<NT>([&](int t, int h, int j, int i) {
    const int row = tile * 16 + g + 8 * h;
    if (t >= m || row >= tab.ffn) return;
    const float gv = sum[0][j][i];
    plan.act[static_cast<int64_t>(first + t) * tab.ffn + row] = ExpertActivation<kGen>(tab, fo, e, row, gv, sum[1][j][i]);
  });
}

template <int NT, int P, bool kGen, int W = (P > 8 ? P : 8)>
__global__ void __launch_bounds__(W * 32) MmaDownKernel(ExpertTables tab, Plan plan) {
  WaitForPrecedingGrid();  // the activations
  const int u = blockIdx.y;
  if (u >= *plan.n_active) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int tile = blockIdx.x * (W / P) + warp / P;
  const bool live = tile * 16 < tab.hidden;
  const int e = plan.expert[u], m = plan.count[u], first = plan.first[u];
  const uint16_t* wrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    wrow[h] = static_cast<const uint16_t*>(tab.down[e]) +
              static_cast<int64_t>(min(tile * 16 + g + 8 * h, tab.hidden - 1)) * tab.ffn;
  }
  int b0, b1;
  detail::PartBlocks(tab.ffn, P, warp % P, &b0, &b1);
  float sum[1][NT][4];
  detail::MmaTilePart<NT, 1, 4>(
      wrow, live, b0, b1, m,
      detail::XFromRows([&](int t) { return plan.act + static_cast<int64_t>(first + t) * tab.ffn; }), [] {}, sum);
  LetDependentsLaunch();
  if (!detail::AddParts<W, P, NT * 4>(&sum[0][0][0]) || !live) return;
  detail::ForEachTileSum<NT>([&](int t, int h, int j, int i) {
    const int row = tile * 16 + g + 8 * h;
    if (t >= m || row >= tab.hidden) return;
    plan.y[static_cast<int64_t>(first + t) * tab.hidden + row] = ExpertOutput<kGen>(tab, e, row, sum[0][j][i]);
  });
}

template <int NT, int P, bool kGen>
cudaError_t LaunchMmaGateUpP(const ExpertTables& tab, const float* x, const Plan& plan, const ExpertFfn& fo, unsigned ys,
                             cudaStream_t stream, bool pdl) {
  constexpr int W = P > 8 ? P : 8;
  const unsigned grid = static_cast<unsigned>(((tab.ffn + 15) / 16 + W / P - 1) / (W / P));
  return LaunchDecodeKernel(MmaGateUpKernel<NT, P, kGen>, dim3(grid, ys), dim3(W * 32), 0, stream, pdl, tab, x, plan,
                            fo);
}
template <int NT, int P, bool kGen>
cudaError_t LaunchMmaDownP(const ExpertTables& tab, const Plan& plan, unsigned ys, cudaStream_t stream, bool pdl) {
  constexpr int W = P > 8 ? P : 8;
  const unsigned grid = static_cast<unsigned>(((tab.hidden + 15) / 16 + W / P - 1) / (W / P));
  return LaunchDecodeKernel(MmaDownKernel<NT, P, kGen>, dim3(grid, ys), dim3(W * 32), 0, stream, pdl, tab, plan);
}
// f(integral_constant<P>) for the parts MmaParts gives.
template <typename F>
cudaError_t WithParts(int parts, F f) {
  switch (parts) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 16>{});
  }
}
template <int NT, bool kGen>
cudaError_t LaunchMmaGateUp(const ExpertTables& tab, const float* x, const Plan& plan, const ExpertFfn& fo, unsigned ys,
                            cudaStream_t stream, bool pdl) {
  return WithParts(detail::MmaParts(tab.ffn, tab.hidden), [&](auto p) {
    return LaunchMmaGateUpP<NT, decltype(p)::value, kGen>(tab, x, plan, fo, ys, stream, pdl);
  });
}
template <int NT, bool kGen>
cudaError_t LaunchMmaDown(const ExpertTables& tab, const Plan& plan, unsigned ys, cudaStream_t stream, bool pdl) {
  return WithParts(detail::MmaParts(tab.hidden, tab.ffn), [&](auto p) {
    return LaunchMmaDownP<NT, decltype(p)::value, kGen>(tab, plan, ys, stream, pdl);
  });
}

// GateUpKernel and DownKernel on packed experts (gate/up of kT, down of kD): the packed product's one
// definition (kernels/packed_mma.cuh), which is MatMul's on the gathered rows. The work is the active
// experts' 16-row tiles, (expert u, tile) items in order, and each block takes a contiguous run of
// them: the grid fills the device whether 8 experts are active or 60 (known only on the device), and a
// block quantizes an expert's tokens' inputs into shared memory once for all its tiles of that expert.
// Each expert's weights are read once for all its tokens. kNT: token tiles of 8 (the most tokens an
// expert has in the launch, rounded up).
constexpr int kProductThreads = detail::kSliceWarps * 32;

// The loop both packed expert kernels run over the block's run of items. in_of(u, t): the input row of
// active expert u's t-th token; mat(j, e): expert e's matrix j of kMats (out_rows rows over `in`);
// store(e, first, row, tok, v): the kMats results of output row `row` of expert e for its token `tok`
// (its slot first + tok), called by the warps that end TileProducts with them.
template <ElemType kT, int kMats, int kNT, typename InOf, typename Mat, typename Store>
__device__ __forceinline__ void ExpertItems(const Plan& plan, int in, int out_rows, InOf in_of,
                                            Mat mat, Store store) {
  extern __shared__ __align__(16) uint8_t experts_smem[];
  const int tiles = (out_rows + detail::kTileRows - 1) / detail::kTileRows;
  const int64_t items = static_cast<int64_t>(*plan.n_active) * tiles;
  const int begin = static_cast<int>(items * blockIdx.x / gridDim.x);
  const int end = static_cast<int>(items * (blockIdx.x + 1) / gridDim.x);
  const int64_t row_bytes = PackedRowBytes(kT, in);
  float* partial = reinterpret_cast<float*>(experts_smem);
  const detail::SmemActs a = detail::SmemActs::Carve(experts_smem + detail::kPartialBytes<kMats, kNT>, 8 * kNT, in);
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  int u_now = -1, e = 0, m = 0, first = 0, ntiles = 0;
  for (int i = begin; i < end; ++i) {
    const int u = i / tiles, tile = i % tiles;
    if (u != u_now) {  // the previous item's closing barrier: no warp still reads the old inputs
      u_now = u;
      e = plan.expert[u];
      m = plan.count[u];
      first = plan.first[u];
      ntiles = (m + 7) / 8;
      detail::QuantizeToSmem(a, m, 8 * ntiles, [&in_of, u](int t) { return in_of(u, t); });
      __syncthreads();
    }
    const int row[2] = {tile * detail::kTileRows + g, tile * detail::kTileRows + g + 8};
    const uint8_t* rows[kMats][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t off = static_cast<int64_t>(row[r] < out_rows ? row[r] : 0) * row_bytes;
#pragma unroll
      for (int j = 0; j < kMats; ++j) rows[j][r] = static_cast<const uint8_t*>(mat(j, e)) + off;
    }
    float out[kMats];
    detail::TileElement el;
    if (detail::TileProducts<kT, kMats, kNT>(rows, a, ntiles, partial, out, &el)) {
      const int r = el.e >> 1, tok = 8 * el.t + 2 * c + (el.e & 1);
      if (row[r] < out_rows && tok < m) store(e, first, row[r], tok, out);
    }
    __syncthreads();  // partial (and, for a new expert, the inputs) are written again
  }
}

// The same products a half-warp a row (kernels/packed_rows.cuh) where every expert has at most kM
// tokens: items are (active expert u, group of kRowGroup rows), split evenly over one wave of blocks
// as ExpertItems splits tiles; lane t of a row's half-warp stores token t's results.
constexpr int kRowThreads = detail::kRowWarps * 32;
constexpr int kRowGroup = 2 * detail::kRowWarps;

template <ElemType kT, int kMats, int kM, typename InOf, typename Mat, typename Store>
__device__ __forceinline__ void ExpertRowItems(const Plan& plan, int in, int out_rows, InOf in_of, Mat mat,
                                               Store store) {
  extern __shared__ __align__(16) uint8_t expert_rows_smem[];
  const int groups = (out_rows + kRowGroup - 1) / kRowGroup;
  const int64_t items = static_cast<int64_t>(*plan.n_active) * groups;
  const int begin = static_cast<int>(items * blockIdx.x / gridDim.x);
  const int end = static_cast<int>(items * (blockIdx.x + 1) / gridDim.x);
  const int64_t row_bytes = PackedRowBytes(kT, in);
  const detail::SmemActs a = detail::SmemActs::Carve(expert_rows_smem, kM, in);
  const int half = threadIdx.x >> 4, lane16 = threadIdx.x & 15;
  int u_now = -1, e = 0, m = 0, first = 0;
  for (int i = begin; i < end; ++i) {
    const int u = i / groups, grp = i % groups;
    if (u != u_now) {
      if (u_now >= 0) __syncthreads();  // no warp still reads the previous expert's inputs
      u_now = u;
      e = plan.expert[u];
      m = plan.count[u];
      first = plan.first[u];
      const int64_t off = static_cast<int64_t>(min(grp * kRowGroup + half, out_rows - 1)) * row_bytes;
#pragma unroll
      for (int j = 0; j < kMats; ++j) {
        detail::PrefetchSlice(static_cast<const uint8_t*>(mat(j, e)) + off, in / detail::kProductBlock, row_bytes);
      }
      detail::QuantizeToSmem(a, m, m, [&in_of, u](int t) { return in_of(u, t); });
      __syncthreads();
    }
    const int row = grp * kRowGroup + half;
    const int64_t off = static_cast<int64_t>(row < out_rows ? row : 0) * row_bytes;
    const uint8_t* rows[kMats];
#pragma unroll
    for (int j = 0; j < kMats; ++j) rows[j] = static_cast<const uint8_t*>(mat(j, e)) + off;
    float out[kMats][kM];
    detail::RowProducts<kT, kMats, kM>(rows, a, m, out);
#pragma unroll
    for (int t = 0; t < kM; ++t) {
      if (t != lane16 || t >= m || row >= out_rows) continue;
      float v[kMats];
#pragma unroll
      for (int j = 0; j < kMats; ++j) v[j] = out[j][t];
      store(e, first, row, t, v);
    }
  }
}

// Which loop a packed expert kernel runs: the row layout's (kN: the most tokens an expert has) or the
// tile layout's (kN: token tiles of 8); the kernels below are the same otherwise.
template <bool kRows>
inline constexpr int kExpertThreads = kRows ? kRowThreads : kProductThreads;
template <bool kRows, ElemType kT, int kMats, int kN, typename InOf, typename Mat, typename Store>
__device__ __forceinline__ void ExpertLoop(const Plan& plan, int in, int out_rows, InOf in_of, Mat mat, Store store) {
  if constexpr (kRows) {
    ExpertRowItems<kT, kMats, kN>(plan, in, out_rows, in_of, mat, store);
  } else {
    ExpertItems<kT, kMats, kN>(plan, in, out_rows, in_of, mat, store);
  }
}

template <bool kRows, ElemType kT, int kN, bool kGen>
__global__ void __launch_bounds__(kExpertThreads<kRows>) PackedGateUpKernel(ExpertTables tab,
                                                                            const float* __restrict__ x, Plan plan,
                                                                            ExpertFfn fo) {
  WaitForPrecedingGrid();  // the plan
  const int hidden = tab.hidden, ffn = tab.ffn;
  ExpertLoop<kRows, kT, 2, kN>(
      plan, hidden, ffn,
      [&](int u, int t) { return x + static_cast<int64_t>(plan.slot_token[plan.first[u] + t]) * hidden; },
      [&](int j, int e) { return j == 0 ? tab.gate[e] : tab.up[e]; },
      [&](int e, int first, int row, int tok, const float (&v)[2]) {
        plan.act[static_cast<int64_t>(first + tok) * ffn + row] = ExpertActivation<kGen>(tab, fo, e, row, v[0], v[1]);
      });
  LetDependentsLaunch();
}

template <bool kRows, ElemType kD, int kN, bool kGen>
__global__ void __launch_bounds__(kExpertThreads<kRows>) PackedDownKernel(ExpertTables tab, Plan plan) {
  WaitForPrecedingGrid();  // the activations
  const int hidden = tab.hidden, ffn = tab.ffn;
  ExpertLoop<kRows, kD, 1, kN>(
      plan, ffn, hidden,
      [&](int u, int t) { return plan.act + static_cast<int64_t>(plan.first[u] + t) * ffn; },
      [&](int, int e) { return tab.down[e]; },
      [&](int e, int first, int row, int tok, const float (&v)[1]) {
        plan.y[static_cast<int64_t>(first + tok) * hidden + row] = ExpertOutput<kGen>(tab, e, row, v[0]);
      });
  LetDependentsLaunch();
}

// One wave of row blocks over at most `ys` active experts of `out_rows` rows each.
template <typename Kernel, typename... Args>
cudaError_t LaunchExpertRows(Kernel kernel, int out_rows, unsigned ys, int in, int m, cudaStream_t stream, bool pdl,
                             Args... args) {
  const size_t smem = detail::ActsBytes(m, in);
  int resident = 0;
  const cudaError_t e = detail::ResidentBlocks(kernel, kRowThreads, smem, &resident);
  if (e != cudaSuccess) return e;
  const int64_t items = static_cast<int64_t>((out_rows + kRowGroup - 1) / kRowGroup) * ys;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(items, resident)));
  return LaunchDecodeKernel(kernel, dim3(grid), dim3(kRowThreads), smem, stream, pdl, args...);
}

template <int kM, bool kGen>
cudaError_t LaunchRowsM(const ExpertTables& tab, const float* x, unsigned ys, const Plan& plan, const ExpertFfn& fo,
                        cudaStream_t stream, bool pdl) {
  cudaError_t e = detail::WithPackedType(tab.type, [&](auto t) {
    return LaunchExpertRows(PackedGateUpKernel<true, decltype(t)::value, kM, kGen>, tab.ffn, ys, tab.hidden, kM,
                            stream, pdl, tab, x, plan, fo);
  });
  if (e != cudaSuccess) return e;
  return detail::WithPackedType(tab.down_type, [&](auto t) {
    return LaunchExpertRows(PackedDownKernel<true, decltype(t)::value, kM, kGen>, tab.hidden, ys, tab.ffn, kM, stream,
                            pdl, tab, plan);
  });
}

// A launch over at most `ys` active experts of `tiles` row tiles each: one wave of the blocks the device
// holds at once, or fewer where there are fewer items.
template <typename Kernel, typename... Args>
cudaError_t LaunchExpertProduct(Kernel kernel, int tiles, unsigned ys, int in, int mats, int nt, cudaStream_t stream,
                                bool pdl, Args... args) {
  const size_t smem = sizeof(float) * detail::kSliceWarps * mats * nt * 4 * 32 + detail::ActsBytes(8 * nt, in);
  int resident = 0;
  const cudaError_t e = detail::ResidentProductBlocks(kernel, smem, &resident);
  if (e != cudaSuccess) return e;
  const int64_t items = static_cast<int64_t>(tiles) * ys;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(items, resident)));
  return LaunchDecodeKernel(kernel, dim3(grid), dim3(kProductThreads), smem, stream, pdl, args...);
}

template <int kNT, bool kGen>
cudaError_t LaunchPackedNT(const ExpertTables& tab, const float* x, unsigned ys, const Plan& plan, const ExpertFfn& fo,
                           cudaStream_t stream, bool pdl) {
  const int tile = detail::kTileRows;
  cudaError_t e = detail::WithPackedType(tab.type, [&](auto t) {
    return LaunchExpertProduct(PackedGateUpKernel<false, decltype(t)::value, kNT, kGen>, (tab.ffn + tile - 1) / tile,
                               ys, tab.hidden, 2, kNT, stream, pdl, tab, x, plan, fo);
  });
  if (e != cudaSuccess) return e;
  return detail::WithPackedType(tab.down_type, [&](auto t) {
    return LaunchExpertProduct(PackedDownKernel<false, decltype(t)::value, kNT, kGen>, (tab.hidden + tile - 1) / tile,
                               ys, tab.ffn, 1, kNT, stream, pdl, tab, plan);
  });
}

template <bool kGen>
cudaError_t LaunchPacked(const ExpertTables& tab, const float* x, int n, int k, const Plan& plan, const ExpertFfn& fo,
                         float* out, bool accumulate, cudaStream_t stream, PackedLayout layout) {
  const unsigned ys = static_cast<unsigned>(std::min(n * k, tab.experts));
  const bool pdl = ProgrammaticLaunchOnCurrentDevice();
  // An expert has at most n tokens: a half-warp a row (packed_rows.cuh), or one tile of 8 columns up
  // to 8, two up to 16; both layouts give the definition's bits.
  cudaError_t e;
  if (layout == PackedLayout::kAuto) layout = DefaultPackedLayout();
  if (layout == PackedLayout::kRows || (layout == PackedLayout::kAuto && n <= kPackedRowsMaxTokens)) {
    e = detail::WithRowTokens(n, [&](auto m) {
      return LaunchRowsM<decltype(m)::value, kGen>(tab, x, ys, plan, fo, stream, pdl);
    });
  } else {
    e = n <= 8 ? LaunchPackedNT<1, kGen>(tab, x, ys, plan, fo, stream, pdl)
               : LaunchPackedNT<2, kGen>(tab, x, ys, plan, fo, stream, pdl);
  }
  if (e == cudaSuccess) {
    e = LaunchDecodeKernel(CombineKernel, dim3((tab.hidden + 255) / 256, n), dim3(256), 0, stream, pdl, plan, k,
                           tab.hidden, out, accumulate);
  }
  return e;
}

// Where the device takes programmatic dependent launch (ProgrammaticLaunchOnCurrentDevice), each of
// the plan, gate/up, down and combine kernels is launched while its predecessor runs: its blocks are
// scheduled once the predecessor's blocks have done their reads (LetDependentsLaunch) and wait
// (WaitForPrecedingGrid) before reading anything the predecessor writes, so the four launch gaps of a
// layer shrink and results do not change.
// kCH / kCF: whether the products over hidden (gate, up) / over ffn (down) take the GEMV's order.
template <ElemType kW, bool kCH, bool kCF, bool kGen>
cudaError_t LaunchTyped(const ExpertTables& tab, const float* x, int n, int k, const Plan& plan, const ExpertFfn& fo,
                        float* out, bool accumulate, cudaStream_t stream, GemvOrder order) {
  const unsigned ys = static_cast<unsigned>(std::min(n * k, tab.experts));
  const bool pdl = ProgrammaticLaunchOnCurrentDevice();
  // An expert has at most n tokens: one n8 tile of columns up to 8, two up to 16.
  cudaError_t e;
  if (detail::MmaOrder(order, kW, tab.hidden)) {
    e = n <= 8 ? LaunchMmaGateUp<1, kGen>(tab, x, plan, fo, ys, stream, pdl)
               : LaunchMmaGateUp<2, kGen>(tab, x, plan, fo, ys, stream, pdl);
  } else {
    e = LaunchDecodeKernel(GateUpKernel<kW, kCH, kGen>, dim3((tab.ffn + kWarps - 1) / kWarps, ys), dim3(kWarps * 32),
                           0, stream, pdl, tab, x, plan, fo);
  }
  if (e == cudaSuccess) {
    if (detail::MmaOrder(order, kW, tab.ffn)) {
      e = n <= 8 ? LaunchMmaDown<1, kGen>(tab, plan, ys, stream, pdl) : LaunchMmaDown<2, kGen>(tab, plan, ys, stream, pdl);
    } else {
      e = LaunchDecodeKernel(DownKernel<kW, kCF, kGen>, dim3((tab.hidden + kWarps - 1) / kWarps, ys), dim3(kWarps * 32),
                             0, stream, pdl, tab, plan);
    }
  }
  if (e == cudaSuccess) {
    e = LaunchDecodeKernel(CombineKernel, dim3((tab.hidden + 255) / 256, n), dim3(256), 0, stream, pdl, plan, k,
                           tab.hidden, out, accumulate);
  }
  return e;
}

template <ElemType kW, bool kGen>
cudaError_t LaunchHalf(const ExpertTables& tab, const float* x, int n, int k, const Plan& plan, const ExpertFfn& fo,
                       float* out, bool accumulate, cudaStream_t stream, GemvOrder order) {
  const bool ch = GemvTakes(kW, tab.hidden), cf = GemvTakes(kW, tab.ffn);
  if (ch && cf) return LaunchTyped<kW, true, true, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
  if (ch) return LaunchTyped<kW, true, false, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
  if (cf) return LaunchTyped<kW, false, true, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
  return LaunchTyped<kW, false, false, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
}

// The launches after the plan, for one epilogue variant.
template <bool kGen>
cudaError_t LaunchProducts(const ExpertTables& tab, const float* x, int n, int k, const Plan& plan, const ExpertFfn& fo,
                           float* out, bool accumulate, cudaStream_t stream, GemvOrder order, PackedLayout layout) {
  // The order MatMul would use for each product (CudaBackend::MatMul): the GEMV where GemvTakes (in
  // `order`), else the row kernel.
  if (IsPacked(tab.type)) return LaunchPacked<kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, layout);
  if (tab.type == ElemType::kF32) {
    return LaunchTyped<ElemType::kF32, false, false, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
  }
  return detail::WithHalfType(tab.type, [&](auto t) {
    return LaunchHalf<decltype(t)::value, kGen>(tab, x, n, k, plan, fo, out, accumulate, stream, order);
  });
}

}  // namespace

size_t RoutedExpertsWorkspaceBytes(int n, int k, int hidden, int ffn) {
  const size_t s = static_cast<size_t>(n) * k;
  return Align16(sizeof(int)) + 5 * Align16(sizeof(int) * s) + Align16(sizeof(float) * s) +
         Align16(sizeof(float) * s * ffn) + sizeof(float) * s * hidden;
}

cudaError_t LaunchRoutedExperts(const ExpertTables& tab, const float* x, int n, const int32_t* route_ids,
                                const float* route_w, int k, void* workspace, size_t workspace_bytes,
                                float* out, bool accumulate, cudaStream_t stream, GemvOrder order,
                                PackedLayout layout, const ExpertFfn& ffn) {
  SPECGEN_KERNEL_REQUIRE(n >= 1 && n <= kRoutedExpertsMaxTokens && k >= 1 && k <= kRouterMaxTopK);
  SPECGEN_KERNEL_REQUIRE(tab.experts >= k && tab.experts <= kRouterMaxExperts && tab.hidden > 0 && tab.ffn > 0);
  SPECGEN_KERNEL_REQUIRE(tab.gate && tab.up && tab.down && x && route_ids && route_w && workspace && out);
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >= RoutedExpertsWorkspaceBytes(n, k, tab.hidden, tab.ffn));
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(x) % 16 == 0);
  SPECGEN_KERNEL_REQUIRE(!IsPacked(tab.type) || IsPacked(tab.down_type));
  SPECGEN_KERNEL_REQUIRE(!IsPacked(tab.type) ||
                         (tab.hidden % BlockElems(tab.type) == 0 && tab.ffn % BlockElems(tab.down_type) == 0));
  SPECGEN_KERNEL_REQUIRE(!IsPacked(tab.bias_type));
  const Plan plan = CarvePlan(workspace, n * k, tab.ffn);
  const cudaError_t planned = LaunchDecodeKernel(PlanKernel, dim3(1), dim3(kPlanThreads), 0, stream,
                                                 ProgrammaticLaunchOnCurrentDevice(), route_ids, route_w, n, k, tab.experts,
                                                 ffn.route_scale, plan);
  if (planned != cudaSuccess) return planned;
  if (NeedsGeneralEpilogue(tab, ffn)) {
    return LaunchProducts<true>(tab, x, n, k, plan, ffn, out, accumulate, stream, order, layout);
  }
  return LaunchProducts<false>(tab, x, n, k, plan, ffn, out, accumulate, stream, order, layout);
}

}  // namespace specgen::kernels
