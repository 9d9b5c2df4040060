// The FP8 blockwise 128-row tile kernels for bf16 input: every variant but the routed ones, both scaling
// modes (fp32, rceil).
#include "../quantize_tile128.cuh"

namespace mxq::kernels {
template void launch_tile<Fp8Blockwise, Tile128, DType::kBFloat16, false>(const RoutedTileParams&,
                                                                          Variant, ScalingMode,
                                                                          cudaStream_t);
}  // namespace mxq::kernels
