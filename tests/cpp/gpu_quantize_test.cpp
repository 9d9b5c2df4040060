// Every quantize path on the device, byte-exact against the CPU reference (issues 3 and 4):
//   GpuOps       dense: each path x small/medium shapes x every input family x both scaling modes
//                x both tile heights of the 16-bit kernels (128 and 64 rows, forced)
//   GpuGrouped   every path with offs (32-aligned groups; rowwise only with the M-groups s_row,
//                colwise only with the K-groups s_col, fused, composed): G = 1, 4, 8, 64, 300,
//                1024 (the scan's three forms: one group per lane, two, eight in passes of 256
//                groups; common.cuh scan_groups), empty groups, a tail, full cover, all tail;
//                the status word written 0, both grouped scale layouts also against their
//                torchao-style rearrangements; both tile heights
//   GpuTargeted  constructed inputs: RCEIL cutoff neighbours, scale boundaries, scale byte 0,
//                Inf/NaN footprints, mixed magnitudes, the docs/numerics.md §4 table (also checked
//                against the table itself), and a sweep of every bf16 pattern against most scales
//                (the hardware conversion check)
// Outputs are poisoned before every run and every output sits between guard bands (gpu_util.h).
#include <array>
#include <iterator>
#include <sstream>
#include <tuple>

#include "gpu_util.h"

namespace mxq::test {
namespace {

constexpr Path kAllPaths[] = {Path::kRowwise, Path::kColwise, Path::kFused, Path::kComposed};

// ------------------------------------------------------------------------------------------------
// GpuOps: dense, every path x shape x input family x scaling mode.
// ------------------------------------------------------------------------------------------------
using DenseParam = std::tuple<Path, Shape, Dist, ScalingMode, int>;
class GpuOps : public GpuTestWithParam<DenseParam> {};

TEST_P(GpuOps, MatchesReference) {
  const auto [path, shape, dist, mode, tile_rows] = GetParam();
  const ForcedTileRows forced(tile_rows);
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<uint16_t> x = make_input(shape.M, shape.K, dist, seed);
  const HostOutputs want = reference_outputs(x, shape.M, shape.K, {}, mode);
  Stream stream;
  DeviceProblem dev(x, shape.M, shape.K, stream.get());
  expect_matches_reference(dev.run(path, mode), want, path, shape.M, shape.K, 0);
}

std::string dense_name(const ::testing::TestParamInfo<DenseParam>& info) {
  const auto& [path, shape, dist, mode, tile_rows] = info.param;
  return std::string(path_name(path)) + "_" + shape_name(shape) + "_" + dist_name(dist) + "_" +
         scaling_mode_name(mode) + "_rows" + std::to_string(tile_rows);
}

INSTANTIATE_TEST_SUITE_P(
    Dense, GpuOps,
    ::testing::Combine(::testing::ValuesIn(kAllPaths),
                       // 32-multiples (partial 128x128 tiles) and whole tiles
                       ::testing::Values(Shape{32, 32}, Shape{96, 160}, Shape{544, 96},
                                         Shape{128, 128}, Shape{256, 512}, Shape{1024, 384},
                                         Shape{512, 4096}),
                       ::testing::Values(Dist::kSpecial, Dist::kNormal, Dist::kUniform, Dist::kWide,
                                         Dist::kArange),
                       ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor),
                       ::testing::ValuesIn(kTileHeights)),
    dense_name);

// ------------------------------------------------------------------------------------------------
// GpuGrouped: every path with device offs and the status word.
// ------------------------------------------------------------------------------------------------
using GroupedParam = std::tuple<Path, Shape, int, GroupFill, ScalingMode, int>;
class GpuGrouped : public GpuTestWithParam<GroupedParam> {};

TEST_P(GpuGrouped, MatchesReference) {
  const auto [path, shape, G, fill, mode, tile_rows] = GetParam();
  const ForcedTileRows forced(tile_rows);
  const uint64_t seed = test_seed();
  const std::vector<int32_t> offs = make_offs(shape.M, G, fill, seed ^ 1);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", offs " + offs_to_string(offs));
  const std::vector<uint16_t> x = make_input(shape.M, shape.K, Dist::kSpecial, seed);
  const HostOutputs want = reference_outputs(x, shape.M, shape.K, offs, mode);
  Stream stream;
  DeviceProblem dev(x, shape.M, shape.K, stream.get());
  dev.set_offs(offs);
  const HostOutputs got = dev.run(path, mode);
  expect_matches_reference(got, want, path, shape.M, shape.K, G);
  if (has_rowwise(path)) {
    EXPECT_TRUE(row_scale_layout_holds(got.s_row, want.s_row_plain, shape.M, shape.K, offs));
  }
  if (has_colwise(path)) {
    EXPECT_TRUE(col_scale_layout_holds(got.s_col, want.s_col_plain, shape.M, shape.K, offs));
  }
  // The host-side checkers agree that these offs are well formed.
  EXPECT_NO_THROW(check_status(dev.status().as<int32_t>(), stream.get()));
  EXPECT_NO_THROW(validate_offs(dev.offs().as<int32_t>(), G, shape.M, stream.get()));
}

