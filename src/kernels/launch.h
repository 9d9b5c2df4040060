// Kernel launchers behind the public API (src/host/api.cpp). Arguments are already validated
// (src/common/validate.cpp) and there is something to write (for dequantize of an empty q, only the
// status word); each launcher enqueues on p.stream and checks the launch.
#pragma once

#include "../common/validate.h"
#include "mxq/mxq.h"

namespace mxq::detail {

// The 16-bit quantize kernels' tile height: kAutoTileRows lets the launch choose (what the public
// entry points pass), 64 or 128 forces it (the tests' entry points, src/host/testing.h).
constexpr int kAutoTileRows = 0;

void launch_quantize(const QuantizeParams& p, int tile_rows);  // quantize.cu
// Rowwise kernel, colwise kernel writing plain S_col into `workspace`, to_blocked.
void launch_quantize_composed(const QuantizeParams& p, uint8_t* workspace, int tile_rows);
void launch_dequantize(const DequantizeParams& p);
void launch_quantize_weight(const QuantizeWeightParams& p);  // quantize_weight.cu
// The routing plan (route.cu), then the routed tile kernel (quantize.cu).
void launch_quantize_routed(const QuantizeRoutedParams& p, int tile_rows);
// CUTLASS's SM90 grouped GEMM (sm90/sm90_grouped_gemm.cu; without sm_90a in the build, a stub
// that refuses): the per-group problems from offs, then the GEMM.
void launch_grouped_gemm(const GroupedGemmParams& p);
// combine.cu: one warp per token, the two outputs of docs/numerics.md §14.
void launch_combine(const CombineParams& p, CombineOutput output);
// The composed path's third kernel (to_blocked.cu): plain S_col (K, M/32) -> p.s_col (blocked, or
// K-groups with p.offs, writing p.status).
void launch_to_blocked(const uint8_t* s_col_plain, const QuantizeParams& p);

// Refuses (Error::Kind::kUnsupported) a current device for which this build holds no kernel code.
// Cached per device: the driver queries run once per device and process.
void require_supported_device();
// The current device's SM count, from the same check and cache (so it refuses the same devices).
int multiprocessor_count();

}  // namespace mxq::detail
