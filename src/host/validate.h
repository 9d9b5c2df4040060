// Argument validation shared by the GPU entry points and the CPU reference (docs/numerics.md §9).
// Every check runs before anything is launched or written and throws mxq::Error naming the
// argument and its value.
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

void validate(const QuantizeParams& p);
void validate(const DequantizeParams& p);

// True when the call has no output bytes at all (M or K is 0 and no K-groups slack to zero).
bool nothing_to_write(const QuantizeParams& p);

}  // namespace mxq::detail
