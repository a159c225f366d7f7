#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mlaserve::cli {
namespace {

std::string FormatNumber(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string((long long)x);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// "in [1, 4096]", ">= 0", "in (0, 1]"; empty when the spec has no bounds.
std::string BoundsText(const FlagSpec& spec) {
  const bool has_low = spec.min || spec.above;
  const std::string low = spec.min ? FormatNumber(*spec.min) : spec.above ? FormatNumber(*spec.above) : "";
  if (has_low && spec.max) {
    return std::string("in ") + (spec.min ? "[" : "(") + low + ", " + FormatNumber(*spec.max) + "]";
  }
  if (has_low) return (spec.min ? ">= " : "> ") + low;
  if (spec.max) return "<= " + FormatNumber(*spec.max);
  return "";
}

std::string Join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

Args::Args(std::string command, std::string summary, int argc, char** argv)
    : command_(std::move(command)), summary_(std::move(summary)) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      Reject("unexpected argument '" + a + "' (flags start with --)");
      continue;
    }
    a = a.substr(2);
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      given_.push_back({a.substr(0, eq), a.substr(eq + 1)});
    } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 && std::string(argv[i + 1]) != "-h") {
      given_.push_back({a, std::string(argv[++i])});
    } else {
      given_.push_back({a, std::nullopt});
    }
  }
}

void Args::Reject(std::string message) {
  if (std::find(errors_.begin(), errors_.end(), message) == errors_.end()) errors_.push_back(std::move(message));
}

void Args::Declare(const std::string& name, const std::string& value_name, const std::string& help,
                   const FlagSpec& spec, const std::string& default_text) {
  if (std::find(known_.begin(), known_.end(), name) != known_.end()) return;
  known_.push_back(name);
  std::string text = help;
  std::vector<std::string> notes;
  if (spec.shown_default) notes.push_back(std::string("default: ") + spec.shown_default);
  else if (!default_text.empty()) notes.push_back("default: " + default_text);
  if (const std::string bounds = BoundsText(spec); !bounds.empty()) notes.push_back(bounds);
  if (!spec.choices.empty() && spec.value_name) notes.push_back("one of " + Join(spec.choices, ", "));
  if (!notes.empty()) text += " (" + Join(notes, "; ") + ")";
  help_lines_.push_back({"--" + name + (value_name.empty() ? "" : " " + value_name), text});
}

std::optional<std::string> Args::Read(const std::string& name, const char* help, const FlagSpec& spec,
                                      const char* type_name, const std::string& default_text) {
  const std::string value_name = spec.value_name ? spec.value_name
                                 : !spec.choices.empty() ? Join(spec.choices, "|")
                                                         : type_name;
  Declare(name, value_name, help, spec, default_text);
  std::optional<std::string> value;
  for (const Given& g : given_) {
    if (g.name != name) continue;
    if (!g.value) Reject("--" + name + " needs a value");
    else value = g.value;
  }
  if (value && !spec.choices.empty() &&
      std::find(spec.choices.begin(), spec.choices.end(), *value) == spec.choices.end()) {
    Reject("--" + name + " must be one of " + Join(spec.choices, ", ") + "; got '" + *value + "'");
  }
  return value;
}

bool Args::CheckBounds(const std::string& name, const std::string& text, double value, const FlagSpec& spec) {
  const bool inside = (!spec.min || value >= *spec.min) && (!spec.above || value > *spec.above) &&
                      (!spec.max || value <= *spec.max);
  if (!inside) Reject("--" + name + " must be " + BoundsText(spec) + ", got " + text);
  return inside;
}

std::optional<int64_t> Args::ReadInteger(const std::string& name, const char* help, const FlagSpec& spec,
                                         const std::string& default_text, int64_t lo, int64_t hi) {
  const auto v = Read(name, help, spec, "INT", default_text);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0) {
    Reject("--" + name + " must be an integer, got '" + *v + "'");
    return std::nullopt;
  }
  if (x < lo || x > hi) {
    Reject("--" + name + " is out of range, got " + *v);
    return std::nullopt;
  }
  if (!CheckBounds(name, *v, double(x), spec)) return std::nullopt;
  return int64_t(x);
}

