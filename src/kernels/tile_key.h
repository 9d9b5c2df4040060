// The shared-memory swizzle of a staged 128x128 tile of 16-bit elements (16 chunks of 16 bytes per
// row), used by the fused kernel (quantize.cu) and the expert-weight kernel (quantize_weight.cu).
// Plain host + device code without CUDA types, so that the CPU suite checks it
// (tests/cpp/test_weight_tile.cpp: bijective per row, conflict-free for every access pattern).
#pragma once

#include "mxq/numerics.h"

namespace mxq::kernels {

// Logical chunk c (0..15) of row `row` of the staged 16-bit tile is stored at physical chunk
// c ^ tile_key(row, c / 8), a 3-bit key (bit 0: c/8 ^ row bit 5, bit 1: row bit 0, bit 2: row
// bit 6). The bank group of a chunk is its low 3 bits, and every 8-lane phase of shared access hits
// 8 different groups:
//   - load: 8 consecutive chunks of one row (any XOR within the row keeps them distinct);
//   - rowwise: chunks {i, 4+i, 8+i, 12+i} of rows r, r+1 (r even): c/8 and row bit 0 separate them;
//   - colwise ldmatrix: one chunk of rows {R, R+1, R+32, R+33, R+64, R+65, R+96, R+97}: row bits
//     0, 5 and 6 take all 8 values.
// In the load and colwise phases a thread's rows differ only in bits 1-4 and its chunks share c/8,
// so it computes its key once. (Hoisting the rowwise key too costs the rowwise-only kernel spills.)
MXQ_HD int tile_key(int row, int half) {
  return ((half ^ (row >> 5)) & 1) | ((row & 1) << 1) | ((row >> 4) & 4);
}

}  // namespace mxq::kernels
