#include "kernels/kernel_choice.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/float16.h"
#include "core/read_file.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/pack.h"

namespace mlaserve {
namespace {

// Batches: 512 x 2048 (2 MB of bf16, from cache: compute rates). One token: 4096 x 4096 (32 MB,
// from memory, as decode reads its weights; from cache, a one-token product measured ~1.2x faster
// in bf16, while in the model's decode it is no faster).
constexpr int64_t kRows = 512, kCols = 2048;
constexpr int64_t kStreamRows = 4096, kStreamCols = 4096;
constexpr double kMaddsPerTiming = double(1 << 26);
constexpr size_t kMaxCacheBytes = 1 << 16;

std::vector<ShapeClassRate> ShapeClasses() {
  return {{"1", 1, 1, kBf16MinSpeedupOneToken},
          {"2-16", 8, 2, kBf16MinSpeedup},
          {"17-64", 32, 17, kBf16MinSpeedup},
          {"65+", 128, 65, kBf16MinSpeedup}};
}

// A packed matrix of smooth pseudo-random values in [-1, 1] (no denormals, no zeros runs): bf16,
// or Q8_0 (int8 codes, an F32 scale per 32 columns).
struct MeasureMatrix {
  std::vector<std::byte> row_major;
  std::vector<float> scales;
  HugePageBuffer packed;  // as the model's weights are packed (PackAll)
  WeightMatrix w;

