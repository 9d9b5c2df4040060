// The 64-row tile kernels of quantize_routed for bf16 input: the routed variants, both
// scaling modes.
#include "../quantize_tile64.cuh"

namespace mxq::kernels {
template void launch_tile<Mxfp8, Tile64, DType::kBFloat16, true>(const RoutedTileParams&, Variant,
                                                                 ScalingMode, cudaStream_t);
}  // namespace mxq::kernels
