// The tests' entry points (testing.h): with a forced tile height, the public entry point's
// validation (less the checks of quantize_composed's and quantize_routed's workspace, which the
// tests size right) and launch.
#include "testing.h"

#include "../common/check.h"
#include "../common/validate.h"
#include "../kernels/launch.h"

namespace mxq::detail {
namespace {
void check_tile_rows(int rows) {
  MXQ_CHECK(rows == 64 || rows == 128, "tile_rows must be 0, 64 or 128, got ", rows);
}
}  // namespace

void quantize_with_tile_rows(const QuantizeParams& p, int tile_rows) {
  if (tile_rows == kAutoTileRows) return quantize(p);
  with_op("mxq::quantize", [&] {
    check_tile_rows(tile_rows);
    validate(p);
    if (nothing_to_write(p)) return;
    require_supported_device();
    launch_quantize(p, tile_rows);
  });
}

void quantize_composed_with_tile_rows(const QuantizeParams& p, void* workspace, int tile_rows) {
  if (tile_rows == kAutoTileRows) return quantize_composed(p, workspace);
  with_op("mxq::quantize_composed", [&] {
    check_tile_rows(tile_rows);
    validate(p);
    if (nothing_to_write(p)) return;
    require_supported_device();
    launch_quantize_composed(p, static_cast<uint8_t*>(workspace), tile_rows);
  });
}

void quantize_routed_with_tile_rows(const QuantizeRoutedParams& p, int tile_rows) {
  if (tile_rows == kAutoTileRows) return quantize_routed(p);
  with_op("mxq::quantize_routed", [&] {
    check_tile_rows(tile_rows);
    validate(p);
    require_supported_device();
    launch_quantize_routed(p, tile_rows);
  });
}

}  // namespace mxq::detail
