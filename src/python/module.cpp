// The extension module xstage._C: thin bindings over the C++ libraries. No libtorch: tensors
// come in as DLPack (nanobind ndarray) or as raw device pointers plus strides from the Python
// side, streams as integers (torch.cuda.current_stream().cuda_stream).
#include <nanobind/nanobind.h>

#include "python/bind.hpp"
#include "xstage/error.hpp"

namespace nb = nanobind;

NB_MODULE(_C, m) {
  m.doc() = "xstage native extension (nanobind); use the xstage package, not this module";
  // xstage::InvalidArgument is bad input: ValueError with the library's one-line message.
  // Other xstage::Error (CUDA/NCCL failures at run time) become RuntimeError (nanobind's
  // default for std::exception subclasses).
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const xstage::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  xstage::python::bind_model(m);
  xstage::python::bind_attention(m);
  xstage::python::bind_moe(m);
  xstage::python::bind_team(m);
}
