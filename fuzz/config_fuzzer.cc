// config.json (model/config.cc): ParseModelConfig on arbitrary text; a config it accepts must
// give a finite softmax scale (a validated config never divides by zero).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = mlaserve::ParseModelConfig(mlaserve::fuzz::AsText(data, size), "config.json");
  if (!config.ok()) return 0;
  if (!std::isfinite(config->SoftmaxScale())) __builtin_trap();
  return 0;
}
