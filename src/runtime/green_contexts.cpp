#include "runtime/green_contexts.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>

namespace xstage::green {
namespace {

// Driver entry points of the green-context API (CUDA 12.4+ drivers).
struct Api {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*get_resource)(CUdevice, CUdevResource*, CUdevResourceType) = nullptr;
  CUresult (*split)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned) = nullptr;
  CUresult (*gen_desc)(CUdevResourceDesc*, CUdevResource*, unsigned) = nullptr;
  CUresult (*ctx_create)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned) = nullptr;
  CUresult (*ctx_destroy)(CUgreenCtx) = nullptr;
  CUresult (*stream_create)(CUstream*, CUgreenCtx, unsigned, int) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*loading_mode)(CUmoduleLoadingMode*) = nullptr;
  std::string missing;  // first symbol not found
};

template <class F>
void load(const char* sym, F& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  // The ABI of the headers we compiled against (cuGreenCtxStreamCreate appeared after 12.4).
  if (cudaGetDriverEntryPointByVersion(sym, &p, CUDA_VERSION, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    if (missing.empty()) missing = sym;
    return;
  }
  fn = reinterpret_cast<F>(p);
}

const Api& api() {
  static const Api a = [] {
    Api x;
    load("cuDeviceGet", x.device_get, x.missing);
    load("cuDeviceGetDevResource", x.get_resource, x.missing);
    load("cuDevSmResourceSplitByCount", x.split, x.missing);
    load("cuDevResourceGenerateDesc", x.gen_desc, x.missing);
    load("cuGreenCtxCreate", x.ctx_create, x.missing);
    load("cuGreenCtxDestroy", x.ctx_destroy, x.missing);
    load("cuGreenCtxStreamCreate", x.stream_create, x.missing);
    load("cuStreamDestroy", x.stream_destroy, x.missing);
    std::string ignored;  // optional: only for the lazy-loading note
    load("cuModuleGetLoadingMode", x.loading_mode, ignored);
    return x;
  }();
  return a;
}

std::string cu_fail(const char* call, CUresult r) { return fmt::format("{} failed with CUresult {}", call, int(r)); }

}  // namespace

bool lazy_module_loading() {
  CUmoduleLoadingMode m{};
  return api().loading_mode && api().loading_mode(&m) == CUDA_SUCCESS && m == CU_MODULE_LAZY_LOADING;
}

namespace {

// The device's whole SM resource, or why the driver cannot give it.
std::string sm_resource(int device, CUdevice* dev, CUdevResource* all) {
  const Api& a = api();
  if (!a.missing.empty()) return fmt::format("the driver has no {} (green contexts need a CUDA 12.5+ driver)", a.missing);
  if (CUresult r = a.device_get(dev, device); r != CUDA_SUCCESS) return cu_fail("cuDeviceGet", r);
  if (CUresult r = a.get_resource(*dev, all, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS)
    return cu_fail("cuDeviceGetDevResource", r);
  return {};
}

}  // namespace

std::string available(int device) {
  CUdevice dev{};
  CUdevResource all{};
  return sm_resource(device, &dev, &all);
}

namespace {

// Green contexts of one split, made once per process and kept (teams get fresh streams in
// them): making and destroying them per team — hundreds in a test suite — preceded a kernel
// that never started (docs/virtual-ranks.md).
struct Split {
  std::vector<CUgreenCtx> contexts;
  int sms_per_rank = 0;
  int unused = 0;
};
std::mutex cache_mu;
std::map<std::tuple<int, int, int>, Split> cache;

std::string make_split(int device, const SmSplit& plan, Split* out) {
  const Api& a = api();
  CUdevice dev{};
  CUdevResource all{};
  if (std::string err = sm_resource(device, &dev, &all); !err.empty()) return err;
  std::vector<CUdevResource> groups(plan.ranks);
  CUdevResource rest{};
  unsigned n = static_cast<unsigned>(plan.ranks);
  if (CUresult r = a.split(groups.data(), &n, &all, &rest, 0, static_cast<unsigned>(plan.sms_per_rank));
      r != CUDA_SUCCESS)
    return cu_fail("cuDevSmResourceSplitByCount", r);
  if (n != static_cast<unsigned>(plan.ranks))
    return fmt::format("the driver split {} SMs into {} groups of >= {} SMs, not {}", all.sm.smCount, n,
                       plan.sms_per_rank, plan.ranks);
  Split sp;
  sp.sms_per_rank = static_cast<int>(groups[0].sm.smCount);
  sp.unused = static_cast<int>(all.sm.smCount) - sp.sms_per_rank * plan.ranks;
  std::string err;
  for (int i = 0; i < plan.ranks && err.empty(); ++i) {
    if (static_cast<int>(groups[i].sm.smCount) != sp.sms_per_rank) {
      err = fmt::format("the driver's SM groups differ in size ({} and {})", sp.sms_per_rank, groups[i].sm.smCount);
      break;
    }
    CUdevResourceDesc desc{};
    if (CUresult r = a.gen_desc(&desc, &groups[i], 1); r != CUDA_SUCCESS) {
      err = cu_fail("cuDevResourceGenerateDesc", r);
      break;
    }
    CUgreenCtx g{};
    if (CUresult r = a.ctx_create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM); r != CUDA_SUCCESS) {
      err = cu_fail("cuGreenCtxCreate", r);
      break;
    }
    sp.contexts.push_back(g);
  }
  if (!err.empty()) {
    for (CUgreenCtx g : sp.contexts) a.ctx_destroy(g);
    return err;
  }
  *out = std::move(sp);
  return {};
}

}  // namespace

