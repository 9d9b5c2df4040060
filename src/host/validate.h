// Argument validation shared by the GPU entry points and the CPU reference (docs/numerics.md §9).
// Every check runs before anything is launched or written and throws mxq::Error naming the
// argument and its value.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

// Where the op runs: the alignment it needs of M and K, and what messages call it.
struct Target {
  const char* name;  // "the GPU" or "the CPU reference"
  int64_t align;     // kGpuAlign or kCpuAlign
};
constexpr Target kGpu{"the GPU", kGpuAlign};
constexpr Target kCpu{"the CPU reference", kCpuAlign};

void validate(const QuantizeParams& p, const Target& t);
void validate(const DequantizeParams& p, const Target& t);

// True when the call has no output bytes at all (M or K is 0 and no K-groups slack to zero).
bool nothing_to_write(const QuantizeParams& p);

}  // namespace mxq::detail
