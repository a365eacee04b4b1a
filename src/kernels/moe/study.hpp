// The MoE measurement build (CMake option XSTAGE_MOE_STUDY, off by default) defines
// XSTAGE_MOE_STUDY: the per-stage trace of the W4A8 kernels (w4a8_trace.cuh, written to
// XSTAGE_W4A8_TRACE_FILE), the study variants of the register-operand kernels
// (XSTAGE_W4RS_STUDY, config.cuh) and the conversion split of the W4A8 rows kernels
// (XSTAGE_W4A8_CONVERTER_UNITS, w4a8.cuh). A shipped build contains none of them.
#pragma once

// The older spelling of the trace build (-DXSTAGE_W4A8_TRACE in CMAKE_CUDA_FLAGS) selects the
// same build.
#if defined(XSTAGE_W4A8_TRACE) && !defined(XSTAGE_MOE_STUDY)
#define XSTAGE_MOE_STUDY 1
#endif
