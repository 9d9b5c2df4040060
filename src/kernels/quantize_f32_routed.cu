// The fp32 tile kernels of quantize_routed: the routed variants, both scaling modes
// (quantize_f32.cuh).
#include "quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile_f32<true>(const RoutedTileParams&, Variant, ScalingMode, cudaStream_t);
}  // namespace mxq::kernels