std::string grouped_name(const ::testing::TestParamInfo<GroupedParam>& info) {
  const auto& [path, shape, G, fill, mode, tile_rows] = info.param;
  return std::string(path_name(path)) + "_" + shape_name(shape) + "_G" + std::to_string(G) + "_" +
         group_fill_name(fill) + "_" + scaling_mode_name(mode) + "_rows" +
         std::to_string(tile_rows);
}

INSTANTIATE_TEST_SUITE_P(
    Offs, GpuGrouped,
    ::testing::Combine(::testing::ValuesIn(kAllPaths),
                       ::testing::Values(Shape{1056, 224}, Shape{1024, 384}, Shape{8192, 256}),
                       ::testing::Values(1, 4, 8, 64, 300, kMaxGroups),
                       ::testing::Values(GroupFill::kTail, GroupFill::kFull, GroupFill::kEmpty),
                       ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor),
                       ::testing::ValuesIn(kTileHeights)),
    grouped_name);

// ------------------------------------------------------------------------------------------------
// GpuTargeted: constructed inputs, all four paths against one reference.
// ------------------------------------------------------------------------------------------------
enum class Target {
  kRceilCutoff,  // amax around bf16 0x0460 (448 * 2^-127): 0x045E..0x0462, both signs, both axes
  kScaleBoundaries,  // amax at and next to every RCEIL (448 * 2^e) and FLOOR (2^e) boundary
  kScaleZero,        // |x| <= 0x0460 with subnormals and zeros: scale byte 0, multiplier 2^127
  kNonFiniteSingle,  // isolated +-Inf / NaNs: one row block and one column block each
  // runs along a row (one row block, 32 column blocks), down a column, and unaligned
  kNonFiniteRuns,
  kMixedMagnitude,  // 1e-30 beside 1e30, subnormals, bf16 max, +-0 in the same blocks
  // docs/numerics.md §4 blocks as circulant 32x32 tiles: every row and column block is a §4 case
  kSpecialTiles,
  kCvtSweep,  // every bf16 pattern against anchors of every exponent (hardware conversion check)
};
const char* target_name(Target t) {
  switch (t) {
    case Target::kRceilCutoff:
      return "rceil_cutoff";
    case Target::kScaleBoundaries:
      return "scale_boundaries";
    case Target::kScaleZero:
      return "scale_zero";
    case Target::kNonFiniteSingle:
      return "nonfinite_single";
    case Target::kNonFiniteRuns:
      return "nonfinite_runs";
    case Target::kMixedMagnitude:
      return "mixed_magnitude";
    case Target::kSpecialTiles:
      return "special_tiles";
    case Target::kCvtSweep:
      return "cvt_sweep";
  }
  return "?";
}

