// Kernel launchers behind the public API. Arguments are already validated (src/host/validate.cpp)
// and non-empty; each launcher enqueues on p.stream and checks the launch.
#pragma once

#include "mxq/mxq.h"

namespace mxq::detail {

void launch_quantize_rowwise(const RowwiseParams& p);
void launch_quantize_colwise(const ColwiseParams& p);
void launch_swizzle_col_scales(const SwizzleParams& p);
void launch_quantize_dual(const DualParams& p);
void launch_dequantize(const DequantizeParams& p);

// Refuses (mxq::Error) a current device for which this build holds no kernel code.
void require_supported_device();

}  // namespace mxq::detail
