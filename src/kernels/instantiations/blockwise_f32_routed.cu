// The FP8 blockwise fp32 tile kernels (128 rows as two 64-row halves): the routed variants, both
// scaling modes (fp32, rceil).
#include "../quantize_f32.cuh"

namespace mxq::kernels {
template void launch_tile<Fp8Blockwise, TileF32, DType::kFloat32, true>(const RoutedTileParams&,
                                                                        Variant, ScalingMode,
                                                                        cudaStream_t);
}  // namespace mxq::kernels