void PrintTo(Target t, std::ostream* os) { *os << target_name(t); }

constexpr uint16_t kNonFinite[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFFF};

// Random bf16 bits with magnitude in [lo, hi] and a random sign.
uint16_t random_bits(std::mt19937_64& rng, uint16_t lo, uint16_t hi) {
  const uint16_t mag = uint16_t(std::uniform_int_distribution<int>(lo, hi)(rng));
  return uint16_t(mag | ((rng() & 1) ? 0x8000 : 0));
}

// Plants `count` values into the 32x32 tile at (ti, tj), each at a random position.
template <typename Value>
void plant_in_tile(std::vector<uint16_t>& x, int64_t K, int64_t ti, int64_t tj, int count,
                   std::mt19937_64& rng, Value value) {
  for (int i = 0; i < count; ++i) {
    const int64_t r = ti * kBlock + int64_t(rng() % kBlock),
                  c = tj * kBlock + int64_t(rng() % kBlock);
    x[size_t(r * K + c)] = value();
  }
}

// Case index of tile (ti, tj) for kSpecialTiles.
const std::vector<std::vector<uint16_t>>& special_block_list() {
  static const std::vector<std::vector<uint16_t>> blocks = special_blocks();
  return blocks;
}
int special_case_of_tile(int64_t ti, int64_t tj, int64_t tiles_per_row) {
  return int((ti * tiles_per_row + tj) % int64_t(special_block_list().size()));
}

