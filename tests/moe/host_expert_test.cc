// One routed expert on the host (moe/host/host_expert.h) against the CPU backend's routed expert
// (MatMul gate, MatMul up, SwiGlu, MatMul down: what RunRoutedExperts does per expert, and what the GPU's
// per-expert output is tested equal to), bit for bit, for packed types of gate/up and down, several
// token counts, the scalar definition and the best ISA; and the pool: bits independent of its size.
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "moe/host/host_expert.h"
#include "moe/host/host_pool.h"
#include "tests/common/random_blocks.h"

namespace specgen::moe_host {
namespace {

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;  // NaN payloads: see host_packed_rows_test
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

struct Expert {
  std::vector<uint8_t> gate, up, down;
  HostExpert view;
};

Expert MakeExpert(std::mt19937_64& rng, DType gate_up, DType down, int64_t hidden, int64_t ffn) {
  Expert e;
  e.gate = testing::RandomBlocks(rng, gate_up, ffn, hidden);
  e.up = testing::RandomBlocks(rng, gate_up, ffn, hidden);
  e.down = testing::RandomBlocks(rng, down, hidden, ffn);
  e.view = {{gate_up, e.gate.data(), ffn, hidden}, {gate_up, e.up.data(), ffn, hidden}, {down, e.down.data(), hidden, ffn}};
  return e;
}

std::vector<float> Activations(std::mt19937_64& rng, int64_t n, int64_t hidden) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * hidden));
  for (auto& v : x) v = normal(rng);
  return x;
}

TensorView View(const PackedMatrix& m) {
  TensorView t;
  t.dtype = m.type, t.ndim = 2, t.shape = {m.rows, m.cols, 0, 0};
  t.data = m.data, t.bytes = PackedRowBytes(m) * static_cast<size_t>(m.rows);
  return t;
}

// The CPU backend's per-expert output.
std::vector<float> CpuBackendExpert(CpuBackend& be, const HostExpert& e, const std::vector<float>& x, int64_t n) {
  const int64_t hidden = e.hidden(), ffn = e.ffn();
  auto gate = *be.Upload(View(e.gate), "gate");
  auto up = *be.Upload(View(e.up), "up");
  auto down = *be.Upload(View(e.down), "down");
  auto xb = *be.NewBuffer(n, hidden), g = *be.NewBuffer(n, ffn), u = *be.NewBuffer(n, ffn), y = *be.NewBuffer(n, hidden);
  EXPECT_TRUE(be.Write(x, xb.get()).ok());
  EXPECT_TRUE(be.MatMul(*xb, *gate, g.get()).ok());
  EXPECT_TRUE(be.MatMul(*xb, *up, u.get()).ok());
  EXPECT_TRUE(be.SwiGlu(*g, *u, g.get()).ok());
  EXPECT_TRUE(be.MatMul(*g, *down, y.get()).ok());
  std::vector<float> out(static_cast<size_t>(n * hidden));
  EXPECT_TRUE(be.Read(*y, out).ok());
  return out;
}

TEST(HostExpert, EqualsTheCpuBackendsRoutedExpertBitForBit) {
  std::mt19937_64 rng(4401);
  CpuBackend be(2);
  HostPool pool({.threads = 2});
  struct Types { DType gate_up, down; };
  for (Types types : {Types{DType::kQ4_K, DType::kQ6_K}, Types{DType::kQ8_0, DType::kQ8_0},
                      Types{DType::kQ5_K, DType::kQ4_0}, Types{DType::kQ6_K, DType::kQ5_K},
                      Types{DType::kQ4_0, DType::kQ4_K}, Types{DType::kMXFP4, DType::kMXFP4}}) {
    const Expert e = MakeExpert(rng, types.gate_up, types.down, 512, 256);
    for (int64_t n : {1, 2, 5, 16}) {
      const auto x = Activations(rng, n, 512);
      const auto want = CpuBackendExpert(be, e.view, x, n);
      for (Isa isa : {Isa::kScalar, BestIsa()}) {
        HostExpertRunner runner(pool, isa);
        std::vector<float> got(want.size());
        ASSERT_TRUE(runner.Run(e.view, x.data(), n, got.data()).ok());
        ExpectSameBits(got, want, std::string(Name(types.gate_up)) + "/" + std::string(Name(types.down)) +
                                      " n=" + std::to_string(n) + " " + std::string(IsaName(isa)));
      }
    }
  }
}

