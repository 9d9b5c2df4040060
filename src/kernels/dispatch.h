// Runtime choices to template arguments, one helper for every launcher (FlashAttention's
// BOOL_SWITCH, generalised): dispatch<kA, kB, ...>(value, f) calls f(std::integral_constant<T, kX>)
// for the listed kX equal to value. f's body is instantiated once per listed value and for no
// other, so the list is the set of kernels that get compiled.
//
//   dispatch<ScalingMode::kRceil, ScalingMode::kFloor>(mode, [&](auto m) {
//     launch(kernel<decltype(m)::value>);
//   });
#pragma once

#include <type_traits>
#include <utility>

#include "../common/check.h"

namespace mxq::kernels {

template <auto... kValues, typename T, typename F>
void dispatch(T value, F&& f) {
  static_assert((std::is_same_v<decltype(kValues), T> && ...),
                "list values of the dispatched type");
  const bool found =
      ((value == kValues ? (f(std::integral_constant<T, kValues>{}), true) : false) || ...);
  // Validation refuses every value the lists leave out, so this is a library bug, said plainly.
  MXQ_CHECK_SUPPORTED(found, "no kernel compiled for choice ", static_cast<int>(value));
}

template <typename F>
void dispatch_bool(bool value, F&& f) {
  dispatch<false, true>(value, std::forward<F>(f));
}

}  // namespace mxq::kernels
