// The fp32 tile kernels of quantize_routed: the routed variants, both scaling modes.
#include "../quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile<Mxfp8, TileF32, DType::kFloat32, true>(const RoutedTileParams&, Variant,
                                                                 ScalingMode, cudaStream_t);
}  // namespace mxq::kernels
