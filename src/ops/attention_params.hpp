// Operator arguments -> kernel parameters (strides of extent-1 modes made TMA-legal, the
// default softmax scale, the dense LSE strides). For operators built on the attention
// mainloop (attention_op.cpp, ulysses_op.cpp); `a` must have passed validate().
#pragma once
#include "kernels/attention/params.hpp"
#include "xstage/ops/attention.hpp"

namespace xstage::ops {

kernels::attention::AttentionParams to_kernel_params(const AttentionArgs& a);

}  // namespace xstage::ops
