#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "mxq/mxq.h"

namespace mxq::tools {

namespace {

// One dimension of a shape: decimal digits only, value at most kMaxDim. Digits are accumulated by
// hand so that no length of input can overflow (std::stoll would throw std::out_of_range).
int64_t parse_dim(const std::string& part, const char* name, const std::string& text) {
  if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("expected MxK such as 4096x4096, got \"" + text + "\"");
  }
  int64_t value = 0;
  for (char c : part) {
    value = value * 10 + (c - '0');
    if (value > kMaxDim) {
      throw std::invalid_argument(std::string(name) + " must be at most 2^31-1, got " + part);
    }
  }
  return value;
}

}  // namespace

MatrixShape parse_shape(const std::string& text) {
  const size_t sep = text.find_first_of("xX,");
  if (sep == std::string::npos) {
    throw std::invalid_argument("expected MxK such as 4096x4096, got \"" + text + "\"");
  }
  return {parse_dim(text.substr(0, sep), "M", text), parse_dim(text.substr(sep + 1), "K", text)};
}

uint64_t parse_seed(const std::string& text) {
  const std::string rule = "must be a non-negative integer (0 to 2^64-1), got " + text;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument(rule);
  }
  uint64_t value = 0;
  for (char c : text) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) throw std::invalid_argument(rule);
    value = value * 10 + digit;
  }
  return value;
}

int64_t available_host_bytes() {
  // MemAvailable counts reclaimable page cache too; the free-page count alone would refuse shapes
  // that fit easily on a machine with a warm cache.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : 0;
}

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Phase::Phase(bool enabled, const std::string& prefix, const std::string& what)
    : open_(enabled), start_s_(now_s()) {
  if (open_) std::cerr << prefix << what << " ..." << std::flush;
}

void Phase::done() {
  if (!open_) return;
  std::cerr << " " << fixed(now_s() - start_s_, 1) << " s\n" << std::flush;
  open_ = false;
}

Phase::~Phase() {
  if (open_) std::cerr << " failed\n" << std::flush;
}

std::optional<DType> parse_dtype(const std::string& name) {
  for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    if (name == to_string(t)) return t;
  }
  return std::nullopt;
}

uint16_t f16_from_f32(float f) {
  const uint32_t bits = f32_bits(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return uint16_t(sign | 0x7E00u);  // NaN
  // 65520 (0x477FF000) is halfway between 65504 (mantissa 0x3FF, odd) and 2^16: it and everything
  // above round to Inf.
  if (mag >= 0x477FF000u) return uint16_t(sign | 0x7C00u);
  if (mag < 0x38800000u) {
    // Below 2^-14, fp16 is subnormal: codes are multiples of 2^-24. a * 2^24 is exact and < 1024;
    // adding 2^23 leaves exactly its round-to-nearest-even integer (code 1024 is the min normal).
    volatile float sum = f32_from_bits(mag) * 16777216.0f + 8388608.0f;
    const float rounded = sum - 8388608.0f;
    return uint16_t(sign | uint16_t(rounded));
  }
  // Normal: keep 10 mantissa bits with RNE on the whole magnitude (a carry moves into the exponent),
  // then rebias the exponent from 127 to 15.
  const uint32_t rounded = (mag + 0xFFFu + ((mag >> 13) & 1u)) >> 13;
  return uint16_t(sign | uint16_t(rounded - (112u << 10)));
}

namespace {

void store(std::vector<uint8_t>& x, DType dtype, size_t index, uint32_t bits) {
  if (dtype == DType::kFloat32) {
    std::memcpy(&x[4 * index], &bits, 4);
  } else {
    const uint16_t half = static_cast<uint16_t>(bits);
    std::memcpy(&x[2 * index], &half, 2);
  }
}

uint32_t encode(float v, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return f32_bits(v);
    case DType::kFloat16:
      return f16_from_f32(v);
    case DType::kBFloat16:
      break;
  }
  return bf16_from_f32(v);
}

}  // namespace

