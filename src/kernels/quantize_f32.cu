// The fp32 tile kernels: every variant but the routed ones, both scaling modes (quantize_f32.cuh).
#include "quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile_f32<false>(const RoutedTileParams&, Variant, ScalingMode, cudaStream_t);
}  // namespace mxq::kernels
