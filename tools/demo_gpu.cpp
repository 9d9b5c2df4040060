// The GPU half of `mxq demo` (built only with CUDA): run mxq::quantize (fused) or
// mxq::quantize_composed on a copy of the input, bring the four outputs back, and time the path
// with cudaEvents.
#include <algorithm>

#include "demo.h"
#include "gpu.h"

namespace mxq::tools {

const char* path_name(GpuPath path) { return path == GpuPath::kFused ? "fused" : "composed"; }

double gpu_bytes_needed(const MatrixShape& s, int64_t groups, DType dtype) {
  return double(dtype_bytes(dtype)) * double(s.elements()) + QuantizeOutputs::bytes(s, groups) +
         double(composed_workspace_bytes(s.M, s.K)) + double(groups) * sizeof(int32_t);
}

double gpu_bytes_free() {
  size_t free = 0;
  size_t total = 0;
  MXQ_TOOL_CUDA(cudaMemGetInfo(&free, &total));
  return double(free);
}

namespace {

// An output byte a kernel forgot to write shows up as a mismatch.
constexpr uint8_t kPoison = 0xA5;

// Device copies of the input and the four outputs of one run (and the composed path's workspace).
struct DeviceRun {
  DeviceBuffer x, offs, status, q_row, s_row, q_col, s_col, workspace;

  DeviceRun(const DemoInput& in, cudaStream_t stream)
      : x(in.x.size()),  // raw bytes of in.dtype
        offs(in.offs.size() * sizeof(int32_t)),
        status(sizeof(int32_t)),
        q_row(size_t(q_row_shape(in.shape.M, in.shape.K).bytes())),
        s_row(size_t(s_row_shape(in.shape.M, in.shape.K, in.groups()).bytes())),
        q_col(size_t(q_col_shape(in.shape.M, in.shape.K).bytes())),
        s_col(size_t(s_col_shape(in.shape.M, in.shape.K, in.groups()).bytes())),
        workspace(size_t(composed_workspace_bytes(in.shape.M, in.shape.K))) {
    MXQ_TOOL_CUDA(cudaMemcpyAsync(x.get(), in.x.data(), x.bytes(), cudaMemcpyHostToDevice, stream));
    if (offs.bytes() > 0) {
      MXQ_TOOL_CUDA(cudaMemcpyAsync(offs.get(), in.offs.data(), offs.bytes(),
                                    cudaMemcpyHostToDevice, stream));
    }
  }

  QuantizeParams params(const DemoInput& in, cudaStream_t stream) const {
    QuantizeParams p;
    p.x = x.get();
    p.dtype = in.dtype;
    p.M = in.shape.M;
    p.K = in.shape.K;
    p.rounding = in.rule;
    p.offs = in.offs.empty() ? nullptr : offs.as<int32_t>();
    p.num_groups = in.groups();
    p.q_row = q_row.as();
    p.s_row = s_row.as();
    p.q_col = q_col.as();
    p.s_col = s_col.as();
    p.status = in.offs.empty() ? nullptr : status.as<int32_t>();
    p.stream = stream;
    return p;
  }

  void poison(cudaStream_t stream) const {
    for (const DeviceBuffer* b : {&q_row, &s_row, &q_col, &s_col}) {
      MXQ_TOOL_CUDA(cudaMemsetAsync(b->get(), kPoison, b->bytes(), stream));
    }
  }

  QuantizeOutputs download(const DemoInput& in, cudaStream_t stream) const {
    QuantizeOutputs out = QuantizeOutputs::allocate(in.shape, in.groups());
    const std::pair<const DeviceBuffer*, std::vector<uint8_t>*> pairs[] = {
        {&q_row, &out.q_row}, {&s_row, &out.s_row}, {&q_col, &out.q_col}, {&s_col, &out.s_col}};
    for (const auto& [device, host] : pairs) {
      MXQ_TOOL_CUDA(cudaMemcpyAsync(host->data(), device->get(), host->size(),
                                    cudaMemcpyDeviceToHost, stream));
    }
    MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
    return out;
  }
};

void launch(GpuPath path, const QuantizeParams& p, const DeviceRun& d) {
  if (path == GpuPath::kFused) {
    quantize(p);
  } else {
    quantize_composed(p, d.workspace.get());
  }
}

}  // namespace

GpuRun run_gpu(const DemoInput& in, GpuPath path, int repeats) {
  Stream stream;
  const DeviceRun d(in, stream.get());
  const QuantizeParams p = d.params(in, stream.get());
  GpuRun run;

  // ---- the checked run: poisoned outputs, one call ----
  d.poison(stream.get());
  MXQ_TOOL_CUDA(cudaMemsetAsync(d.status.get(), 0xFF, d.status.bytes(), stream.get()));
  launch(path, p, d);
  run.out = d.download(in, stream.get());
  if (!in.offs.empty()) {
    MXQ_TOOL_CUDA(
        cudaMemcpy(&run.status, d.status.get(), sizeof run.status, cudaMemcpyDeviceToHost));
  }

  // ---- timing: one warm-up, then `repeats` calls, each between two events ----
  launch(path, p, d);
  std::vector<Event> starts(size_t(std::max(repeats, 1)));
  std::vector<Event> stops(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    MXQ_TOOL_CUDA(cudaEventRecord(starts[i].get(), stream.get()));
    launch(path, p, d);
    MXQ_TOOL_CUDA(cudaEventRecord(stops[i].get(), stream.get()));
  }
  for (size_t i = 0; i < starts.size(); ++i)
    run.times_ms.push_back(elapsed_ms(starts[i], stops[i]));
  return run;
}

}  // namespace mxq::tools
