// The fp32 tile kernels: every variant but the routed ones, both scaling modes.
#include "../quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile<Mxfp8, TileF32, DType::kFloat32, false>(const RoutedTileParams&, Variant,
                                                                  ScalingMode, cudaStream_t);
}  // namespace mxq::kernels