std::vector<uint16_t> make_target_input(Target target, int64_t M, int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t tiles_m = M / kBlock, tiles_k = K / kBlock;
  std::vector<uint16_t> x;
  switch (target) {
    case Target::kRceilCutoff: {
      x.resize(size_t(M * K));
      for (auto& v : x)
        v = random_bits(rng, 0x0400, 0x045D);  // below every neighbour: they set the amax
      for (int64_t ti = 0; ti < tiles_m; ++ti) {
        for (int64_t tj = 0; tj < tiles_k; ++tj) {
          plant_in_tile(x, K, ti, tj, int(rng() % 4), rng,
                        [&] { return random_bits(rng, 0x045E, 0x0462); });
        }
      }
      break;
    }
    case Target::kScaleBoundaries: {
      x.resize(size_t(M * K));
      for (int64_t ti = 0; ti < tiles_m; ++ti) {
        for (int64_t tj = 0; tj < tiles_k; ++tj) {
          // Boundary B: 448 * 2^e (mantissa 0x60, RCEIL) or 2^e (mantissa 0, FLOOR), exponent field
          // 2..253.
          const uint16_t exponent = uint16_t(2 + rng() % 252);
          const uint16_t boundary = uint16_t((exponent << 7) | ((rng() & 1) ? 0x60 : 0x00));
          for (int64_t r = ti * kBlock; r < (ti + 1) * kBlock; ++r) {
            for (int64_t c = tj * kBlock; c < (tj + 1) * kBlock; ++c) {
              x[size_t(r * K + c)] =
                  random_bits(rng, uint16_t((exponent - 1) << 7), uint16_t(boundary - 2));
            }
          }
          plant_in_tile(x, K, ti, tj, 1 + int(rng() % 3), rng, [&] {
            return random_bits(rng, uint16_t(boundary - 1), uint16_t(boundary + 1));
          });
        }
      }
      break;
    }
    case Target::kScaleZero: {
      x.resize(size_t(M * K));
      for (auto& v : x) v = random_bits(rng, 0x0000, 0x0460);
      for (int64_t ti = 0; ti < tiles_m; ++ti) {  // some tiles entirely subnormal
        for (int64_t tj = 0; tj < tiles_k; ++tj) {
          if (rng() % 4 != 0) continue;
          for (int64_t r = ti * kBlock; r < (ti + 1) * kBlock; ++r) {
            for (int64_t c = tj * kBlock; c < (tj + 1) * kBlock; ++c)
              x[size_t(r * K + c)] = random_bits(rng, 0, 0x7F);
          }
        }
      }
      break;
    }
    case Target::kNonFiniteSingle: {
      x = make_input(M, K, Dist::kNormal, seed);
      for (int64_t ti = 0; ti < tiles_m; ++ti) {
        for (int64_t tj = 0; tj < tiles_k; ++tj) {
          if (rng() % 3 != 0) continue;  // most blocks stay finite
          plant_in_tile(x, K, ti, tj, 1, rng,
                        [&] { return kNonFinite[rng() % std::size(kNonFinite)]; });
        }
      }
      break;
    }
    case Target::kNonFiniteRuns: {
      x = make_input(M, K, Dist::kNormal, seed);
      const int64_t runs = std::max<int64_t>(6, M * K / 8192);
      for (int64_t i = 0; i < runs; ++i) {
        const uint16_t v = kNonFinite[rng() % std::size(kNonFinite)];
        const int kind =
            int(i % 4);  // 0: row run, block aligned; 1: column run, aligned; 2, 3: unaligned
        const int64_t len = kind < 2 ? kBlock : 2 + int64_t(rng() % 40);
        const bool along_row = kind == 0 || kind == 2;
        int64_t r = int64_t(rng() % uint64_t(M)), c = int64_t(rng() % uint64_t(K));
        if (kind == 0) c = c / kBlock * kBlock;
        if (kind == 1) r = r / kBlock * kBlock;
        for (int64_t j = 0; j < len; ++j) {
          const int64_t rr = along_row ? r : r + j, cc = along_row ? c + j : c;
          if (rr < M && cc < K) x[size_t(rr * K + cc)] = v;
        }
      }
      break;
    }
    case Target::kMixedMagnitude: {
      x.resize(size_t(M * K));
      const uint16_t tiny = bf16_rn(1e-30f), huge = bf16_rn(1e30f);
      for (int64_t ti = 0; ti < tiles_m; ++ti) {
        for (int64_t tj = 0; tj < tiles_k; ++tj) {
          const int style = int(rng() % 4);
          for (int64_t r = ti * kBlock; r < (ti + 1) * kBlock; ++r) {
            for (int64_t c = tj * kBlock; c < (tj + 1) * kBlock; ++c) {
              uint16_t v = 0;
              if (style == 0) {  // checkerboard 1e-30 / 1e30
                v = ((r + c) % 2) ? huge : tiny;
              } else if (style == 1) {  // mostly tiny, one huge per row somewhere
                v = (c % kBlock == r % kBlock) ? huge : tiny;
              } else if (style == 2) {  // tiny only: 1e-30 beside subnormals, its own small scale
                v = (rng() & 1) ? tiny : uint16_t(1 + rng() % 0x7F);
              } else {  // anything: subnormal, tiny, normal, huge, bf16 max, zero
                const uint16_t choices[] = {tiny,   huge,   0x0001, 0x007F,
                                            0x3F80, 0x7F7F, 0x0000, 0x0080};
                v = choices[rng() % std::size(choices)];
              }
              x[size_t(r * K + c)] = uint16_t(v | ((rng() & 1) ? 0x8000 : 0));
            }
          }
        }
      }
      break;
    }
    case Target::kSpecialTiles: {
      x.resize(size_t(M * K));
      const auto& blocks = special_block_list();
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t c = 0; c < K; ++c) {
          const auto& b = blocks[size_t(special_case_of_tile(r / kBlock, c / kBlock, tiles_k))];
          // Circulant: row i of the tile is b rotated by i, so every row and every column is a
          // permutation of b.
          x[size_t(r * K + c)] = b[size_t(((c % kBlock) - (r % kBlock) + kBlock) % kBlock)];
        }
      }
      break;
    }
    case Target::kCvtSweep: {
      // Tile t (32x32, numbered row-major) holds the 1024 consecutive bf16 patterns from base (t %
      // 64) * 1024:
      // 64 tiles hold all 65536 patterns, a row block 32 of them (one exponent), a column block 32
      // spread over 8 exponents. One anchor per row block and per column block (the tile diagonal)
      // has exponent field (t / 64) % 256, so with 16384 tiles every pattern meets an anchor of
      // every exponent along both axes:
      // the amax, and so the multiplier, is max(anchor, block values).
      x.resize(size_t(M * K));
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t c = 0; c < K; ++c) {
          const int64_t t = (r / kBlock) * tiles_k + c / kBlock, i = r % kBlock, j = c % kBlock;
          uint16_t v = uint16_t((t % 64) * 1024 + i * kBlock + j);
          if (i == j)
            v = uint16_t((((t / 64) % 256) << 7) | (rng() & 0x7F) | ((rng() & 1) ? 0x8000 : 0));
          x[size_t(r * K + c)] = v;
        }
      }
      break;
    }
  }
  return x;
}

