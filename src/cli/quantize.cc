// mlaserve quantize: converts a bf16/f16/f32 checkpoint into the fp8 block-scaled layout
// (DeepSeek-V3, Kimi-K2) or compressed-tensors int4 experts (Kimi-K2-Thinking); see
// model/quantize.h.
#include <cstdio>

#include "cli/commands.h"
#include "model/quantize.h"

namespace mlaserve::cli {

int RunQuantize(Args& args) {
  const std::string in_dir = args.Str("model-path", "", "the dense checkpoint directory to read (required)",
                                      {.value_name = "DIR"});
  const std::string out_dir = args.Str("out", "", "directory to write the quantized checkpoint to (required)",
                                       {.value_name = "DIR"});
  const std::string weights = args.Str("weights", "fp8-block",
                                       "fp8-block: every decoder Linear as E4M3 with 128x128 block scales; "
                                       "int4-g32: routed experts as int4, group 32 (compressed-tensors)",
                                       {.choices = {"fp8-block", "int4-g32"}});
  if (in_dir.empty()) args.Reject("--model-path DIR is required");
  if (out_dir.empty()) args.Reject("--out DIR is required");
  if (auto exit_code = args.Finish()) return *exit_code;
  const QuantScheme scheme = weights == "int4-g32" ? QuantScheme::kInt4G32 : QuantScheme::kFp8Block;
  auto report = QuantizeCheckpoint(in_dir, out_dir, scheme);
  if (!report.ok()) return Fail("quantize", report.error());
  std::printf("wrote %s (%s): %zu matrices quantized, %zu tensors copied, %.1f MB -> %.1f MB\n", out_dir.c_str(),
              QuantSchemeName(scheme), report->num_quantized, report->num_copied, double(report->input_bytes) / 1e6,
              double(report->output_bytes) / 1e6);
  return 0;
}

}  // namespace mlaserve::cli
