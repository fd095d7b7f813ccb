// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, output = f(key, counter), so any draw can be computed anywhere without a
// stream state. Header-only and usable from CUDA (host and device) so GPU sampling kernels reproduce
// the CPU reference bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SPECGEN_HD __host__ __device__ __forceinline__
#else
#define SPECGEN_HD inline
#endif

namespace specgen {

struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};

namespace philox_internal {
constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

SPECGEN_HD void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

SPECGEN_HD PhiloxCounter Round(PhiloxCounter c, PhiloxKey k) {
  uint32_t hi0, lo0, hi1, lo1;
  MulHiLo(kM0, c.v[0], &hi0, &lo0);
  MulHiLo(kM1, c.v[2], &hi1, &lo1);
  return PhiloxCounter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}
}  // namespace philox_internal

// Ten rounds, the key bumped by the Weyl constants between rounds (Random123's philox4x32_10).
SPECGEN_HD PhiloxCounter Philox4x32x10(PhiloxCounter c, PhiloxKey k) {
  using namespace philox_internal;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k.v[0] += kW0;
      k.v[1] += kW1;
    }
    c = Round(c, k);
  }
  return c;
}

}  // namespace specgen