TEST(HostPool, BitsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(4402);
  const Expert e = MakeExpert(rng, DType::kQ4_K, DType::kQ6_K, 512, 256);
  const auto x = Activations(rng, 7, 512);
  std::vector<float> first;
  for (int threads : {1, 2, 3, 7}) {
    HostPool pool({.threads = threads});
    HostExpertRunner runner(pool, BestIsa());
    std::vector<float> got(x.size());
    ASSERT_TRUE(runner.Run(e.view, x.data(), 7, got.data()).ok());
    if (first.empty()) {
      first = got;
    } else {
      ASSERT_EQ(std::memcmp(got.data(), first.data(), got.size() * 4), 0) << threads << " threads";
    }
  }
}

TEST(HostPool, ChunksCoverEveryRowOnceOnPinnedCores) {
  const std::vector<int> cores = OneCpuPerPhysicalCore();
  ASSERT_FALSE(cores.empty());
  HostPool pool({.threads = 3});
  for (int i = 0; i < pool.threads(); ++i) {
    // Pinned to one of the physical cores' CPUs (or unpinned where the system refuses).
    EXPECT_TRUE(pool.cpu(i) == -1 || std::set<int>(cores.begin(), cores.end()).count(pool.cpu(i))) << pool.cpu(i);
  }
  for (int64_t n : {1, 2, 3, 10, 1000}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    std::vector<int> thread_of(static_cast<size_t>(n), -1);
    pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
      for (int64_t i = b; i < e; ++i) ++hits[i], thread_of[i] = t;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i], 1) << "n=" << n << " row " << i;
    for (int64_t i = 1; i < n; ++i) EXPECT_LE(thread_of[i - 1], thread_of[i]) << "chunks are contiguous, in thread order";
  }
  EXPECT_EQ(HostPool({.threads = 0}).threads(), static_cast<int>(cores.size()));
}

// A layer's host share in one call (two pool splits) gives each expert Run's bits.
TEST(HostExpert, RunManyEqualsRunPerExpert) {
  std::mt19937_64 rng(4407);
  HostPool pool({.threads = 3});
  HostExpertRunner runner(pool, BestIsa());
  std::vector<Expert> experts;
  experts.push_back(MakeExpert(rng, DType::kQ4_K, DType::kQ6_K, 512, 256));
  experts.push_back(MakeExpert(rng, DType::kQ8_0, DType::kQ8_0, 512, 256));
  experts.push_back(MakeExpert(rng, DType::kQ5_K, DType::kQ4_0, 256, 512));  // another shape
  const int64_t ns[] = {1, 4, 16};
  std::vector<std::vector<float>> xs, want, got;
  std::vector<HostExpertJob> jobs;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int64_t hidden = experts[i].view.hidden();
    xs.push_back(Activations(rng, ns[i], hidden));
    want.emplace_back(xs[i].size());
    got.emplace_back(xs[i].size());
    ASSERT_TRUE(runner.Run(experts[i].view, xs[i].data(), ns[i], want[i].data()).ok());
  }
  for (size_t i = 0; i < experts.size(); ++i) jobs.push_back({&experts[i].view, xs[i].data(), ns[i], got[i].data()});
  ASSERT_TRUE(runner.RunMany(jobs).ok());
  for (size_t i = 0; i < experts.size(); ++i) {
    ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4), 0) << "expert " << i;
  }
  jobs[1].n = 0;
  EXPECT_NE(runner.RunMany(jobs).message().find("host expert job 1: 0 tokens"), std::string::npos);
}

TEST(HostExpert, RefusesMismatchedShapes) {
  std::mt19937_64 rng(4403);
  Expert e = MakeExpert(rng, DType::kQ8_0, DType::kQ8_0, 256, 128);
  e.view.down.cols = 64;
  const auto s = CheckHostExpert(e.view);
  EXPECT_NE(s.message().find("down [256, 64]"), std::string::npos) << s.message();
  HostPool pool({.threads = 1});
  HostExpertRunner runner(pool, Isa::kScalar);
  float dummy[256];
  EXPECT_FALSE(runner.Run(e.view, dummy, 1, dummy).ok());
}

}  // namespace
}  // namespace specgen::moe_host
