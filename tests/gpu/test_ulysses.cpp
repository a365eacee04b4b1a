// Ulysses attention on 2 GPUs against full attention on one GPU followed by an explicit
// All-to-All: every rank computes the fp32 reference of the whole [B, S, H, D] problem and
// keeps rows [rank*S/P, (rank+1)*S/P) - exactly what the post-attention All-to-All hands that
// rank. Every variant, awkward shapes (S/P not a multiple of the tile, one head per rank,
// batch > 1, both head dims), outputs poisoned with NaN before every call; then the timeout
// path: a rank that never delivers gives the other a clear error, not a hang.
#ifdef XSTAGE_HAVE_ULYSSES
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/attention_reference.hpp"
#include "gpu/gpu_env.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/ops/ulysses.hpp"
#include "xstage/team.hpp"

using namespace xstage;
using ops::AttentionDType;
using ops::AttentionTilePolicy;
using ops::UlyssesVariant;

namespace {

#define XS_T(call)                                                                        \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) throw Error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

model::Params preset() { return model::load_params(std::string(XSTAGE_SOURCE_DIR) + "/presets/h200-nvlink.json"); }

struct Case {
  int batch, seq, heads, d;
  int chunk_vecs = 0;  // fused-shaped: forced stores per thread per chunk (0: the model's plan)
  AttentionTilePolicy tile = AttentionTilePolicy::staged;  // long_kv: fused-shaped is not run
};

// Per-rank device buffers of one case.
struct RankData {
  void *q = nullptr, *k = nullptr, *v = nullptr;  // [B, S, H/P, D]
  float* ref = nullptr;                           // [B, S, H, D] fp32 reference of the full problem
  ~RankData() {
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(ref);
  }
};

float bf16_to_float(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

void run_case(Team& team, const Case& c, uint64_t seed) {
  const int P = team.world_size();
  const int hl = c.heads / P, sp = c.seq / P;
  ops::UlyssesConfig cfg;
  cfg.batch = c.batch;
  cfg.seq_len = c.seq;
  cfg.heads = c.heads;
  cfg.head_dim = c.d;
  ops::UlyssesOptions opts;
  opts.model = preset();
  opts.chunk_vecs = c.chunk_vecs;
  opts.tile = c.tile;
  ops::UlyssesAttention op(team, cfg, opts);
  std::vector<RankData> data(team.local_count());
  const size_t full = size_t(c.batch) * c.seq * c.heads * c.d;
  team.run([&](int i) {
    cudaStream_t s = team.stream(i);
    RankData& R = data[i];
    // The full problem, identical on every GPU (same seeds), then this rank's heads.
    void *fq, *fk, *fv;
    XS_T(cudaMalloc(&fq, full * 2));
    XS_T(cudaMalloc(&fk, full * 2));
    XS_T(cudaMalloc(&fv, full * 2));
    gputest::fill_random_16bit(fq, full, AttentionDType::bf16, seed, 1.f, s);
    gputest::fill_random_16bit(fk, full, AttentionDType::bf16, seed + 1, 1.f, s);
    gputest::fill_random_16bit(fv, full, AttentionDType::bf16, seed + 2, 1.f, s);
    ops::AttentionArgs a;
    a.dtype = AttentionDType::bf16;
    a.batch = c.batch;
    a.heads = c.heads;
    a.q_len = a.kv_len = c.seq;
    a.head_dim = c.d;
    a.q = fq;
    a.k = fk;
    a.v = fv;
    a.q_strides = a.k_strides = a.v_strides = a.o_strides = ops::packed_bshd(c.seq, c.heads, c.d);
    XS_T(cudaMalloc(&R.ref, full * sizeof(float)));
    float* lse = nullptr;  // the reference writes it; not checked here
    XS_T(cudaMalloc(&lse, sizeof(float) * c.batch * c.heads * c.seq));
    gputest::reference_attention(a, R.ref, lse, s);
    const size_t mine = full / P;
    XS_T(cudaMalloc(&R.q, mine * 2));
    XS_T(cudaMalloc(&R.k, mine * 2));
    XS_T(cudaMalloc(&R.v, mine * 2));
    const size_t row = size_t(hl) * c.d * 2, pitch = size_t(c.heads) * c.d * 2, off = size_t(team.rank(i)) * row;
    const size_t rows = size_t(c.batch) * c.seq;
    XS_T(cudaMemcpy2DAsync(R.q, row, static_cast<char*>(fq) + off, pitch, row, rows, cudaMemcpyDeviceToDevice, s));
    XS_T(cudaMemcpy2DAsync(R.k, row, static_cast<char*>(fk) + off, pitch, row, rows, cudaMemcpyDeviceToDevice, s));
    XS_T(cudaMemcpy2DAsync(R.v, row, static_cast<char*>(fv) + off, pitch, row, rows, cudaMemcpyDeviceToDevice, s));
    XS_T(cudaStreamSynchronize(s));
    cudaFree(lse);
    cudaFree(fq);
    cudaFree(fk);
    cudaFree(fv);
  });
  for (auto v : {UlyssesVariant::serial, UlyssesVariant::fused, UlyssesVariant::fused_shaped, UlyssesVariant::comm_sm}) {
    if (v == UlyssesVariant::fused_shaped && c.tile == AttentionTilePolicy::long_kv) {
      EXPECT_THROW(op.forward(0, data[0].q, data[0].k, data[0].v, v, team.stream(0)), InvalidArgument);
      continue;
    }
    // Twice: the second call checks that epochs, counters and ready flags carry over.
    for (int rep = 0; rep < 2; ++rep) {
      std::vector<double> rel(team.local_count(), -1);
      std::vector<unsigned long long> bad(team.local_count(), 0);
      team.run([&](int i) {
        cudaStream_t s = team.stream(i);
        XS_T(cudaMemsetAsync(op.output(i), 0xFF, op.output_bytes(), s));  // NaN poison
        team.synchronize(i, "poisoning the output");
      });
      team.run([&](int i) {
        cudaStream_t s = team.stream(i);
        op.forward(i, data[i].q, data[i].k, data[i].v, v, s);
        team.synchronize(i, "the Ulysses call");
        team.check_device_status(i);
        std::vector<uint16_t> out(op.output_bytes() / 2);
        XS_T(cudaMemcpy(out.data(), op.output(i), op.output_bytes(), cudaMemcpyDeviceToHost));
        std::vector<float> ref(full);
        XS_T(cudaMemcpy(ref.data(), data[i].ref, full * sizeof(float), cudaMemcpyDeviceToHost));
        double err = 0, norm = 0;
        const int r = team.rank(i);
        for (int b = 0; b < c.batch; ++b)
          for (int srow = 0; srow < sp; ++srow)
            for (int h = 0; h < c.heads; ++h)
              for (int d = 0; d < c.d; ++d) {
                const float o = bf16_to_float(out[((size_t(b) * sp + srow) * c.heads + h) * c.d + d]);
                const float x = ref[((size_t(b) * c.seq + r * sp + srow) * c.heads + h) * c.d + d];
                if (!std::isfinite(o)) {
                  ++bad[i];
                  continue;
                }
                err += double(o - x) * (o - x);
                norm += double(x) * x;
              }
        rel[i] = std::sqrt(err / std::max(norm, 1e-30));
      });
      for (int i = 0; i < team.local_count(); ++i) {
        SCOPED_TRACE(::testing::Message() << ops::variant_name(v) << " rep " << rep << " rank " << team.rank(i)
                                          << " B" << c.batch << " S" << c.seq << " H" << c.heads << " D" << c.d
                                          << (c.tile == AttentionTilePolicy::long_kv ? " long_kv" : ""));
        EXPECT_EQ(bad[i], 0u) << "non-finite (unwritten or NaN) output elements";
        EXPECT_GE(rel[i], 0.0);
        EXPECT_LT(rel[i], 1e-2);
      }
    }
  }
}

}  // namespace

// P ranks (real GPUs or virtual ranks of one GPU). Shapes scale with P: rows per rank that are
// not a multiple of the 128/192-row tiles (a tile straddles two shards), 1 and 3 heads per rank.
class UlyssesRanks : public ::testing::TestWithParam<int> {};

TEST_P(UlyssesRanks, AllVariantsMatchFullAttentionThenAllToAll_D128) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  run_case(*team, {1, P * 512, P * 1, 128}, 11);  // tiles align with shards; one head per rank
  run_case(*team, {1, P * 585, P * 3, 128}, 12);  // 585 rows per rank: tiles straddle shards; 3 heads per rank
  run_case(*team, {2, P * 300, P * 2, 128}, 13);  // batch 2
}

