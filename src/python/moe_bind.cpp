// xstage.moe over the MoE grouped GEMM (include/xstage/ops/moe_gemm.hpp) and its host weight
// formats (moe_quant.hpp, moe_quant4.hpp).
//
//   moe_prepack      host: fp32 weights [E, n, k] -> the kernel's B and b_scales in one of the
//                    shipped formats (a one-time step when weights are loaded), optionally the
//                    dequantised weights the kernel computes with (a reference for tests).
//   moe_gemm         device: one grouped GEMM launch on raw pointers and a stream handle (only
//                    when the extension is built with the kernels: has_moe).
// Arrays the extension creates come back as nanobind ndarrays (DLPack producers: torch.from_dlpack
// or numpy.from_dlpack take them without a copy).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "python/bind.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

#if XSTAGE_PY_HAVE_MOE
#include <cuda_runtime.h>

#include "xstage/ops/moe_gemm.hpp"
#endif

namespace nb = nanobind;

namespace xstage::python {
namespace {

// A host array owned by a capsule, handed to Python as a DLPack producer.
template <class T>
nb::ndarray<> owned(std::vector<T>&& data, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(data));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<>(heap->data(), shape.size(), shape.begin(), owner, nullptr, nb::dtype<T>());
}

using HostF32 = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// The shipped weight formats, by name (docs/python.md):
//   w8a8            fp8 e4m3 rows [E, n, k], fp32 128 x 128 block scales [E, n/128, k/128]
//   int4_lut        INT4 two-level scales, register-operand layout (int4_rs_lut), fp32 channel
//                   scales [E, n]
//   int4_lut_glu    the same on gate/up-interleaved rows (Linear-1 SwiGLU, per-token activations)
//   mxfp4           MXFP4, register-operand layout (mxfp4_rs), fp32 block scales [E, k/128, n]
//   mxfp4_glu       the same on gate/up-interleaved rows
// w4a8_int4 / w4a8_mxfp4: the row layout of the expert-parallel layers' W4A8 weights (packed 4-bit
// [E, n, k/2]; INT4 fp32 group scales [E, k/128, n] or MXFP4 E8M0 exponents [E, k/32, n]).
enum class Format { w8a8, int4_lut, int4_lut_glu, mxfp4, mxfp4_glu, w4a8_int4, w4a8_mxfp4 };

Format format_from(const std::string& s) {
  if (s == "w8a8") return Format::w8a8;
  if (s == "w4a8_int4") return Format::w4a8_int4;
  if (s == "w4a8_mxfp4") return Format::w4a8_mxfp4;
  if (s == "int4_lut") return Format::int4_lut;
  if (s == "int4_lut_glu") return Format::int4_lut_glu;
  if (s == "mxfp4") return Format::mxfp4;
  if (s == "mxfp4_glu") return Format::mxfp4_glu;
  throw InvalidArgument("moe prepack: unknown weight format '" + s +
                        "' (w8a8, int4_lut, int4_lut_glu, mxfp4, mxfp4_glu, w4a8_int4, w4a8_mxfp4)");
}

// (B bytes, b_scales, zeroed MXFP4 sub-blocks, reference or an empty array)
std::tuple<nb::ndarray<>, nb::ndarray<>, long long, nb::ndarray<>> prepack(const std::string& format,
                                                                            const HostF32& w, bool reference) {
  const Format f = format_from(format);
  const size_t experts = w.shape(0), n = w.shape(1), k = w.shape(2);
  if (experts == 0 || n == 0 || k == 0) throw InvalidArgument("moe prepack: weights must be non-empty [E, n, k]");
  if (n % 128 != 0 || k % 128 != 0)
    throw InvalidArgument("moe prepack: n = " + std::to_string(n) + " and k = " + std::to_string(k) +
                          " must be multiples of 128");
  const bool glu = f == Format::int4_lut_glu || f == Format::mxfp4_glu;
  if (glu && n % 256 != 0)
    throw InvalidArgument("moe prepack: gate/up-interleaved weights need n = 2 x intermediate a multiple of 256, got " +
                          std::to_string(n));
  const int rows = static_cast<int>(n), cols = static_cast<int>(k);
  const float* src = w.data();
  const size_t per = n * k;
  std::vector<float> ref(reference ? experts * per : 0);
  long long zeroed = 0;
  if (f == Format::w8a8) {
    const size_t sblocks = (n / 128) * (k / 128);
    std::vector<uint8_t> b(experts * per);
    std::vector<float> s(experts * sblocks);
    for (size_t e = 0; e < experts; ++e) {
      ops::quantize_blocks_128x128(src + e * per, rows, cols, b.data() + e * per, s.data() + e * sblocks);
      if (reference)
        for (size_t r = 0; r < n; ++r)
          for (size_t c = 0; c < k; ++c)
            ref[e * per + r * k + c] = ops::fp8_e4m3_decode(b[e * per + r * k + c]) *
                                       s[e * sblocks + (r / 128) * (k / 128) + c / 128];
    }
    return {owned(std::move(b), {experts, n, k}), owned(std::move(s), {experts, n / 128, k / 128}), 0,
            owned(std::move(ref), {reference ? experts : 0, n, k})};
  }
  if (f == Format::w4a8_int4 || f == Format::w4a8_mxfp4) {
    // Row layout: what ops::moe_layer_reference quantises, and its dequantisation as the reference.
    const bool mx = f == Format::w4a8_mxfp4;
    const size_t groups = k / (mx ? ops::kMxfp4Block : ops::kInt4Group);
    std::vector<uint8_t> b(experts * per / 2);
    std::vector<float> s(mx ? 0 : experts * groups * n);
    std::vector<uint8_t> e8(mx ? experts * groups * n : 0);
    for (size_t e = 0; e < experts; ++e) {
      uint8_t* pk = b.data() + e * per / 2;
      if (mx) {
        ops::quantize_mxfp4(src + e * per, rows, cols, pk, e8.data() + e * groups * n);
        if (reference) ops::dequantize_mxfp4_w4a8(pk, e8.data() + e * groups * n, rows, cols, ref.data() + e * per);
      } else {
        ops::quantize_int4_g128(src + e * per, rows, cols, pk, s.data() + e * groups * n);
        if (reference) ops::dequantize_int4_g128(pk, s.data() + e * groups * n, rows, cols, ref.data() + e * per);
      }
    }
    nb::ndarray<> scales = mx ? owned(std::move(e8), {experts, groups, n}) : owned(std::move(s), {experts, groups, n});
    return {owned(std::move(b), {experts, n, k / 2}), scales, 0, owned(std::move(ref), {reference ? experts : 0, n, k})};
  }
  if (f == Format::int4_lut || f == Format::int4_lut_glu) {
    const size_t chunk = static_cast<size_t>(ops::prepacked_int4_lut_rs_bytes(rows, cols));
    std::vector<uint8_t> b(experts * chunk), packed(per / 2), groups((k / 128) * n);
    std::vector<float> s(experts * n), channel(n);
    for (size_t e = 0; e < experts; ++e) {
      ops::quantize_int4_lut(src + e * per, rows, cols, packed.data(), groups.data(), channel.data());
      if (glu)
        ops::prepack_int4_lut_rs_glu(packed.data(), groups.data(), channel.data(), rows, cols, b.data() + e * chunk,
                                     s.data() + e * n);
      else {
        ops::prepack_int4_lut_rs(packed.data(), groups.data(), rows, cols, b.data() + e * chunk);
        std::memcpy(s.data() + e * n, channel.data(), n * sizeof(float));
      }
      if (reference) ops::dequantize_int4_lut(packed.data(), groups.data(), channel.data(), rows, cols, ref.data() + e * per);
    }
    return {owned(std::move(b), {experts, chunk}), owned(std::move(s), {experts, n}), 0,
            owned(std::move(ref), {reference ? experts : 0, n, k})};
  }
  // MXFP4
  const size_t chunk = static_cast<size_t>(ops::prepacked_mxfp4_rs_bytes(rows, cols));
  const size_t sper = (k / 128) * n;
  std::vector<uint8_t> b(experts * chunk), packed(per / 2), e8m0((k / 32) * n);
  std::vector<float> s(experts * sper);
  for (size_t e = 0; e < experts; ++e) {
    ops::quantize_mxfp4(src + e * per, rows, cols, packed.data(), e8m0.data());
    if (glu)
      zeroed += ops::prepack_mxfp4_rs_glu(packed.data(), e8m0.data(), rows, cols, b.data() + e * chunk,
                                          s.data() + e * sper);
    else
      zeroed += ops::prepack_mxfp4_rs(packed.data(), e8m0.data(), rows, cols, b.data() + e * chunk, s.data() + e * sper);
    if (reference)
      ops::dequantize_mxfp4_w4a8(packed.data(), e8m0.data(), rows, cols, ref.data() + e * per,
                                 ops::kMxfp4RsMaxExponentGap);
  }
  return {owned(std::move(b), {experts, chunk}), owned(std::move(s), {experts, k / 128, n}), zeroed,
          owned(std::move(ref), {reference ? experts : 0, n, k})};
}

using HostF32x2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

// Host activation quantisation (the reference arithmetic; the package quantises on the GPU in
// torch). granularity "per_128": scales [k/128, m]; "per_token": scales [m].
std::tuple<nb::ndarray<>, nb::ndarray<>> quantize_act(const HostF32x2& x, const std::string& granularity) {
  const size_t m = x.shape(0), k = x.shape(1);
  if (k % 128 != 0) throw InvalidArgument("moe quantize: k = " + std::to_string(k) + " must be a multiple of 128");
  std::vector<uint8_t> q(m * k);
  if (granularity == "per_128") {
    std::vector<float> s((k / 128) * m);
    ops::quantize_per_token_128(x.data(), static_cast<int>(m), static_cast<int>(k), q.data(), s.data());
    return {owned(std::move(q), {m, k}), owned(std::move(s), {k / 128, m})};
  }
  if (granularity == "per_token") {
    std::vector<float> s(m);
    ops::quantize_fp8_per_token(x.data(), static_cast<int>(m), static_cast<int>(k), q.data(), s.data());
    return {owned(std::move(q), {m, k}), owned(std::move(s), {m})};
  }
  throw InvalidArgument("moe quantize: granularity '" + granularity + "' (per_128 or per_token)");
}

#if XSTAGE_PY_HAVE_MOE
ops::MoeWeightLayout layout_of(Format f) {
  switch (f) {
    case Format::w8a8: return ops::MoeWeightLayout::rows;
    case Format::int4_lut: return ops::MoeWeightLayout::int4_rs_lut;
    case Format::int4_lut_glu: return ops::MoeWeightLayout::int4_rs_lut_glu;
    case Format::mxfp4: return ops::MoeWeightLayout::mxfp4_rs;
    case Format::mxfp4_glu: return ops::MoeWeightLayout::mxfp4_rs_glu;
    case Format::w4a8_int4:
    case Format::w4a8_mxfp4: return ops::MoeWeightLayout::rows;
  }
  return ops::MoeWeightLayout::rows;
}
ops::MoeQuant quant_of(Format f) {
  if (f == Format::w8a8) return ops::MoeQuant::w8a8;
  if (f == Format::mxfp4 || f == Format::mxfp4_glu || f == Format::w4a8_mxfp4) return ops::MoeQuant::w4a8_mxfp4;
  return ops::MoeQuant::w4a8_int4;
}

ops::MoeGemmArgs gemm_args(const std::string& format, const std::string& epilogue, const std::string& act_scales,
                           int experts, int m_total, int n, int k, uintptr_t a, uintptr_t a_scales, uintptr_t b,
                           uintptr_t b_scales, uintptr_t counts, uintptr_t offsets, uintptr_t out,
                           uintptr_t out_scales, uintptr_t row_weights, int tokens_per_expert_hint) {
  ops::MoeGemmArgs g;
  const Format f = format_from(format);
  g.quant = quant_of(f);
  g.b_layout = layout_of(f);
  if (epilogue == "bf16") g.epilogue = ops::MoeEpilogue::bf16;
  else if (epilogue == "swiglu") g.epilogue = ops::MoeEpilogue::swiglu_fp8;
  else throw InvalidArgument("moe gemm: epilogue '" + epilogue + "' (bf16 or swiglu)");
  if (act_scales == "per_128") g.a_scale_granularity = ops::MoeActScales::per_128;
  else if (act_scales == "per_token") g.a_scale_granularity = ops::MoeActScales::per_token;
  else throw InvalidArgument("moe gemm: act_scales '" + act_scales + "' (per_128 or per_token)");
  g.experts = experts;
  g.m_total = m_total;
  g.n = n;
  g.k = k;
  g.a = reinterpret_cast<const void*>(a);
  g.a_scales = reinterpret_cast<const float*>(a_scales);
  g.b = reinterpret_cast<const void*>(b);
  // The MXFP4 row layout's b_scales tensor holds its E8M0 exponents.
  if (f == Format::w4a8_mxfp4) g.b_e8m0 = reinterpret_cast<const uint8_t*>(b_scales);
  else g.b_scales = reinterpret_cast<const float*>(b_scales);
  g.counts = reinterpret_cast<const int*>(counts);
  g.offsets = reinterpret_cast<const int*>(offsets);
  g.out = reinterpret_cast<void*>(out);
  g.out_scales = reinterpret_cast<float*>(out_scales);
  g.row_weights = reinterpret_cast<const float*>(row_weights);
  g.tokens_per_expert_hint = tokens_per_expert_hint;
  return g;
}

void moe_gemm(const std::string& format, const std::string& epilogue, const std::string& act_scales, int experts,
              int m_total, int n, int k, uintptr_t a, uintptr_t a_scales, uintptr_t b, uintptr_t b_scales,
              uintptr_t counts, uintptr_t offsets, uintptr_t out, uintptr_t out_scales, uintptr_t row_weights,
              int tokens_per_expert_hint, int device, uintptr_t stream) {
  const ops::MoeGemmArgs g = gemm_args(format, epilogue, act_scales, experts, m_total, n, k, a, a_scales, b, b_scales,
                                       counts, offsets, out, out_scales, row_weights, tokens_per_expert_hint);
  int prev = -1;
  if (const cudaError_t e = cudaGetDevice(&prev); e != cudaSuccess)
    throw Error(format_error("moe gemm: reading the current device", cudaGetErrorString(e)));
  if (prev != device) {
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
      throw Error(format_error("moe gemm: selecting the tensors' device", cudaGetErrorString(e)));
  }
  // restore the caller's device (PyTorch shares the thread's current device) on every exit
  struct Restore {
    int prev, device;
    ~Restore() {
      if (prev != device) cudaSetDevice(prev);
    }
  } restore{prev, device};
  ops::moe_gemm(g, reinterpret_cast<cudaStream_t>(stream));
}

std::string moe_kernel(const std::string& format, const std::string& epilogue, const std::string& act_scales,
                       int experts, int m_total, int n, int k, int tokens_per_expert_hint) {
  // Planning only reads sizes; any aligned non-null pointer passes validation.
  const uintptr_t p = 256;
  const ops::MoeGemmArgs g = gemm_args(format, epilogue, act_scales, experts, m_total, n, k, p, p, p, p, p, p, p,
                                       epilogue == "swiglu" ? p : 0, epilogue == "swiglu" ? p : 0,
                                       tokens_per_expert_hint);
  const ops::MoeInstantiation i = ops::select_moe_instantiation(g);
  return i.name + " " + std::to_string(i.cluster_m) + "x" + std::to_string(i.cluster_n);
}
#endif

}  // namespace

void bind_moe(nb::module_& m) {
  m.def("moe_prepack", &prepack, nb::arg("format"), nb::arg("weights"), nb::arg("reference") = false,
        "Quantise and prepack fp32 host weights [E, n, k]: (b, b_scales, zeroed_mxfp4_subblocks, reference).");
  m.def("moe_quantize_act_host", &quantize_act, nb::arg("x"), nb::arg("granularity"),
        "Host fp8 e4m3 activation quantisation (reference arithmetic): (q uint8 [m, k], scales).");
#if XSTAGE_PY_HAVE_MOE
  m.attr("has_moe") = true;
  m.def("moe_gemm", &moe_gemm,
        "Launch the MoE grouped GEMM on raw device pointers (0 = none) on a stream handle.");
  m.def("moe_kernel", &moe_kernel, nb::arg("format"), nb::arg("epilogue"), nb::arg("act_scales"),
        nb::arg("experts"), nb::arg("m_total"), nb::arg("n"), nb::arg("k"), nb::arg("tokens_per_expert_hint") = 0,
        "The compiled kernel (and cluster) a call would run; no GPU needed.");
#else
  m.attr("has_moe") = false;
#endif
}

}  // namespace xstage::python
