// The 128-row tile kernels for fp16 input: every variant and scaling mode (quantize_tile128.cuh).
#include "quantize_tile128.cuh"

namespace mxq::kernels {
template void launch_tile128<DType::kFloat16>(const TileParams&, Variant, ScalingMode,
                                              cudaStream_t);
}  // namespace mxq::kernels
