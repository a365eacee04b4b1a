// A configuration of policy.hpp -> its kernel type and host launcher (device code: included only
// by the translation units generated from configs.def). Each weight format maps the named
// policies onto its kernel template (kernel.cuh, w4a8.cuh, w4a8_rs.cuh) in one place.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include <type_traits>

#include "kernels/moe/kernel.cuh"
#include "kernels/moe/launch.hpp"
#include "kernels/moe/policy.hpp"
#include "kernels/moe/study.hpp"
#include "kernels/moe/w4a8.cuh"
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

template <class Epilogue>
inline constexpr bool kIsSwiGlu = std::is_same_v<Epilogue, SwiGluFp8>;

template <class Epilogue>
struct LocalEpilogueOf;
template <>
struct LocalEpilogueOf<Bf16Rows> {
  template <class Traits>
  using type = LocalBf16Epilogue<Traits>;
};
template <>
struct LocalEpilogueOf<SwiGluFp8> {
  template <class Traits>
  using type = LocalSwiGluEpilogue<Traits>;
};

template <class Config>
struct KernelOf;

// W8A8: the fp8 grouped GEMM (kernel.cuh), any tile and cluster.
template <class Tile, class Cluster, class Epilogue>
struct KernelOf<MoeConfig<Fp8Blocks, ActPer128, Tile, Cluster, Epilogue>> {
  static constexpr TileConfig kTile{Tile::block_m, Tile::block_n, 128,       Tile::stages,
                                    Tile::warpgroups, Cluster::m,   Cluster::n};
  using Kernel = ShippedKernel<kTile, kIsSwiGlu<Epilogue>, LocalEpilogueOf<Epilogue>::template type>;
  static cudaError_t launch(MoeW4A8Params const& p, cudaStream_t stream) { return launch_moe_gemm<Kernel>(p, stream); }
  static KernelInfo info(W4Format) { return Kernel::info(); }
};

// W4A8 rows: one kernel per 4-bit format (INT4: decoupled conversion, MXFP4: lock-step), the
// format chosen at launch.
template <class Tile, class Epilogue>
struct KernelOf<MoeConfig<W4Rows, ActPer128, Tile, Cluster<1, 1>, Epilogue>> {
  template <bool kDecoupled>
  using Kernel = MoeW4A8Kernel<W4Traits<Tile::block_m, Tile::block_n, kIsSwiGlu<Epilogue>, kDecoupled>,
                               LocalEpilogueOf<Epilogue>::template type>;
  static cudaError_t launch(MoeW4A8Params const& p, cudaStream_t stream) {
    return p.format == W4Format::mxfp4 ? launch_moe_w4a8<Kernel<false>>(p, stream)
                                       : launch_moe_w4a8<Kernel<true>>(p, stream);
  }
  static KernelInfo info(W4Format f) { return f == W4Format::mxfp4 ? Kernel<false>::info() : Kernel<true>::info(); }
};

// Register-operand W4A8 (w4a8_rs.cuh): INT4 two-level or MXFP4; a tile of block_m tokens is
// block_m / 128 pieces (SwiGLU: / 64) that share each converted weight fragment.
template <class Format, class Act, class Tile, class Cluster, class Epilogue>
  requires(std::is_same_v<Format, Int4Lut> || std::is_same_v<Format, Mxfp4Rs>)
struct KernelOf<MoeConfig<Format, Act, Tile, Cluster, Epilogue>> {
  static constexpr bool kGateUp = kIsSwiGlu<Epilogue>;
  static constexpr bool kGlu = std::is_same_v<Epilogue, SwiGluFp8Interleaved>;
  static constexpr bool kTok = std::is_same_v<Act, ActPerToken>;
  static constexpr int kPieces = Tile::block_m / (kGateUp ? 64 : 128);
  static_assert(Tile::block_n == (kGateUp ? 256 : 128), "register-operand tiles: 128 weight rows (SwiGLU: gate + up)");
  static_assert(Tile::warpgroups == 2, "register-operand tiles: two consumer warp groups");
  static_assert(kGlu == (Cluster::m == 1 && Cluster::n == 2) && (kGlu || (Cluster::m == 1 && Cluster::n == 1)),
                "the interleaved SwiGLU tile runs in 1 x 2 clusters, the others alone");
  template <int kStudy>
  using Traits = W4RsTraits<Tile::stages, kGateUp, kStudy, std::is_same_v<Format, Mxfp4Rs>, kPieces,
                            std::is_same_v<Format, Int4Lut>, kTok, kGlu,
                            kTok && std::is_same_v<Epilogue, Bf16Rows>>;
  using Kernel = MoeW4A8RsKernel<Traits<0>>;
  static cudaError_t launch(MoeW4A8Params const& p, cudaStream_t stream) {
#ifdef XSTAGE_MOE_STUDY
    // Measurement build: XSTAGE_W4RS_STUDY = 1 (no conversion), 2 (no token scales), 4 (no
    // promotion) or 5 (neither) runs a variant of the INT4 two-level 256-token bf16 tile with
    // parts left out (W4RsTraits::kStudy, wrong results); 0 the shipped kernel, anything else an
    // error.
    if constexpr (std::is_same_v<Format, Int4Lut> && !kTok && !kGateUp && kPieces == 2)
      if (const char* e = std::getenv("XSTAGE_W4RS_STUDY"); e != nullptr) switch (std::atoi(e)) {
          case 1: return launch_moe_w4a8_rs<MoeW4A8RsKernel<Traits<1>>>(p, stream);
          case 2: return launch_moe_w4a8_rs<MoeW4A8RsKernel<Traits<2>>>(p, stream);
          case 4: return launch_moe_w4a8_rs<MoeW4A8RsKernel<Traits<4>>>(p, stream);
          case 5: return launch_moe_w4a8_rs<MoeW4A8RsKernel<Traits<5>>>(p, stream);
          case 0: break;
          default:  // an unknown variant must not time the shipped kernel under its name
            std::fprintf(stderr, "XSTAGE_W4RS_STUDY=%s: this kernel has variants 0, 1, 2, 4, 5\n", e);
            return cudaErrorInvalidValue;
        }
#endif
    return launch_moe_w4a8_rs<Kernel>(p, stream);
  }
  static KernelInfo info(W4Format) { return Kernel::info(); }
};

}  // namespace xstage::kernels::moe

// One configs.def line -> the launcher and kernel description of launch.hpp.
#define XSTAGE_MOE_CONFIG(name, rate, min_tokens, max_tokens, ...)                          \
  cudaError_t moe_launch_##name(MoeW4A8Params const& p, cudaStream_t stream) {             \
    return KernelOf<__VA_ARGS__>::launch(p, stream);                                       \
  }                                                                                        \
  KernelInfo moe_info_##name(W4Format f) { return KernelOf<__VA_ARGS__>::info(f); }
