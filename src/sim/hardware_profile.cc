#include "sim/hardware_profile.h"

#include <cmath>
#include <set>

#include "core/read_file.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

Status RefuseUnknown(const json& j, const std::set<std::string>& known, const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!known.count(it.key())) return Status::Error(where + ": unknown key \"" + it.key() + "\"");
  }
  return Status::Ok();
}

// A number (above zero when `positive`, else not negative), or `fallback` when absent and not
// required.
Result<double> Number(const json& j, const std::string& key, const std::string& where, bool required, double fallback,
                      bool positive) {
  if (!j.contains(key)) {
    if (required) return Status::Error(where + ": \"" + key + "\" is required");
    return fallback;
  }
  if (!j[key].is_number()) return Status::Error(where + ": \"" + key + "\" must be a number");
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < 0 || (positive && v == 0)) {
    return Status::Error(where + ": \"" + key + "\" must be " + (positive ? "above 0" : "0 or more") + " (got " +
                         j[key].dump() + ")");
  }
  return v;
}

}  // namespace

Result<HardwareProfile> ParseHardwareProfile(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::Error(where + ": a profile is a JSON object");
  MLA_RETURN_IF_ERROR(RefuseUnknown(j, {"name", "description", "memory_gb", "memory_bandwidth_gbs", "bf16_tflops",
                                        "fp8_tflops", "interconnect_gbs", "collective_latency_us", "combine",
                                        "efficiency", "step_overhead_us", "per_token_us", "per_logits_row_us",
                                        "request_latency_us", "sources"},
                                    where));
  HardwareProfile p;
  if (!j.contains("name") || !j["name"].is_string()) return Status::Error(where + ": \"name\" (a string) is required");
  p.name = j["name"].get<std::string>();
  if (j.contains("description")) {
    if (!j["description"].is_string()) return Status::Error(where + ": \"description\" must be a string");
    p.description = j["description"].get<std::string>();
  }
#define MLA_NUMBER(field, required, fallback, positive)                              \
  {                                                                                     \
    auto v = Number(j, #field, where, required, fallback, positive);                 \
    if (!v.ok()) return v.status();                                                     \
    p.field = *v;                                                                       \
  }
  MLA_NUMBER(memory_gb, true, 0, true);
  MLA_NUMBER(memory_bandwidth_gbs, true, 0, true);
  MLA_NUMBER(bf16_tflops, true, 0, true);
  MLA_NUMBER(fp8_tflops, false, 0, false);
  MLA_NUMBER(interconnect_gbs, false, 0, false);
  MLA_NUMBER(collective_latency_us, false, 0, false);
  MLA_NUMBER(step_overhead_us, false, 0, false);
  MLA_NUMBER(per_token_us, false, 0, false);
  MLA_NUMBER(per_logits_row_us, false, 0, false);
  MLA_NUMBER(request_latency_us, false, 0, false);
#undef MLA_NUMBER
  const std::string combine = j.value("combine", std::string("max"));
  if (combine == "max") p.combine = CostCombine::kMax;
  else if (combine == "sum") p.combine = CostCombine::kSum;
  else return Status::Error(where + ": \"combine\" must be \"max\" or \"sum\" (got \"" + combine + "\")");
  if (j.contains("efficiency")) {
    const json& e = j["efficiency"];
    const std::string ew = where + ": efficiency";
    if (!e.is_object()) return Status::Error(ew + " must be an object");
    MLA_RETURN_IF_ERROR(RefuseUnknown(e, {"weights", "kv", "linear", "attention", "interconnect"}, ew));
    double* fields[] = {&p.efficiency.weights, &p.efficiency.kv, &p.efficiency.linear, &p.efficiency.attention,
                        &p.efficiency.interconnect};
    const char* names[] = {"weights", "kv", "linear", "attention", "interconnect"};
    for (int i = 0; i < 5; ++i) {
      auto v = Number(e, names[i], ew, false, 1.0, true);
      if (!v.ok()) return v.status();
      if (*v > 1.5) return Status::Error(ew + ": \"" + names[i] + "\" is a fraction of the rate (got " + e[names[i]].dump() + ")");
      *fields[i] = *v;
    }
  }
  if (j.contains("sources")) {
    if (!j["sources"].is_array()) return Status::Error(where + ": \"sources\" must be an array of strings");
    for (const json& s : j["sources"]) {
      if (!s.is_string()) return Status::Error(where + ": \"sources\" must be an array of strings");
      p.sources.push_back(s.get<std::string>());
    }
  }
  return p;
}

Result<HardwareProfile> LoadHardwareProfile(const std::string& path) {
  auto text = ReadTextFile(path, size_t(1) << 20);  // a profile is a few KB
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::Error(path + ": not valid JSON");
  return ParseHardwareProfile(j, path);
}

json HardwareProfileJson(const HardwareProfile& p) {
  json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["memory_gb"] = p.memory_gb;
  j["memory_bandwidth_gbs"] = p.memory_bandwidth_gbs;
  j["bf16_tflops"] = p.bf16_tflops;
  j["fp8_tflops"] = p.fp8_tflops;
  j["interconnect_gbs"] = p.interconnect_gbs;
  j["collective_latency_us"] = p.collective_latency_us;
  j["combine"] = p.combine == CostCombine::kMax ? "max" : "sum";
  j["efficiency"] = {{"weights", p.efficiency.weights},
                     {"kv", p.efficiency.kv},
                     {"linear", p.efficiency.linear},
                     {"attention", p.efficiency.attention},
                     {"interconnect", p.efficiency.interconnect}};
  j["step_overhead_us"] = p.step_overhead_us;
  j["per_token_us"] = p.per_token_us;
  j["per_logits_row_us"] = p.per_logits_row_us;
  j["request_latency_us"] = p.request_latency_us;
  j["sources"] = p.sources;
  return j;
}

}  // namespace mlaserve
