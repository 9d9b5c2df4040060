// mxq::grouped_gemm in a CUDA build without sm_90a (MXQ_GPU_ARCHS): CUTLASS's kernel is SM90-only
// and compiled only for sm_90a (CMakeLists.txt), so the call refuses instead of pretending to run.
#include "../../common/check.h"
#include "../launch.h"

namespace mxq::detail {

void launch_grouped_gemm(const GroupedGemmParams&) {
  fail(Error::Kind::kUnsupported, "needs SM90 (an sm_90a build): this build targets ",
       MXQ_CUDA_ARCHS, "; configure with 90a in MXQ_GPU_ARCHS");
}

}  // namespace mxq::detail
