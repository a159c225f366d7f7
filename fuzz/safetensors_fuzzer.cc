// A safetensors file's header (model/safetensors.cc) from arbitrary bytes. Checkpoint::Open
// reads a path only, so the input goes to a file in /dev/shm. Every tensor a checkpoint that
// opens hands out must lie inside its file: the first and last byte of each are read (a view
// past the mapping faults).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlaserve::fuzz::WriteScratchFile("model.safetensors", mlaserve::fuzz::AsText(data, size));
  auto checkpoint = mlaserve::Checkpoint::Open(path);
  if (!checkpoint.ok()) return 0;
  unsigned sum = 0;
  for (const auto& [name, view] : (*checkpoint)->tensors()) {
    (void)view.ShapeString();
    if (view.num_bytes == 0) continue;
    sum += unsigned(view.data[0]) + unsigned(view.data[view.num_bytes - 1]);
  }
  (void)(*checkpoint)->Find("x");
  // Keep the reads (the sum is otherwise unused).
  asm volatile("" : : "r"(sum));
  return 0;
}