std::vector<uint8_t> random_input(const MatrixShape& shape, DType dtype, uint64_t seed) {
  std::vector<uint8_t> x(static_cast<size_t>(shape.elements()) * size_t(dtype_bytes(dtype)));
  const int64_t tile_cols = ceil_div(shape.K, kBlock);
  Rng rng(seed);
  // One exponent per 32x32 tile, in [-12, 12].
  std::vector<int> tile_exp(static_cast<size_t>(ceil_div(shape.M, kBlock) * tile_cols));
  for (int& e : tile_exp) e = static_cast<int>(rng.uniform(-12, 12));
  for (int64_t m = 0; m < shape.M; ++m) {
    const int* row_exp = &tile_exp[static_cast<size_t>((m / kBlock) * tile_cols)];
    // Each row also gets a shift in [-4, 0]: a 1x32 block's scale then differs from the 32x1 blocks
    // crossing it.
    const int row_shift = -static_cast<int>(rng.uniform(0, 4));
    for (int64_t k = 0; k < shape.K; ++k) {
      // 24 random bits -> a uniform value in (-1, 1), exact in fp32.
      const uint64_t bits = rng.next();
      const float u =
          static_cast<float>(static_cast<int64_t>(bits >> 40) - (1 << 23)) / float(1 << 23);
      const float v = std::ldexp(u, row_exp[k / kBlock] + row_shift);
      store(x, dtype, static_cast<size_t>(m * shape.K + k), encode(v, dtype));
    }
  }
  return x;
}

std::vector<Special> add_specials(std::vector<uint8_t>& x, const MatrixShape& shape, DType dtype,
                                  uint64_t seed) {
  struct Bits {
    const char* name;
    uint32_t bf16, fp16, fp32;
  };
  static constexpr Bits kSpecials[] = {
      {"NaN", 0x7FC0, 0x7E00, 0x7FC00000},           {"+Inf", 0x7F80, 0x7C00, 0x7F800000},
      {"-Inf", 0xFF80, 0xFC00, 0xFF800000},          {"-0", 0x8000, 0x8000, 0x80000000},
      {"min subnormal", 0x0001, 0x0001, 0x00000001}, {"max finite", 0x7F7F, 0x7BFF, 0x7F7FFFFF},
      {"-max finite", 0xFF7F, 0xFBFF, 0xFF7FFFFF},
  };
  std::vector<Special> placed;
  if (shape.elements() == 0) return placed;
  Rng rng(seed ^ 0x5BEC1A15ull);
  for (const Bits& b : kSpecials) {
    const int64_t index = rng.uniform(0, shape.elements() - 1);
    const uint32_t bits =
        dtype == DType::kFloat32 ? b.fp32 : (dtype == DType::kFloat16 ? b.fp16 : b.bf16);
    store(x, dtype, static_cast<size_t>(index), bits);
    // A later special at the same element replaces the earlier one.
    placed.erase(std::remove_if(placed.begin(), placed.end(),
                                [&](const Special& s) { return s.index == index; }),
                 placed.end());
    placed.push_back({b.name, index});
  }
  std::sort(placed.begin(), placed.end(),
            [](const Special& a, const Special& b) { return a.index < b.index; });
  return placed;
}

float input_value(const std::vector<uint8_t>& x, DType dtype, int64_t index) {
  const size_t i = static_cast<size_t>(index);
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, &x[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &x[2 * i], 2);
  return dtype == DType::kFloat16 ? f16_to_f32(h) : bf16_to_f32(h);
}

std::vector<int32_t> random_group_offsets(int64_t M, int num_groups, uint64_t seed) {
  if (num_groups < 1)
    throw std::invalid_argument("groups must be >= 1, got " + std::to_string(num_groups));
  Rng rng(seed ^ 0xA11CEull);
  const int64_t units = M / kGroupAlign;  // rows in steps of kGroupAlign (32)
  const int64_t tail = units >= 2 ? rng.uniform(1, std::max<int64_t>(1, units / 8)) : 0;
  const int64_t covered = units - tail;
  // G-1 sorted cut points in [0, covered]; the last group ends at `covered` (the tail follows it).
  std::vector<int64_t> ends(static_cast<size_t>(num_groups), covered);
  for (int g = 0; g + 1 < num_groups; ++g) ends[static_cast<size_t>(g)] = rng.uniform(0, covered);
  std::sort(ends.begin(), ends.end() - 1);
  bool has_empty = num_groups >= 2 && ends[0] == 0;
  for (int g = 1; g < num_groups; ++g) has_empty |= ends[size_t(g)] == ends[size_t(g - 1)];
  if (num_groups >= 2 && !has_empty) {
    // Make group g empty by moving its start up to its end; the order is kept.
    const int g = static_cast<int>(rng.uniform(1, num_groups - 1));
    ends[static_cast<size_t>(g - 1)] = ends[static_cast<size_t>(g)];
  }
  std::vector<int32_t> offs(static_cast<size_t>(num_groups));
  for (size_t g = 0; g < offs.size(); ++g) offs[g] = static_cast<int32_t>(ends[g] * kGroupAlign);
  return offs;
}