std::string Args::Str(const std::string& name, const std::string& fallback, const char* help, const FlagSpec& spec) {
  return Read(name, help, spec, "TEXT", fallback).value_or(fallback);
}

std::optional<std::string> Args::OptStr(const std::string& name, const char* help, const FlagSpec& spec) {
  return Read(name, help, spec, "TEXT", "");
}

int64_t Args::Int64(const std::string& name, int64_t fallback, const char* help, const FlagSpec& spec) {
  return ReadInteger(name, help, spec, std::to_string(fallback), LLONG_MIN, LLONG_MAX).value_or(fallback);
}

int Args::Int(const std::string& name, int fallback, const char* help, const FlagSpec& spec) {
  return int(ReadInteger(name, help, spec, std::to_string(fallback), INT_MIN, INT_MAX).value_or(fallback));
}

std::optional<int> Args::OptInt(const std::string& name, const char* help, const FlagSpec& spec) {
  const auto x = ReadInteger(name, help, spec, "", INT_MIN, INT_MAX);
  return x ? std::optional<int>(int(*x)) : std::nullopt;
}

double Args::Double(const std::string& name, double fallback, const char* help, const FlagSpec& spec) {
  const auto v = Read(name, help, spec, "FLOAT", FormatNumber(fallback));
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || std::isnan(x)) {
    Reject("--" + name + " must be a number, got '" + *v + "'");
    return fallback;
  }
  return CheckBounds(name, *v, x, spec) ? x : fallback;
}

bool Args::Switch(const std::string& name, const char* help) {
  Declare(name, "", help, {}, "");
  bool present = false;
  for (const Given& g : given_) {
    if (g.name != name) continue;
    if (g.value && *g.value != "true" && *g.value != "false") Reject("--" + name + " takes no value");
    present = !g.value || *g.value == "true";
  }
  return present;
}

std::vector<std::string> Args::All(const std::string& name, const char* help, const FlagSpec& spec) {
  Declare(name, spec.value_name ? spec.value_name : "TEXT", std::string(help) + "; repeatable", spec, "");
  std::vector<std::string> values;
  for (const Given& g : given_) {
    if (g.name != name) continue;
    if (!g.value) Reject("--" + name + " needs a value");
    else values.push_back(*g.value);
  }
  return values;
}

void Args::Refuse(const std::string& name, const std::string& why) {
  Declare(name, "", "refused: " + why, {}, "");
  for (const Given& g : given_) {
    if (g.name == name) Reject("--" + name + " is not supported by mlaserve yet: " + why);
  }
}

std::optional<int> Args::Finish() {
  if (help_) {
    std::printf("usage: mlaserve %s [--flag value ...]\n%s\n\nflags:\n", command_.c_str(), summary_.c_str());
    constexpr int kColumn = 30;  // a longer flag puts its description on the next line
    for (const HelpLine& line : help_lines_) {
      const std::string wrap = int(line.flag.size()) > kColumn ? "\n" + std::string(kColumn + 2, ' ') : "";
      std::printf("  %-*s%s %s\n", kColumn, line.flag.c_str(), wrap.c_str(), line.text.c_str());
    }
    std::printf("  %-*s %s\n", kColumn, "-h, --help", "print this help and exit");
    return 0;
  }
  for (const Given& g : given_) {
    if (std::find(known_.begin(), known_.end(), g.name) == known_.end()) {
      Reject("unknown flag --" + g.name + " (mlaserve " + command_ + " --help lists the flags)");
    }
  }
  if (errors_.empty()) return std::nullopt;
  for (const std::string& e : errors_) Fail(command_, e);
  return 2;
}

bool Args::WasGiven(const std::string& name) const {
  return std::any_of(given_.begin(), given_.end(), [&](const Given& g) { return g.name == name; });
}

int Fail(const std::string& command, const std::string& message, int code) {
  std::fprintf(stderr, "mlaserve %s: %s\n", command.c_str(), message.c_str());
  return code;
}

}  // namespace mlaserve::cli
