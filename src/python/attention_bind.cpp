// xstage.attention over ops::attention_forward (include/xstage/ops/attention.hpp).
//
// Two entry points with the same launch:
//   attention_fwd         raw device pointers + BSHD strides in elements + a stream handle: the
//                         hot path of the torch custom op (no per-call DLPack capsules);
//   attention_fwd_dlpack  any DLPack producer (torch, CuPy, JAX): nanobind ndarrays.
// Both launch on the given stream, never synchronise, and allocate nothing after the first
// call on a (device, stream) (the key-split workspace of the long-key and split tiles is sized for a full grid
// up front; under CUDA-graph capture that one allocation runs in relaxed capture mode, outside
// the graph).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "python/bind.hpp"
#include "xstage/error.hpp"

#if XSTAGE_PY_HAVE_ATTENTION
#include <cuda_runtime.h>

#include "xstage/ops/attention.hpp"
#endif

namespace nb = nanobind;

namespace xstage::python {

#if XSTAGE_PY_HAVE_ATTENTION
namespace {

using ops::AttentionArgs;
using ops::AttentionDType;

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();   // reported here: not again at PyTorch's next launch check
  throw Error(format_error(what, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"));
}

// Makes `device` (where the caller's tensors live) current for the launch and restores the
// caller's device afterwards, so the thread's current device (which PyTorch shares) is unchanged.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&prev_), "attention: reading the current device");
    if (prev_ != device) check_cuda(cudaSetDevice(device), "attention: selecting the tensors' device");
    else prev_ = -1;
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// The long-key and split tiles split tiles over idle SMs using a per-(device, stream) workspace
// (ops/attention_workspace.hpp), sized by ops::reserve_split_workspace for the call's grid
// before the launch (growing synchronises the stream). If the stream is being captured into a CUDA graph, the
// one-time cudaMalloc runs in relaxed capture mode: it is not a stream operation and is not
// recorded; the buffer lives for the process (never freed), so replays stay valid.
void prepare_workspace(const AttentionArgs& a, cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &st), "attention: querying the stream's capture status");
  if (st != cudaStreamCaptureStatusActive) {
    ops::reserve_split_workspace(a, stream);
    return;
  }
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "attention: entering relaxed capture mode");
  try {
    ops::reserve_split_workspace(a, stream);
  } catch (...) {
    cudaThreadExchangeStreamCaptureMode(&mode);
    throw;
  }
  check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "attention: leaving relaxed capture mode");
}

void launch(AttentionArgs& a, int device, uintptr_t stream_handle) {
  const DeviceGuard guard(device);
  const auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  ops::validate(a);
  prepare_workspace(a, stream);
  ops::attention_forward(a, stream);
}

AttentionDType dtype_from(int code) {
  if (code == 0) return AttentionDType::bf16;
  if (code == 1) return AttentionDType::fp16;
  throw InvalidArgument("attention: dtype code " + std::to_string(code) + " (0 = bf16, 1 = fp16)");
}

void attention_fwd(int dtype, int batch, int heads, int q_len, int kv_len, int head_dim,                   //
                   uintptr_t q, int64_t qb, int64_t qs, int64_t qh,                                          //
                   uintptr_t k, int64_t kb, int64_t ks, int64_t kh,                                          //
                   uintptr_t v, int64_t vb, int64_t vs, int64_t vh,                                          //
                   uintptr_t o, int64_t ob, int64_t os, int64_t oh,                                          //
                   uintptr_t lse, float softmax_scale, bool causal, int device, uintptr_t stream) {
  AttentionArgs a;
  a.dtype = dtype_from(dtype);
  a.batch = batch;
  a.heads = heads;
  a.q_len = q_len;
  a.kv_len = kv_len;
  a.head_dim = head_dim;
  a.q = reinterpret_cast<const void*>(q);
  a.k = reinterpret_cast<const void*>(k);
  a.v = reinterpret_cast<const void*>(v);
  a.o = reinterpret_cast<void*>(o);
  a.q_strides = {qb, qs, qh, 1};
  a.k_strides = {kb, ks, kh, 1};
  a.v_strides = {vb, vs, vh, 1};
  a.o_strides = {ob, os, oh, 1};
  a.return_lse = lse != 0;
  a.lse = reinterpret_cast<float*>(lse);  // dense [B, H, Sq]
  a.softmax_scale = softmax_scale;
  a.causal = causal;
  launch(a, device, stream);
}

using Array = nb::ndarray<nb::device::cuda>;

