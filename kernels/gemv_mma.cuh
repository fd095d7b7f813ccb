// LaunchGemvSegments in GemvOrder::kTensorCores (kernels/mma_tile.cuh). Included inside gemv.cu's
// anonymous namespace, after Segs and FindSegRow.
using detail::AddParts;
using detail::MmaParts;
using detail::MmaTilePart;
using detail::PartBlocks;

// A tile's sums (MmaTilePart's layout) through the epilogue into y: row g + 8 h of the tile, yrow[h] its
// output column, ld[h] its output's row stride.
template <int NT, GemvEpilogue kEpi, int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1>
__device__ __forceinline__ void MmaStoreTile(const float (&sum)[kPer][NT][4], float* const (&yrow)[2],
                                             const int (&ld)[2], int tile, int n, int total_rows) {
  const int g = (threadIdx.x & 31) >> 2;
  detail::ForEachTileSum<NT>([&](int t, int h, int j, int i) {
    if (t >= n || tile * 16 + g + 8 * h >= total_rows) return;
    float* y = yrow[h] + static_cast<int64_t>(t) * ld[h];
    const float d0 = sum[0][j][i];
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      const float d1 = sum[kPer - 1][j][i];
      *y = portable::SiluMul(d0, d1);
    } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
      *y = *y + d0;
    } else {
      *y = d0;
    }
  });
}

// grid: tiles of 16 output rows, P warps each, W / P tiles a block.
// kXs: x split once into shared memory (n * in * 4 bytes of dynamic shared memory) after the wait.
template <int NT, GemvEpilogue kEpi, int U, int P, int W, bool kXs>
__global__ void __launch_bounds__(W * 32) MmaGemvKernel(Segs s, const float* __restrict__ x, int in, int n) {
  constexpr int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int tile = blockIdx.x * (W / P) + warp / P;
  const bool live = tile * 16 < s.total_rows;
  const uint16_t* wrow[2 * kPer];
  float* yrow[2];
  int ld[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const SegRow sr = FindSegRow(s, min(tile * 16 + g + 8 * h, s.total_rows - 1));  // clamp: discarded below
    yrow[h] = sr.y;
    ld[h] = sr.ld;
    wrow[h * kPer] = sr.w + static_cast<int64_t>(sr.row) * in;
    if constexpr (kPer == 2) wrow[h * kPer + 1] = s.w[1] + static_cast<int64_t>(sr.row) * in;
  }
  int b0, b1;
  PartBlocks(in, P, warp % P, &b0, &b1);
  LetDependentsLaunch();
  float sum[kPer][NT][4];
  if constexpr (kXs) {
    extern __shared__ uint4 xs[];
    const int chunks = in / 8;
    MmaTilePart<NT, kPer, U>(
        wrow, live, b0, b1, n,
        [&](int t, int k, uint32_t (&h)[4], uint32_t (&l)[4]) {
          const uint4 a = xs[2 * (t * chunks + k / 8)], c = xs[2 * (t * chunks + k / 8) + 1];
          h[0] = a.x; h[1] = a.y; h[2] = a.z; h[3] = a.w;
          l[0] = c.x; l[1] = c.y; l[2] = c.z; l[3] = c.w;
        },
        [&] {
          WaitForPrecedingGrid();
          detail::StageSplitX(x, in, n, 0, in, xs);
        },
        sum);
  } else {
    MmaTilePart<NT, kPer, U>(
        wrow, live, b0, b1, n, detail::XFromRows([&](int t) { return x + static_cast<int64_t>(t) * in; }),
        [] { WaitForPrecedingGrid(); }, sum);
  }
  if (!AddParts<W, P, kPer * NT * 4>(&sum[0][0][0]) || !live) return;
  MmaStoreTile<NT, kEpi>(sum, yrow, ld, tile, n, s.total_rows);
}

// One launch of the parts P: blocks of max(P, 8) warps. x is split once a block into shared memory
// where it fits (n * in * 4 bytes <= 32 KB, beside AddParts' static 8 KB), else in registers; both
// give the same bits. 2 blocks of 32 inputs an iteration, loaded one iteration ahead (64-69
// registers for one matrix): 4 blocks an iteration with x in registers cost more registers than the
// extra loads in flight win back (docs/experiments.md).
template <int NT, GemvEpilogue kEpi, int P>
cudaError_t LaunchMmaP(const Segs& s, const float* x, int in, int n, cudaStream_t stream) {
  constexpr int U = 2, W = P > 8 ? P : 8;
  const int tiles = (s.total_rows + 15) / 16;
  const unsigned grid = static_cast<unsigned>((tiles + W / P - 1) / (W / P));
  const size_t xs_bytes = static_cast<size_t>(n) * in * 4;
  if (NT == 1 && xs_bytes <= 32 * 1024) {
    return LaunchDecodeKernel(MmaGemvKernel<NT, kEpi, U, P, W, true>, dim3(grid), dim3(W * 32), xs_bytes, stream,
                              ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
  }
  return LaunchDecodeKernel(MmaGemvKernel<NT, kEpi, U, P, W, false>, dim3(grid), dim3(W * 32), 0, stream,
                            ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

template <int NT, GemvEpilogue kEpi>
cudaError_t LaunchMmaNT(const Segs& s, const float* x, int in, int n, cudaStream_t stream, int parts) {
  switch (parts) {
    case 1: return LaunchMmaP<NT, kEpi, 1>(s, x, in, n, stream);
    case 2: return LaunchMmaP<NT, kEpi, 2>(s, x, in, n, stream);
    case 4: return LaunchMmaP<NT, kEpi, 4>(s, x, in, n, stream);
    case 8: return LaunchMmaP<NT, kEpi, 8>(s, x, in, n, stream);
    default: return LaunchMmaP<NT, kEpi, 16>(s, x, in, n, stream);
  }
}

// Each matrix's rows are reduced with its own shape's parts (MmaParts), as LaunchGemv on it alone
// would: segments whose parts differ (e.g. a q of many more rows than k and v) go in separate launches.
template <GemvEpilogue kEpi>
cudaError_t LaunchMma(const Segs& s, const float* x, int in, int n, cudaStream_t stream) {
  const int parts = MmaParts(s.rows[0], in);
  bool same = true;
  for (int i = 1; i < s.n; ++i) same = same && MmaParts(s.rows[i], in) == parts;
  if constexpr (kEpi == GemvEpilogue::kSwiGlu) same = true;  // gate and up have the same rows
  if (same) {
    return n <= 8 ? LaunchMmaNT<1, kEpi>(s, x, in, n, stream, parts)
                  : LaunchMmaNT<2, kEpi>(s, x, in, n, stream, parts);
  }
  for (int i = 0; i < s.n; ++i) {
    Segs one{};
    one.w[0] = s.w[i];
    one.y[0] = s.y[i];
    one.rows[0] = s.rows[i];
    one.n = 1;
    one.total_rows = s.rows[i];
    const cudaError_t e = LaunchMma<kEpi>(one, x, in, n, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