TEST_P(UlyssesRanks, AllVariantsMatchFullAttentionThenAllToAll_D64) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  run_case(*team, {1, P * 385, P * 3, 64}, 21);  // 192-row tiles, empty last slices, 3 heads per rank
  run_case(*team, {2, P * 256, P * 1, 64}, 22);  // batch 2, one head per rank
}

// The long-key tile (128 x 192, O from registers to each row's owner, docs/ulysses.md "Long-key
// tile") for serial, fused and comm-sm; fused-shaped is refused. Key counts not a multiple of
// 192, tiles straddling shards, batch 2.
TEST_P(UlyssesRanks, LongKeyTileMatchesFullAttentionThenAllToAll) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  const auto lk = AttentionTilePolicy::long_kv;
  run_case(*team, {1, P * 512, P * 1, 128, 0, lk}, 41);  // tiles align with shards; one head per rank
  run_case(*team, {1, P * 585, P * 3, 128, 0, lk}, 42);  // tiles straddle shards; 3 heads per rank
  run_case(*team, {2, P * 300, P * 2, 128, 0, lk}, 43);  // batch 2
}

TEST(Ulysses, TheLongKeyTileIsD128Only) {
  XS_TEAM(team, 2, 2.0);
  ops::UlyssesConfig cfg;
  cfg.seq_len = 512;
  cfg.heads = 2;
  cfg.head_dim = 64;
  ops::UlyssesOptions opts;
  opts.model = preset();
  opts.tile = AttentionTilePolicy::long_kv;
  EXPECT_THROW(ops::UlyssesAttention(*team, cfg, opts), InvalidArgument);
  opts.tile = AttentionTilePolicy::rows128;
  EXPECT_THROW(ops::UlyssesAttention(*team, cfg, opts), InvalidArgument);
}