AttentionDType dtype_of(const Array& t, const char* name) {
  const nb::dlpack::dtype d = t.dtype();
  if (d.bits == 16 && d.lanes == 1 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat))
    return AttentionDType::bf16;
  if (d.bits == 16 && d.lanes == 1 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float))
    return AttentionDType::fp16;
  throw InvalidArgument(std::string("attention: ") + name + " must be bfloat16 or float16");
}

ops::BSHDStrides strides_of(const Array& t, const char* name) {
  if (t.ndim() != 4) throw InvalidArgument(std::string("attention: ") + name + " must be 4-d [B, S, H, D]");
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

void attention_fwd_dlpack(const Array& q, const Array& k, const Array& v, const Array& o,
                          const std::optional<Array>& lse, float softmax_scale, bool causal, uintptr_t stream) {
  AttentionArgs a;
  a.dtype = dtype_of(q, "q");
  if (dtype_of(k, "k") != a.dtype || dtype_of(v, "v") != a.dtype || dtype_of(o, "o") != a.dtype)
    throw InvalidArgument("attention: q, k, v and o must have one dtype");
  a.q_strides = strides_of(q, "q");
  a.k_strides = strides_of(k, "k");
  a.v_strides = strides_of(v, "v");
  a.o_strides = strides_of(o, "o");
  a.batch = static_cast<int>(q.shape(0));
  a.q_len = static_cast<int>(q.shape(1));
  a.heads = static_cast<int>(q.shape(2));
  a.head_dim = static_cast<int>(q.shape(3));
  a.kv_len = static_cast<int>(k.shape(1));
  for (const Array* t : {&k, &v})
    if (t->shape(0) != q.shape(0) || t->shape(1) != k.shape(1) || t->shape(2) != q.shape(2) ||
        t->shape(3) != q.shape(3))
      throw InvalidArgument("attention: k and v must be [B, Skv, H, D] with q's B, H and D");
  for (int i = 0; i < 4; ++i)
    if (o.shape(i) != q.shape(i)) throw InvalidArgument("attention: o must have q's shape");
  const int device = q.device_id();
  for (const Array* t : {&k, &v, &o})
    if (t->device_id() != device) throw InvalidArgument("attention: q, k, v and o must be on one GPU");
  if (lse) {
    const nb::dlpack::dtype d = lse->dtype();
    if (d.bits != 32 || d.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Float) || lse->ndim() != 3 ||
        lse->shape(0) != q.shape(0) || lse->shape(1) != q.shape(2) || lse->shape(2) != q.shape(1) ||
        lse->stride(2) != 1 || lse->device_id() != device)
      throw InvalidArgument("attention: lse must be float32 [B, H, Sq] with unit stride along Sq, on q's GPU");
    a.return_lse = true;
    a.lse = static_cast<float*>(lse->data());
    a.lse_stride_b = lse->stride(0);
    a.lse_stride_h = lse->stride(1);
    if (a.lse_stride_b == 0 && a.lse_stride_h == 0) a.lse_stride_h = a.q_len;  // 0/0 means dense to the op
  }
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.o = o.data();
  a.softmax_scale = softmax_scale;
  a.causal = causal;
  launch(a, device, stream);
}

nb::dict instantiation(int dtype, int head_dim, bool causal, int kv_len) {
  const ops::AttentionInstantiation i = ops::select_instantiation(dtype_from(dtype), head_dim, causal, kv_len);
  nb::dict d;
  d["name"] = i.name;
  d["block_m"] = i.block_m;
  d["block_n"] = i.block_n;
  d["stages"] = i.stages;
  d["q_stages"] = i.q_stages;
  d["consumer_warpgroups"] = i.consumer_warpgroups;
  d["threads"] = i.threads;
  d["smem_bytes"] = i.smem_bytes;
  return d;
}

}  // namespace
#endif

void bind_attention(nb::module_& m) {
#if XSTAGE_PY_HAVE_ATTENTION
  m.attr("has_attention") = true;
  m.def("attention_fwd", &attention_fwd,
        "Launch attention on raw device pointers (BSHD strides in elements, head-dim stride 1; "
        "lse 0 = none, else dense fp32 [B, H, Sq]; dtype 0 bf16, 1 fp16).");
  m.def("attention_fwd_dlpack", &attention_fwd_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("lse").none(), nb::arg("softmax_scale"), nb::arg("causal"), nb::arg("stream"),
        "Launch attention on DLPack tensors [B, S, H, D] (o written in place; lse fp32 [B, H, Sq] or None).");
  m.def("attention_instantiation", &instantiation, nb::arg("dtype"), nb::arg("head_dim"), nb::arg("causal"),
        nb::arg("kv_len"), "The compiled kernel a call would run (dtype 0 bf16, 1 fp16).");
#else
  m.attr("has_attention") = false;
#endif
}

}  // namespace xstage::python
