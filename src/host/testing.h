// Hooks for mxq's own GPU tests and fuzz driver, outside the public API and not installed (tests
// add src/ to their include path).
#pragma once

namespace mxq::detail {

// The tile height of the 16-bit quantize kernels for every later call in the process: 0 (the
// default) lets each launch choose (64 rows when the 64-row tiles all fit in one wave of resident
// CTAs, else 128); 64 or 128 forces it, so that a test covers both tile kernels on any shape. The
// bytes written are the same either way. Process-wide: a launch on another thread sees it too.
void force_tile_rows(int rows);

}  // namespace mxq::detail