// The model's plan is one chunk per slice for these shapes; forcing small chunks exercises
// the multi-chunk schedule: chunks at successive key blocks, and (few key blocks for many
// chunks of one store each) the last hook call sending whatever is left.
TEST_P(UlyssesRanks, FusedShapedWithForcedChunksMatches) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  run_case(*team, {1, P * 150, P * 2, 128, 1}, 31);  // more chunks than hook calls
  run_case(*team, {1, P * 585, P * 1, 128, 3}, 32);  // 3 + 3 + 2 stores; tiles straddle shards
  run_case(*team, {1, P * 385, P * 3, 64, 1}, 33);   // d = 64: 4 chunks, empty last slices
}

namespace {

struct Inputs {
  void *q = nullptr, *k = nullptr, *v = nullptr;
  explicit Inputs(size_t bytes) {
    if (cudaMalloc(&q, bytes) != cudaSuccess || cudaMalloc(&k, bytes) != cudaSuccess ||
        cudaMalloc(&v, bytes) != cudaSuccess)
      throw Error("allocating test inputs");
    gputest::fill_random_16bit(q, bytes / 2, AttentionDType::bf16, 5, 1.f, nullptr);
    gputest::fill_random_16bit(k, bytes / 2, AttentionDType::bf16, 6, 1.f, nullptr);
    gputest::fill_random_16bit(v, bytes / 2, AttentionDType::bf16, 7, 1.f, nullptr);
    cudaDeviceSynchronize();
  }
  ~Inputs() {
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
  }
};

std::unique_ptr<ops::UlyssesAttention> make_op(Team& team, int seq, int heads) {
  ops::UlyssesConfig cfg;
  cfg.seq_len = seq;
  cfg.heads = heads;
  ops::UlyssesOptions opts;
  opts.model = preset();
  return std::make_unique<ops::UlyssesAttention>(team, cfg, opts);
}

}  // namespace

