// Argument validation shared by the GPU entry points and the CPU reference (SPEC §9). Every check
// runs before anything is launched or written and throws mxq::Error naming the argument and its
// value.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

// Where the op runs: the alignment it needs of M and K, and whether pointers must be device memory.
struct Target {
  const char* name;  // "GPU" or "CPU reference", for messages
  int64_t align;     // kGpuAlign or kCpuAlign
  bool device;
};
constexpr Target kGpu{"GPU", kGpuAlign, true};
constexpr Target kCpu{"CPU reference", kCpuAlign, false};

void validate(const RowwiseParams& p, const Target& t);
void validate(const ColwiseParams& p, const Target& t);
void validate(const SwizzleParams& p, const Target& t);
void validate(const DualParams& p, const Target& t);
void validate(const DequantizeParams& p, const Target& t);

// The rules of grouped offsets (SPEC §6, §9) on a host copy: non-decreasing, non-negative, at most
// `tokens` (named `name` in messages), multiples of kGroupAlign. Throws naming the first bad entry.
// Used by the CPU reference (its offs are host memory) and by mxq::validate_offs after its copy.
void check_host_offs(const int32_t* offs, int64_t num_groups, int64_t tokens,
                     const char* name = "M");

// Pointer residency check for the GPU path (implemented with the CUDA runtime; a no-op without
// CUDA).
void check_device_pointer(const void* ptr, const char* name);

}  // namespace mxq::detail
