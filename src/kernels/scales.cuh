// Scale stores shared by the quantize and to_blocked kernels: a CTA that covers 128 rows (tokens) x
// 128 columns stages its scales as 512-byte atoms in shared memory (atom_offset order), then one of
// these writes them where the output layout says (docs/numerics.md §5-§6):
//   dense blocked    the whole atom at its blocked place (one 16-byte store per lane of a warp);
//   M-groups (s_row) and K-groups (s_col) per 32-row band of the tile, since with 32-aligned
//                    groups the tile's four bands may land in up to four atoms; the whole-atom
//                    store still serves the tiles whose bands land in one atom in order.
// The 64-row tiles of the fused and colwise kernels stage nothing: each thread stores the scale
// bytes it computed where the same places say (store_scale_byte).
// Padding is written by whoever owns it: the zeros staged past the edge of x give scale byte 0,
// the band that ends a segment or group zeroes the rest of its atom, and the zero-fill CTAs
// (common.cuh) the slack after the last segment or group.
#pragma once

#include "common.cuh"

namespace mxq::kernels {

// How the colwise scales leave a kernel.
enum class ColScales { kNone, kPlain, kBlocked, kKGroups };

// The scale outputs of one call and x's logical shape.
struct ScaleOut {
  uint8_t* s_row;
  uint8_t* s_col;
  int64_t M, K;
};

// The whole staged atom as 32 16-byte stores by one warp (.cs when kStreaming: store16).
template <bool kStreaming = false>
__device__ __forceinline__ void store_atom(uint8_t* dst, const uint8_t* atom, int lane) {
  store16<kStreaming>(dst + lane * 16, reinterpret_cast<const uint4*>(atom)[lane]);
}

// The 32-row bands of an atom: band b of atom row r holds row r + 32 b, so 4 rows share one
// 16-byte atom row.
constexpr int kAtomBands = kAtomRows / kBlock;

// Where one 32-row band of a tile's rows (M-groups), or one 32-token scale column (K-groups),
// goes: its destination atom and its band there (-1: not placed), and whether it ends its segment
// or group (it then zeroes the atom's remaining bands, which are padding).
struct BandPlace {
  int64_t atom;
  int band;
  bool pads;
};
constexpr BandPlace kNotPlaced{0, -1, false};

// M-groups (rowwise scales): the 32-row band at row m of segment s, scale columns of k-tile k0.
__device__ __forceinline__ BandPlace m_groups_place(const Segment& s, int64_t m, int64_t k0,
                                                    int64_t scale_cols) {
  const int64_t row = int64_t(s.row_atom) * kAtomRows + (m - s.begin);  // blocked row
  return {(row / kAtomRows * (round_up(scale_cols, kAtomCols) / kAtomCols) + k0 / kAtomRows) *
              kAtomBytes,
          static_cast<int>(row % kAtomRows / kBlock), m + kBlock == s.end};
}

// K-groups (colwise scales): the scale column of the 32 tokens at m in segment s, scale rows
// [k0, k0 + 128); the tail is not placed.
__device__ __forceinline__ BandPlace k_groups_place(const Segment& s, int64_t m, int64_t k0,
                                                    int64_t K) {
  if (s.tail) return kNotPlaced;
  const int64_t col = (m - s.begin) / kBlock;  // within the group
  const int64_t cols = (s.end - s.begin) / kBlock;
  const int64_t base = int64_t(s.col_base) * round_up(K, kAtomRows);
  return {base + (k0 / kAtomRows * (round_up(cols, kAtomCols) / kAtomCols) + col / kAtomCols) *
                     kAtomBytes,
          static_cast<int>(col % kAtomCols), m + kBlock == s.end};
}

// The places of a grouped tile's kBands row bands (M-groups s_row) and scale columns (K-groups
// s_col), worked out once per CTA by one warp (every lane calls it) from its scan of offs, into
// shared memory (computed by every storing thread instead, they doubled the grouped kernels'
// instruction count). The caller's next __syncthreads publishes them.
struct TilePlaces {
  BandPlace row[kAtomBands];
  BandPlace col[kAtomBands];
  Segment segment[kAtomBands];  // the planning's own: the segment of each band
};
template <int kBands>
__device__ __forceinline__ void plan_tile_places(TilePlaces& places, const int32_t* offs, int G,
                                                 int64_t M, int64_t m0, int64_t k0, int64_t K,
                                                 bool rows, bool cols) {
  locate_bands<kBands>(offs, G, M, m0, places.segment);
  const int c = threadIdx.x % 32;
  if (c >= kBands) return;
  const int64_t m = m0 + c * kBlock;
  if (m >= M) {
    places.row[c] = places.col[c] = kNotPlaced;
    return;
  }
  const Segment s = places.segment[c];
  if (rows) places.row[c] = m_groups_place(s, m, k0, K / kBlock);
  if (cols) places.col[c] = k_groups_place(s, m, k0, K);
}

// The dense blocked layouts per band (64-row tiles cover half an atom).
// `last` marks the last band of x's last tile along M: the atom's remaining bands are padding.
__device__ __forceinline__ BandPlace blocked_row_place(int64_t m0, int c, int64_t k0,
                                                       int64_t scale_cols, bool last) {
  const int64_t row = m0 + int64_t(c) * kBlock;
  return {(row / kAtomRows * (round_up(scale_cols, kAtomCols) / kAtomCols) + k0 / kAtomRows) *
              kAtomBytes,
          static_cast<int>(row % kAtomRows / kBlock), last};
}
__device__ __forceinline__ BandPlace blocked_col_place(int64_t m0, int c, int64_t k0, int64_t M,
                                                       bool last) {
  const int64_t col = m0 / kBlock + c;
  const int64_t cols = M / kBlock;
  return {(k0 / kAtomRows * (round_up(cols, kAtomCols) / kAtomCols) + col / kAtomCols) * kAtomBytes,
          static_cast<int>(col % kAtomCols), last};
}

// True when the four bands land, in order, in one whole destination atom.
template <typename Place>
__device__ __forceinline__ bool whole_atom(const Place& place, int64_t* atom) {
  const BandPlace first = place(0);
  if (first.band != 0) return false;
  for (int c = 1; c < kAtomBands; ++c) {
    const BandPlace next = place(c);
    if (next.atom != first.atom || next.band != c) return false;
  }
  *atom = first.atom;
  return true;
}

// Per-band stores of kBands staged bands. Rowwise: tile row 32c + i sits in the staging at word
// 4i + c (atom_offset), in its destination atom at word 4i + band. Colwise: scale (k, c) sits at
// atom_offset(k, c) in the staging, at the same row and band c' in its destination atom. A band
// that pads zeroes the atom's bands after its own.
template <int kBands, typename Place>
__device__ __forceinline__ void store_row_bands(uint8_t* s_row, const uint8_t* row_atom,
                                                const Place& place) {
  const int tid = threadIdx.x;
  if (tid >= kBands * kBlock) return;
  const int c = tid / kBlock, i = tid % kBlock;
  const BandPlace p = place(c);
  if (p.band < 0) return;
  auto* dst = reinterpret_cast<uint32_t*>(s_row + p.atom) + 4 * i;
  dst[p.band] = reinterpret_cast<const uint32_t*>(row_atom)[4 * i + c];
  for (int s = p.band + 1; p.pads && s < kAtomBands; ++s) dst[s] = 0;
}
// One scale byte of a placed band, stored by the thread that computed it (the 64-row tiles, which
// stage no atom): `at` is its byte in band 0 of the destination atom (row scales: 16 (row % 32) +
// block column; column scales: atom_offset(k, 0)), and the bands lie `band_bytes` apart (4 for row
// scales, 1 for column scales). A band that pads zeroes the same byte of the atom's later bands.
__device__ __forceinline__ void store_scale_byte(uint8_t* out, const BandPlace& p, unsigned at,
                                                 int band_bytes, uint8_t s) {
  if (p.band < 0) return;
  uint8_t* dst = out + p.atom + at;
  dst[p.band * band_bytes] = s;
  for (int t = p.band + 1; p.pads && t < kAtomBands; ++t) dst[t * band_bytes] = 0;
}

// Colwise, a thread per scale row k: threads 4j..4j+3 take rows j, j+32, j+64, j+96, whose bands
// lie 4 bytes apart in one 16-byte atom row, so a warp's byte stores of one band fill 128
// contiguous bytes (4 sectors; 16 when a warp took 32 consecutive rows, one per 16-byte atom row).
template <int kBands, typename Place>
__device__ __forceinline__ void store_col_bands(uint8_t* s_col, const uint8_t* col_atom,
                                                const Place& place) {
  const int t = threadIdx.x % kAtomRows;
  const int k = t % kAtomBands * kBlock + t / kAtomBands;
  for (int c = threadIdx.x / kAtomRows; c < kBands; c += blockDim.x / kAtomRows) {
    const BandPlace p = place(c);
    if (p.band < 0) continue;
    uint8_t* dst = s_col + p.atom + atom_offset<unsigned>(k, 0);
    dst[p.band] = col_atom[atom_offset<unsigned>(k, c)];
    for (int s = p.band + 1; p.pads && s < kAtomCols; ++s) dst[s] = 0;
  }
}

// Colwise scales of the tile whose kBands 32-token bands start at m0 and whose scale rows start
// at k0; col_atom as staged ([k][band] for kPlain); places: planned (kKGroups). last_m: the tile
// is x's last along M. Every thread of the CTA calls it (the per-band stores use 256 threads).
template <ColScales kCol, int kBands>
__device__ __forceinline__ void store_col_scales(const ScaleOut& out, int64_t m0, int64_t k0,
                                                 const uint8_t* col_atom, const TilePlaces& places,
                                                 bool last_m) {
  const int tid = threadIdx.x;
  if constexpr (kCol == ColScales::kPlain) {
    // Row k of S_col (K, M/32): this tile's (up to) kBands bytes. Byte stores: M/32 need not be a
    // multiple of 4.
    if (tid < kAtomRows && k0 + tid < out.K) {
      uint8_t* row = out.s_col + (k0 + tid) * (out.M / kBlock) + m0 / kBlock;
      for (int c = 0; c < kBands && m0 + c * kBlock < out.M; ++c) {
        row[c] = col_atom[tid * kAtomCols + c];
      }
    }
  } else if constexpr (kCol == ColScales::kBlocked && kBands == kAtomBands) {
    if (tid < 32) {
      store_atom(out.s_col + blocked_offset(k0, m0 / kBlock, out.M / kBlock), col_atom, tid);
    }
  } else if constexpr (kCol == ColScales::kBlocked) {
    store_col_bands<kBands>(out.s_col, col_atom, [&](int c) {
      return blocked_col_place(m0, c, k0, out.M, last_m && c == kBands - 1);
    });
  } else if constexpr (kCol == ColScales::kKGroups) {
    const auto place = [&](int c) { return places.col[c]; };
    int64_t atom;
    if (kBands == kAtomBands && whole_atom(place, &atom)) {
      if (tid < 32) store_atom(out.s_col + atom, col_atom, tid);
    } else {
      store_col_bands<kBands>(out.s_col, col_atom, place);
    }
  }
}

// Rowwise scales of the tile whose kBands 32-row bands start at m0, scale columns at k0/32:
// blocked, or M-groups (places planned) when kGrouped.
template <bool kGrouped, int kBands>
__device__ __forceinline__ void store_row_scales(const ScaleOut& out, int64_t m0, int64_t k0,
                                                 const uint8_t* row_atom, const TilePlaces& places,
                                                 bool last_m) {
  const int tid = threadIdx.x;
  const int64_t scale_cols = out.K / kBlock;
  const int last_warp = blockDim.x / 32 - 1;  // warp 0 may be storing the colwise atom
  if constexpr (!kGrouped && kBands == kAtomBands) {
    if (tid / 32 == last_warp) {
      store_atom(out.s_row + blocked_offset(m0, k0 / kBlock, scale_cols), row_atom, tid % 32);
    }
  } else if constexpr (!kGrouped) {
    store_row_bands<kBands>(out.s_row, row_atom, [&](int c) {
      return blocked_row_place(m0, c, k0, scale_cols, last_m && c == kBands - 1);
    });
  } else {
    const auto place = [&](int c) { return places.row[c]; };
    int64_t atom;
    if (kBands == kAtomBands && whole_atom(place, &atom)) {
      if (tid / 32 == last_warp) store_atom(out.s_row + atom, row_atom, tid % 32);
    } else {
      store_row_bands<kBands>(out.s_row, row_atom, place);
    }
  }
}

}  // namespace mxq::kernels
