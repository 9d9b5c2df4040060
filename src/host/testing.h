// Entry points for mxq's own GPU tests and fuzz driver: the public ones with the 16-bit quantize
// kernels' tile height given, so that a test covers both tile kernels on any shape. Not part of the
// library: testing.cpp is built into mxq_testing, which only the test build makes and links (the
// header is not installed; tests add src/ to their include path).
#pragma once

#include "mxq/mxq.h"

namespace mxq::detail {

// tile_rows 0: the public entry point itself (the launch chooses: 64 rows when the 64-row tiles all
// fit in one wave of resident CTAs, else 128); 64 or 128: that height, after the same argument
// checks. The bytes written are the same either way.
void quantize_with_tile_rows(const QuantizeParams& p, int tile_rows);
void quantize_composed_with_tile_rows(const QuantizeParams& p, void* workspace, int tile_rows);
void quantize_routed_with_tile_rows(const QuantizeRoutedParams& p, int tile_rows);

}  // namespace mxq::detail
