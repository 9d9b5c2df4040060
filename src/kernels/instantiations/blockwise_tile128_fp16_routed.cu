// The FP8 blockwise 128-row tile kernels for fp16 input: the routed variants, both scaling
// modes (fp32, rceil).
#include "../quantize_tile128.cuh"

namespace mxq::kernels {
template void launch_tile<Fp8Blockwise, Tile128, DType::kFloat16, true>(const RoutedTileParams&,
                                                                        Variant, ScalingMode,
                                                                        cudaStream_t);
}  // namespace mxq::kernels
