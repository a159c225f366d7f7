// mlaserve kv-calibrate: measures, over sample text, the absolute maximum of every layer's
// cached KV rows ([c_kv | k_pe] as attention sees them) and writes them as JSON, from which the
// plain fp8 formats (fp8_e4m3, fp8_e5m2) and nvfp4 derive per-layer per-tensor scales
// (--kv-scales FILE). Without such a file those formats use 1.0, as SGLang does.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "core/read_file.h"
#include "cli/model_setup.h"
#include "engine/sequence_runner.h"

namespace mlaserve::cli {

int RunKvCalibrate(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const std::string data_arg = args.Str("data", "", "sample text", {.value_name = "FILE",
                                                                   .shown_default = "MODEL/heldout.txt"});
  const std::string out_path = args.Str("out", "", "where to write the JSON (required)", {.value_name = "FILE"});
  const int max_tokens = args.Int("max-tokens", 4096, "tokens of sample text to run", {.min = 1});
  const int window = args.Int("window", 512, "tokens per sequence", {.min = 1});
  if (out_path.empty()) args.Reject("--out FILE is required");
  if (auto exit_code = args.Finish()) return *exit_code;
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!loaded.ok()) return Fail("kv-calibrate", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const std::string data_path =
      data_arg.empty() ? (std::filesystem::path(model_flags.model_path) / "heldout.txt").string() : data_arg;
  auto text = ReadWholeFile(data_path);
  if (!text.ok()) return Fail("kv-calibrate", text.error() + " (give sample text with --data)");
  auto ids = loaded->tokenizer->Encode(*text, /*add_bos=*/false);
  if (!ids.ok()) return Fail("kv-calibrate", ids.error());
  auto runner = SequenceRunner::Create(model, *loaded->kernels, {.kv_format = KvFormat::kF32});
  if (!runner.ok()) return Fail("kv-calibrate", runner.error());

  std::vector<double> amax(size_t(c.num_hidden_layers), 0.0);
  const int w = std::min(window, model.max_context());
  int64_t used = 0;
  for (size_t begin = 0; begin < ids->size() && used < max_tokens; begin += size_t(w)) {
    const size_t count = std::min({size_t(w), ids->size() - begin, size_t(max_tokens - used)});
    (*runner)->Reset();
    if (Status s = (*runner)->Append(std::span(*ids).subspan(begin, count)); !s.ok()) {
      return Fail("kv-calibrate", s.message());
    }
    const KvHostRows rows = (*runner)->storage().HostRows();
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      for (int p = 0; p < int(count); ++p) {
        const std::byte* row = rows.Row(l, (*runner)->kv().pages(), p);
        for (int i = 0; i < c.kv_cache_dim(); ++i) {
          float v;
          std::memcpy(&v, row + 4 * i, 4);
          amax[size_t(l)] = std::max(amax[size_t(l)], double(std::fabs(v)));
        }
      }
    }
    used += int64_t(count);
  }
  nlohmann::json out{{"model_type", c.model_type},
                     {"num_hidden_layers", c.num_hidden_layers},
                     {"kv_lora_rank", c.kv_lora_rank},
                     {"qk_rope_head_dim", c.qk_rope_head_dim},
                     {"calibration_tokens", used},
                     {"data", data_path},
                     {"kv_amax", amax}};
  if (Status s = WriteJsonFile(out_path, out); !s.ok()) return Fail("kv-calibrate", s.message());
  std::printf("wrote %s: per-layer KV absolute maxima over %lld tokens\n", out_path.c_str(), (long long)used);
  return 0;
}

}  // namespace mlaserve::cli
