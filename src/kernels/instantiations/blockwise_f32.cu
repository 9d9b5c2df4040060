// The FP8 blockwise fp32 tile kernels (128 rows as two 64-row halves): every variant but the routed ones, both
// scaling modes (fp32, rceil).
#include "../quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile<Fp8Blockwise, TileF32, DType::kFloat32, false>(const RoutedTileParams&,
                                                                         Variant, ScalingMode,
                                                                         cudaStream_t);
}  // namespace mxq::kernels