  MeasureMatrix(ThreadPool& pool, int64_t rows, int64_t cols, bool q8_0 = false)
      : row_major(size_t(rows * cols) * (q8_0 ? 1 : 2)) {
    // 4096 pseudo-random values, repeated (the values do not change the time).
    uint32_t state = 12345;
    const size_t value_bytes = q8_0 ? 1 : 2;
    const size_t first = std::min<size_t>(4096 * value_bytes, row_major.size());
    for (size_t i = 0; i < first; i += value_bytes) {
      state = state * 1664525u + 1013904223u;
      const float v = float(int32_t(state >> 8) % 2000 - 1000) / 1000.0f + 1e-3f;
      if (q8_0) {
        row_major[i] = std::byte(int8_t(std::lround(v * 127.0f)));
      } else {
        const uint16_t b = F32ToBf16(v);
        std::memcpy(&row_major[i], &b, 2);
      }
    }
    for (size_t i = first; i < row_major.size(); i += first) {
      std::memcpy(row_major.data() + i, row_major.data(), std::min(first, row_major.size() - i));
    }
    if (q8_0) {
      scales.assign(size_t(rows * (cols / 32)), 1.0f / 127.0f);
      w = WeightMatrix{.dtype = DType::kI8, .rows = rows, .cols = cols, .data = row_major.data(),
                       .format = WeightFormat::kInt8Group, .scales = scales.data(), .block_cols = 32};
    } else {
      w = WeightMatrix{DType::kBF16, rows, cols, row_major.data()};
    }
    WeightMatrix* matrices[] = {&w};
    if (!PackAll(matrices, packed, pool).ok()) w = {};  // out of memory: rows == 0, nothing timed
  }
};

double SecondsOf(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// FLOP/s of n tokens' products with w through each candidate, one thread: a warm-up round, then
// five (three for the one-token product from memory), the candidates alternating so that drift
// hits both alike.
std::vector<double> TimeCandidates(ThreadPool& pool, const std::vector<const KernelSet*>& candidates,
                                   const WeightMatrix& w, int64_t n, bool streamed) {
  std::vector<float> x(size_t(n * w.cols)), y(size_t(n * w.rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 1000) - 500) / 500.0f;
  std::vector<float> scratch(size_t(GemmScratchFloats(n, w.cols, 1)));
  const double madds = double(w.rows * w.cols) * double(n);
  const int reps = std::max(1, int(kMaddsPerTiming / madds));
  std::vector<double> best(candidates.size(), 1e30);
  for (int round = 0; round < (streamed ? 4 : 6); ++round) {
    for (size_t c = 0; c < candidates.size(); ++c) {
      const ComputeContext ctx{candidates[c], &pool, scratch};
      const double s = SecondsOf([&] {
        for (int i = 0; i < reps; ++i) MatMul(ctx, x.data(), n, w, y.data());
      });
      if (round > 0) best[c] = std::min(best[c], s);
    }
  }
  std::vector<double> flops;
  for (double s : best) flops.push_back(2.0 * madds * reps / s);
  return flops;
}

// What the cached rates are valid for: this CPU model and features, and this build of the
// library (the time this file was compiled: every binary linking the same build, mlaserve and the
// test binary alike, reads the same figures; a rebuild that recompiles this file measures again,
// one that changes only the kernel files does not: delete the cache file then).
std::string CacheKey() {
  const CpuFeatures& f = GetCpuFeatures();
  return CpuModelName() + "|avx2=" + std::to_string(f.avx2_fma_f16c) + ",avx512=" + std::to_string(f.avx512) +
         ",avx512_bf16=" + std::to_string(f.avx512_bf16) + ",avx512_vnni=" + std::to_string(f.avx512_vnni) +
         "|build " + __DATE__ + " " + __TIME__;
}

// A cached rate: a finite positive number, else nullopt.
std::optional<double> CachedRate(const nlohmann::json& c, const char* name) {
  if (!c.contains(name) || !c[name].is_number()) return std::nullopt;
  const double v = c[name].get<double>();
  if (!std::isfinite(v) || v <= 0.0) return std::nullopt;
  return v;
}

// The cached rates, or empty rates when the file is absent, another build's or malformed.
std::vector<ShapeClassRate> ReadCache(const std::string& path, const std::string& key, Int8Rates& int8) {
  auto text = ReadTextFile(path, kMaxCacheBytes);
  if (!text.ok()) return {};
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("key") || j["key"] != key || !j.contains("classes") || !j["classes"].is_array()) {
    return {};
  }
  if (CpuSupportsInt8Dot()) {
    if (!j.contains("int8") || !j["int8"].is_object()) return {};
    const nlohmann::json& c = j["int8"];
    const std::optional<double> f1 = CachedRate(c, "fp32_one_gflops"), i1 = CachedRate(c, "int8_one_gflops"),
                                fb = CachedRate(c, "fp32_batch_gflops"), ib = CachedRate(c, "int8_batch_gflops");
    if (!f1 || !i1 || !fb || !ib) return {};
    int8 = {*f1 * 1e9, *i1 * 1e9, *fb * 1e9, *ib * 1e9};
  }
  std::vector<ShapeClassRate> rates = ShapeClasses();
  if (j["classes"].size() != rates.size()) return {};
  for (size_t i = 0; i < rates.size(); ++i) {
    const nlohmann::json& c = j["classes"][i];
    if (!c.is_object() || !c.contains("label") || !c["label"].is_string() ||
        c["label"].get_ref<const std::string&>() != rates[i].label) {
      return {};
    }
    const std::optional<double> fp32 = CachedRate(c, "fp32_gflops"), bf16 = CachedRate(c, "bf16_gflops");
    if (CpuSupportsBf16Dot() && (!fp32 || !bf16)) return {};
    if (!fp32 || !bf16) continue;  // no bf16 to measure: zero rates
    rates[i].fp32_flops = *fp32 * 1e9;
    rates[i].bf16_flops = *bf16 * 1e9;
  }
  return rates;
}

// Written to a temporary file and renamed: concurrent starts never read half a file.
bool WriteCache(const std::string& path, const std::string& key, const std::vector<ShapeClassRate>& rates,
                const Int8Rates& int8) {
  nlohmann::json j;
  j["key"] = key;
  j["classes"] = nlohmann::json::array();
  for (const ShapeClassRate& r : rates) {
    j["classes"].push_back({{"label", r.label}, {"tokens", r.tokens}, {"fp32_gflops", r.fp32_flops / 1e9},
                            {"bf16_gflops", r.bf16_flops / 1e9}});
  }
  if (int8.measured()) {
    j["int8"] = {{"fp32_one_gflops", int8.fp32_one_flops / 1e9}, {"int8_one_gflops", int8.int8_one_flops / 1e9},
                 {"fp32_batch_gflops", int8.fp32_batch_flops / 1e9}, {"int8_batch_gflops", int8.int8_batch_flops / 1e9}};
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << j.dump(1) << "\n";
    if (!out.flush()) return false;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

}  // namespace

std::string KernelChoiceCachePath() {
  if (const char* p = std::getenv("MLASERVE_KERNEL_CACHE"); p != nullptr && *p != '\0') return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p != nullptr && *p != '\0') {
    return std::string(p) + "/mlaserve/kernel-choice.json";
  }
  if (const char* p = std::getenv("HOME"); p != nullptr && *p != '\0') {
    return std::string(p) + "/.cache/mlaserve/kernel-choice.json";
  }
  return "";
}

std::vector<ShapeClassRate> MeasureShapeClasses() {
  std::vector<ShapeClassRate> rates = ShapeClasses();
  if (!CpuSupportsBf16Dot()) return rates;
  ThreadPool pool(1);
  const MeasureMatrix cached(pool, kRows, kCols);
  const std::vector<const KernelSet*> candidates = {Avx512Kernels(), Avx512Bf16Kernels(1)};
  for (ShapeClassRate& r : rates) {
    const int64_t n = r.tokens;
    const std::optional<MeasureMatrix> streamed =
        n == 1 ? std::optional<MeasureMatrix>(std::in_place, pool, kStreamRows, kStreamCols) : std::nullopt;
    const WeightMatrix& w = streamed ? streamed->w : cached.w;
    if (w.rows == 0) continue;  // no memory for it: the class keeps zero rates, and fp32
    const std::vector<double> flops = TimeCandidates(pool, candidates, w, n, streamed.has_value());
    r.fp32_flops = flops[0];
    r.bf16_flops = flops[1];
  }
  return rates;
}

Int8Rates MeasureInt8Rates() {
  Int8Rates rates;
  if (!CpuSupportsInt8Dot()) return rates;
  ThreadPool pool(1);
  const std::vector<const KernelSet*> candidates = {Avx512Kernels(), WithInt8Dot(Avx512Kernels())};
  {
    const MeasureMatrix streamed(pool, kStreamRows, kStreamCols, /*q8_0=*/true);
    if (streamed.w.rows == 0) return rates;
    const std::vector<double> flops = TimeCandidates(pool, candidates, streamed.w, 1, true);
    rates.fp32_one_flops = flops[0];
    rates.int8_one_flops = flops[1];
  }
  const MeasureMatrix cached(pool, kRows, kCols, /*q8_0=*/true);
  if (cached.w.rows == 0) return {};
  const std::vector<double> flops = TimeCandidates(pool, candidates, cached.w, 32, false);
  rates.fp32_batch_flops = flops[0];
  rates.int8_batch_flops = flops[1];
  return rates;
}

const KernelSet* TableForRates(const std::vector<ShapeClassRate>& rates, bool deterministic, const Int8Rates& int8) {
  int min_tokens = 0;  // bf16 from this class on; 0: never
  for (auto r = rates.rbegin(); r != rates.rend(); ++r) {
    if (r->fp32_flops <= 0.0 || r->bf16_flops < r->min_speedup * r->fp32_flops) break;
    min_tokens = r->min_tokens;
  }
  const KernelSet* table = min_tokens == 0 || !CpuSupportsBf16Dot() ? KernelsByName("auto").value()
                                                                     : Avx512Bf16Kernels(deterministic ? 1 : min_tokens);
  // int8 products serve every token count (batch-invariant), deterministic or not.
  if (int8.Chosen()) {
    if (const KernelSet* with_int8 = WithInt8Dot(table)) return with_int8;
  }
  return table;
}

Result<KernelChoice> ChooseKernels(std::string_view flag, bool deterministic) {
  KernelChoice choice;
  if (flag != "auto") {
    auto named = KernelsByName(flag);
    if (!named.ok()) return named.status();
    if (deterministic && (*named)->bf16_min_tokens > 1) {
      return Status::Error("--kernels " + std::string(flag) + " rounds activations to bf16 only from " +
                           std::to_string((*named)->bf16_min_tokens) +
                           " tokens, so results depend on the batch: --enable-deterministic-inference takes "
                           "avx512-bf16 or an fp32 table");
    }
    choice.kernels = *named;
    choice.why = "named by --kernels";
    return choice;
  }
  if (!CpuSupportsBf16Dot() && !CpuSupportsInt8Dot()) {
    choice.kernels = KernelsByName("auto").value();
    choice.why = "no AVX512-BF16 or AVX512-VNNI on this CPU: nothing to choose between";
    return choice;
  }
  choice.cache_path = KernelChoiceCachePath();
  const std::string key = CacheKey();
  if (!choice.cache_path.empty()) choice.rates = ReadCache(choice.cache_path, key, choice.int8);
  choice.from_cache = !choice.rates.empty();
  if (!choice.from_cache) {
    choice.rates = MeasureShapeClasses();
    choice.int8 = MeasureInt8Rates();
    if (!choice.cache_path.empty() && !WriteCache(choice.cache_path, key, choice.rates, choice.int8)) {
      choice.cache_path += " (not writable: not cached)";
    }
  }
  choice.kernels = TableForRates(choice.rates, deterministic, choice.int8);
  return choice;
}

std::string KernelChoice::Describe() const {
  std::string s = std::string("kernels: ") + kernels->name;
  if (rates.empty()) return s + " (" + why + ")";
  s += from_cache ? " (rates read back from " + cache_path + "; one thread, GFLOP/s fp32 / dot products:"
                  : " (measured, one thread, GFLOP/s fp32 / dot products:";
  const size_t header = s.size();
  char buf[160];
  if (CpuSupportsBf16Dot()) {
    for (const ShapeClassRate& r : rates) {
      std::snprintf(buf, sizeof buf, " %s tok %.0f / bf16 %.0f;", r.label, r.fp32_flops / 1e9, r.bf16_flops / 1e9);
      s += buf;
    }
  }
  if (int8.measured()) {
    std::snprintf(buf, sizeof buf, " Q8_0 fp32 / int8 dot: 1 tok %.0f / %.0f, 32 tok %.0f / %.0f;",
                  int8.fp32_one_flops / 1e9, int8.int8_one_flops / 1e9, int8.fp32_batch_flops / 1e9,
                  int8.int8_batch_flops / 1e9);
    s += buf;
  }
  if (s.size() > header) s.pop_back();  // the last ';'
  if (!from_cache && !cache_path.empty()) s += "; cached in " + cache_path;
  return s + ")";
}

}  // namespace mlaserve
