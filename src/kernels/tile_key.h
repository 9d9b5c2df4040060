// Tile index math of the activation kernels (quantize_tile.cuh), plain host + device code without
// CUDA types so that the CPU suite checks it (tests/cpp/test_weight_tile.cpp):
//   tile_key  the shared-memory swizzle of a staged 128x128 tile of 16-bit elements (16 chunks of
//             16 bytes per row), also used by the expert-weight kernel (quantize_weight.cu):
//             bijective per row, conflict-free for every access pattern;
//   Divider   the split of a CTA index into tile coordinates by a launch constant.
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

// n / d for a CTA index n < 2^31 and a launch constant d >= 1 by one multiply-high (Granlund and
// Montgomery's round-up method): with shift = ceil(log2 d) and
// mul = floor(2^32 (2^shift - d) / d) + 1, n / d = (mulhi(n, mul) + n) >> shift, and n < 2^31 keeps
// the sum inside 32 bits. The tile kernels split their CTA index with it, not with a 64-bit `%`
// and `/` (docs/performance.md, "CTA index").
struct Divider {
  uint32_t d = 1, mul = 1, shift = 0;
  // d = 0 (a launch without tiles, whose CTAs never split their index) divides by 1.
  static Divider of(uint32_t divisor) {
    Divider v;
    v.d = divisor == 0 ? 1 : divisor;
    while ((uint64_t(1) << v.shift) < v.d) ++v.shift;
    v.mul =
        static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << v.shift) - v.d)) / v.d + 1);
    return v;
  }
  MXQ_HD uint32_t div(uint32_t n) const {
    return (static_cast<uint32_t>((uint64_t(n) * mul) >> 32) + n) >> shift;
  }
  // n / d and n % d: an index split into its slow and fast coordinates.
  struct Split {
    uint32_t slow, fast;
  };
  MXQ_HD Split split(uint32_t n) const {
    const uint32_t q = div(n);
    return {q, n - q * d};
  }
};

}  // namespace mxq::kernels