std::string create(int device, const SmSplit& plan, Partitions* out) {
  const Api& a = api();
  Split* sp = nullptr;
  {
    std::lock_guard<std::mutex> lk(cache_mu);
    const auto key = std::make_tuple(device, plan.ranks, plan.sms_per_rank);
    auto it = cache.find(key);
    if (it == cache.end()) {
      Split fresh;
      if (std::string err = make_split(device, plan, &fresh); !err.empty()) return err;
      it = cache.emplace(key, std::move(fresh)).first;
    }
    sp = &it->second;
  }
  Partitions p;
  p.sms_per_rank = sp->sms_per_rank;
  p.unused = sp->unused;
  for (CUgreenCtx g : sp->contexts) {
    p.contexts.push_back(g);
    CUstream s{};
    if (CUresult r = a.stream_create(&s, g, CU_STREAM_NON_BLOCKING, 0); r != CUDA_SUCCESS) {
      destroy(p);
      return cu_fail("cuGreenCtxStreamCreate", r);
    }
    p.streams.push_back(reinterpret_cast<cudaStream_t>(s));
  }
  *out = std::move(p);
  return {};
}

cudaError_t create_stream(const Partitions& p, int r, cudaStream_t* out) {
  CUstream s{};
  if (api().stream_create(&s, static_cast<CUgreenCtx>(p.contexts.at(r)), CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS)
    return cudaErrorInvalidResourceHandle;
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t remake_streams(Partitions& p) {
  const Api& a = api();
  for (cudaStream_t s : p.streams) a.stream_destroy(reinterpret_cast<CUstream>(s));
  p.streams.clear();
  for (size_t r = 0; r < p.contexts.size(); ++r) {
    cudaStream_t s = nullptr;
    if (cudaError_t e = create_stream(p, static_cast<int>(r), &s); e != cudaSuccess) {
      for (cudaStream_t made : p.streams) a.stream_destroy(reinterpret_cast<CUstream>(made));
      p.streams.clear();
      return e;
    }
    p.streams.push_back(s);
  }
  return cudaSuccess;
}

void destroy(Partitions& p) {
  // The streams are the team's; the contexts stay cached for the next team of this split.
  const Api& a = api();
  for (cudaStream_t s : p.streams)
    if (a.stream_destroy) a.stream_destroy(reinterpret_cast<CUstream>(s));
  p.streams.clear();
  p.contexts.clear();
}

}  // namespace xstage::green