std::vector<int32_t> even_group_offsets(int64_t M, int num_groups) {
  if (num_groups < 1)
    throw std::invalid_argument("groups must be >= 1, got " + std::to_string(num_groups));
  std::vector<int32_t> offs(static_cast<size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    const int64_t end =
        g + 1 == num_groups ? M : (g + 1) * M / num_groups / kGroupAlign * kGroupAlign;
    offs[static_cast<size_t>(g)] = static_cast<int32_t>(end);
  }
  return offs;
}

std::vector<int32_t> skewed_group_offsets(int64_t M, int num_groups, double share, uint64_t seed) {
  if (num_groups < 1)
    throw std::invalid_argument("groups must be >= 1, got " + std::to_string(num_groups));
  Rng rng(seed ^ 0x5CE3ull);
  const int64_t units = M / kGroupAlign;
  const int64_t big =
      num_groups == 1 ? units : std::clamp<int64_t>(std::llround(share * double(units)), 0, units);
  const int big_group = static_cast<int>(rng.uniform(0, num_groups - 1));
  // The rest, in units, cut at G-2 sorted random points among the other G-1 groups.
  const int64_t rest = units - big;
  std::vector<int64_t> cuts;
  for (int g = 0; g + 2 < num_groups; ++g) cuts.push_back(rng.uniform(0, rest));
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(rest);
  std::vector<int32_t> offs;
  int64_t end = 0;
  int64_t prev_cut = 0;
  size_t next = 0;
  for (int g = 0; g < num_groups; ++g) {
    if (g == big_group) {
      end += big;
    } else {
      end += cuts[next] - prev_cut;
      prev_cut = cuts[next++];
    }
    offs.push_back(static_cast<int32_t>(end * kGroupAlign));
  }
  return offs;
}

std::string describe_groups(const std::vector<int32_t>& offs, int64_t M) {
  std::ostringstream os;
  int empty = 0;
  int32_t prev = 0;
  for (int32_t end : offs) {
    empty += end == prev;
    prev = end;
  }
  os << offs.size() << " groups (" << empty << " empty), covered rows " << prev << ", tail "
     << (M - prev) << " rows; sizes [";
  prev = 0;
  const size_t shown = std::min<size_t>(offs.size(), 16);
  for (size_t g = 0; g < shown; ++g) {
    os << (g ? ", " : "") << (offs[g] - prev);
    prev = offs[g];
  }
  if (shown < offs.size()) os << ", ... (" << offs.size() - shown << " more)";
  os << "]";
  return os.str();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os << std::fixed << std::setprecision(u == 0 || bytes >= 100 ? 0 : 2) << bytes << " " << units[u];
  return os.str();
}

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << value;
  return os.str();
}

std::string Table::str() const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::ostringstream os;
  auto emit = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      os << (c ? "  " : "") << (c == 0 ? std::left : std::right)
         << std::setw(static_cast<int>(width[c])) << cell;
    }
    os << "\n";
  };
  emit(header_);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  os << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
  for (const auto& row : rows_) emit(row);
  return os.str();
}

static std::string format_time(const char* fmt) {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt, &local);
  return buf;
}

std::string today() { return format_time("%Y-%m-%d"); }
std::string now_iso8601() { return format_time("%Y-%m-%dT%H:%M:%S%z"); }

std::string slug(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace mxq::tools