// The docs/numerics.md §4 table as printed: scale byte per scaling mode and the data byte of each
// input value of the block.
struct TableCase {
  uint8_t s_rceil, s_floor;
  std::vector<std::array<uint16_t, 3>>
      data;  // {input bf16, rceil byte, floor byte}; empty = all 0x7F
};
// In the order of special_blocks(); 0x0460 / 0x0461 / 0x045F worked out from docs/numerics.md
// §2-§3.
const std::vector<TableCase>& spec_table() {
  static const std::vector<TableCase> table = {
      {0, 0, {{0x0000, 0x00, 0x00}}},                            // all 0
      {0, 0, {{0x0080, 0x40, 0x40}}},                            // all 2^-126
      {255, 255, {}},                                            // 1s + Inf
      {255, 255, {}},                                            // 1s + NaN
      {255, 255, {}},                                            // all NaN
      {127, 127, {{0x43E0, 0x7E, 0x7E}, {0xC3E0, 0xFE, 0xFE}}},  // all +-448
      {247, 246, {{0x7F7F, 0x78, 0x7E}, {0xFF7F, 0xF8, 0xFE}}},  // all +-bf16 max
      {0, 0, {{0x0001, 0x08, 0x08}, {0x8001, 0x88, 0x88}}},      // all +-smallest subnormal
      {119, 119, {{0x0001, 0x00, 0x00}, {0x3F80, 0x78, 0x78}}},  // 1s + smallest subnormal
      {119, 119, {{0x8001, 0x80, 0x80}, {0x3F80, 0x78, 0x78}}},  // 1s + -smallest subnormal
      {247, 246, {{0x7F7F, 0x78, 0x7E}, {0x3F80, 0x00, 0x00}}},  // 1s + bf16 max
      {128, 127, {{0x43F0, 0x77, 0x7E}, {0xC3F0, 0xF7, 0xFE}}},  // all +-480
      {120, 120, {{0x4060, 0x7E, 0x7E}}},                        // all 3.5
      {128, 128, {{0x4400, 0x78, 0x78}}},                        // all 512
      {255, 255, {}},                                            // 1s + -Inf
      {0, 0, {{0x8000, 0x80, 0x80}}},                            // all -0
      {0, 0, {{0x0460, 0x7E, 0x7E}}},                            // all 448 * 2^-127: RCEIL cutoff
      {1, 0, {{0x0461, 0x76, 0x7E}}},  // next bf16 up: RCEIL 1, 225 -> 224
      {0, 0, {{0x045F, 0x7E, 0x7E}}},  // next bf16 down: 446 -> 448
  };
  return table;
}

uint8_t table_data_byte(const TableCase& tc, uint16_t v, ScalingMode r) {
  if (tc.data.empty()) return kE4m3Nan;
  for (const auto& d : tc.data) {
    if (d[0] == v) return uint8_t(r == ScalingMode::kRceil ? d[1] : d[2]);
  }
  ADD_FAILURE() << "value 0x" << std::hex << v << " not in its docs/numerics.md §4 case";
  return 0;
}

