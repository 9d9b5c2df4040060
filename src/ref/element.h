// Input elements of the CPU reference: element i of a buffer of any input dtype, widened to fp32
// (docs/numerics.md §2 step 1; exact for every dtype). Shared by reference.cpp and weight.cpp.
#pragma once

#include <cstdint>

#include "mxq/numerics.h"

namespace mxq::ref {

inline float element(const void* x, DType t, int64_t i) {
  switch (t) {
    case DType::kBFloat16:
      return bf16_to_f32(static_cast<const uint16_t*>(x)[i]);
    case DType::kFloat16:
      return f16_to_f32(static_cast<const uint16_t*>(x)[i]);
    case DType::kFloat32:
      break;
  }
  return static_cast<const float*>(x)[i];
}

}  // namespace mxq::ref
