// The 128-row tile kernels for fp16 input: every variant but the routed ones, both scaling modes (quantize_tile128.cuh).
#include "quantize_tile128.cuh"

namespace mxq::kernels {
template void launch_tile128<DType::kFloat16, false>(const RoutedTileParams&, Variant, ScalingMode,
                                                     cudaStream_t);
}  // namespace mxq::kernels