// The kSpecialTiles outputs against the docs/numerics.md §4 table itself (not the reference): a
// misreading of the contract shared by the reference and the kernels shows up here.
void expect_spec_table(const HostOutputs& got, Path path, const std::vector<uint16_t>& x, int64_t M,
                       int64_t K, ScalingMode r) {
  ASSERT_EQ(special_block_list().size(), spec_table().size());
  const int64_t tiles_k = K / kBlock;
  const bool rows = has_rowwise(path), cols = has_colwise(path);
  int64_t bad = 0;
  std::string first;
  auto check = [&](uint8_t got_byte, uint8_t want, const char* what, int64_t a, int64_t b) {
    if (got_byte == want) return;
    if (bad++ == 0) {
      std::ostringstream os;
      os << what << "[" << a << ", " << b << "]: got 0x" << std::hex << int(got_byte)
         << ", table says 0x" << int(want);
      first = os.str();
    }
  };
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const TableCase& tc =
          spec_table()[size_t(special_case_of_tile(m / kBlock, k / kBlock, tiles_k))];
      const uint8_t s = r == ScalingMode::kRceil ? tc.s_rceil : tc.s_floor;
      const uint8_t q = table_data_byte(tc, x[size_t(m * K + k)], r);
      if (rows) {
        check(got.q_row[size_t(m * K + k)], q, "q_row", m, k);
        if (k % kBlock == 0)
          check(got.s_row[size_t(blocked_offset(m, k / kBlock, K / kBlock))], s, "S_row", m,
                k / kBlock);
      }
      if (cols) {
        check(got.q_col[size_t(k * M + m)], q, "q_col", k, m);
        if (m % kBlock == 0) {
          check(got.s_col[size_t(blocked_offset(k, m / kBlock, M / kBlock))], s, "S_col", k,
                m / kBlock);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << path_name(path) << ": " << bad
                    << " bytes differ from the docs/numerics.md §4 table; first " << first;
}

using TargetParam = std::tuple<Target, ScalingMode>;
class GpuTargeted : public GpuTestWithParam<TargetParam> {};

TEST_P(GpuTargeted, AllPathsMatchReference) {
  const auto [target, mode] = GetParam();
  const Shape shape = target == Target::kCvtSweep       ? Shape{4096, 4096}
                      : target == Target::kSpecialTiles ? Shape{640, 672}
                                                        : Shape{544, 800};
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<uint16_t> x = make_target_input(target, shape.M, shape.K, seed);
  const HostOutputs want = reference_outputs(x, shape.M, shape.K, {}, mode);
  Stream stream;
  DeviceProblem dev(x, shape.M, shape.K, stream.get());
  for (Path path : kAllPaths) {
    const HostOutputs got = dev.run(path, mode);
    expect_matches_reference(got, want, path, shape.M, shape.K, 0);
    if (target == Target::kSpecialTiles) expect_spec_table(got, path, x, shape.M, shape.K, mode);
  }
  if (target == Target::kSpecialTiles)
    expect_spec_table(want, Path::kFused, x, shape.M, shape.K, mode);
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, GpuTargeted,
    ::testing::Combine(::testing::Values(Target::kRceilCutoff, Target::kScaleBoundaries,
                                         Target::kScaleZero, Target::kNonFiniteSingle,
                                         Target::kNonFiniteRuns, Target::kMixedMagnitude,
                                         Target::kSpecialTiles, Target::kCvtSweep),
                       ::testing::Values(ScalingMode::kRceil, ScalingMode::kFloor)),
    [](const ::testing::TestParamInfo<TargetParam>& info) {
      return std::string(target_name(std::get<0>(info.param))) + "_" +
             scaling_mode_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace mxq::test