// Only rank 0 calls: its wait for the other ranks' rows ends in a clear error, not a hang.
TEST_P(UlyssesRanks, RankThatNeverDeliversTimesOutOnTheOthers) {
  const int P = GetParam();
  XS_TEAM(team, P, 0.5);
  auto op = make_op(*team, P * 256, P * 2);
  XS_T(cudaSetDevice(team->device(0)));
  Inputs in(op->input_elems() * 2);
  // The plan is made first (it times the attention), so the clock below sees only the wait.
  op->plan(0, in.q, in.k, in.v, team->stream(0));
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    op->forward(0, in.q, in.k, in.v, UlyssesVariant::fused, team->stream(0));  // the others never call
    team->synchronize(0, "the Ulysses call");
    team->check_device_status(0);
  } catch (const Error& e) {
    msg = e.what();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(msg.find("timed out"), std::string::npos) << "got: '" << msg << "'";
  EXPECT_NE(msg.find("Ulysses"), std::string::npos) << msg;
  EXPECT_LT(secs, 5.0);
}

// The last rank calls an operator of another shape (its own counters and epochs): every
// rank, the odd one included, ends its call with a clear timeout error within the bound.
TEST_P(UlyssesRanks, ARankCallingWithAnotherShapeEndsEveryCallWithAnError) {
  const int P = GetParam();
  XS_TEAM(team, P, 0.5);
  auto op = make_op(*team, P * 256, P * 2);
  auto other = make_op(*team, P * 128, P * 1);
  std::vector<std::unique_ptr<Inputs>> in(team->local_count());
  team->run([&](int i) {
    const bool odd = team->rank(i) == P - 1;
    in[i] = std::make_unique<Inputs>((odd ? other : op)->input_elems() * 2);
    (odd ? other : op)->plan(i, in[i]->q, in[i]->k, in[i]->v, team->stream(i));
  });
  std::vector<std::string> err(team->local_count());
  const auto t0 = std::chrono::steady_clock::now();
  team->run([&](int i) {
    const bool odd = team->rank(i) == P - 1;
    try {
      (odd ? other : op)->forward(i, in[i]->q, in[i]->k, in[i]->v, UlyssesVariant::fused, team->stream(i));
      team->synchronize(i, "the Ulysses call");
      team->check_device_status(i);
    } catch (const Error& e) {
      err[i] = e.what();
    }
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < team->local_count(); ++i)
    EXPECT_NE(err[i].find("timed out"), std::string::npos) << "rank " << i << ": '" << err[i] << "'";
  EXPECT_LT(secs, 10.0);
}

INSTANTIATE_TEST_SUITE_P(P, UlyssesRanks, ::testing::Values(2, 4, 8));

TEST(Ulysses, HeadsOrSequenceNotDividingTheRanksAreClearErrors) {
  auto cfg = [](int seq, int heads) {
    ops::UlyssesConfig c;
    c.seq_len = seq;
    c.heads = heads;
    return c;
  };
  EXPECT_THROW(ops::validate_ulysses(cfg(1024, 12), 8), InvalidArgument);  // 12 heads over 8 ranks
  EXPECT_THROW(ops::validate_ulysses(cfg(1020, 16), 8), InvalidArgument);  // 1020 rows over 8 ranks
  EXPECT_THROW(ops::validate_ulysses(cfg(1024, 16), 9), InvalidArgument);  // above 8 ranks
  EXPECT_NO_THROW(ops::validate_ulysses(cfg(1024, 16), 8));
}

#endif  // XSTAGE_HAVE_ULYSSES
