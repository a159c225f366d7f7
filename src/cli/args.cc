#include "cli/args.h"

#include <cerrno>
#include <cstdlib>

namespace mlaserve::cli {

Args::Args(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      Fail("unexpected argument '" + a + "' (flags start with --)");
      continue;
    }
    a = a.substr(2);
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      given_.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      given_.emplace_back(a, std::string(argv[++i]));
    } else {
      given_.emplace_back(a, std::nullopt);
    }
  }
}

void Args::Fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

std::optional<std::string> Args::Str(const std::string& name) {
  known_.insert(name);
  std::optional<std::string> value;
  for (auto& [n, v] : given_) {
    if (n != name) continue;
    if (!v) Fail("--" + name + " needs a value");
    else value = *v;
  }
  return value;
}

std::string Args::Str(const std::string& name, const std::string& fallback) {
  auto v = Str(name);
  return v ? *v : fallback;
}

std::vector<std::string> Args::All(const std::string& name) {
  known_.insert(name);
  std::vector<std::string> values;
  for (auto& [n, v] : given_) {
    if (n != name) continue;
    if (!v) Fail("--" + name + " needs a value");
    else values.push_back(*v);
  }
  return values;
}

int64_t Args::Int64(const std::string& name, int64_t fallback) {
  auto v = Str(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0) {
    Fail("--" + name + " must be an integer, got '" + *v + "'");
    return fallback;
  }
  return x;
}

int Args::Int(const std::string& name, int fallback) {
  int64_t x = Int64(name, fallback);
  if (x < -2147483647 || x > 2147483647) {
    Fail("--" + name + " is out of range");
    return fallback;
  }
  return int(x);
}

double Args::Double(const std::string& name, double fallback) {
  auto v = Str(name);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') {
    Fail("--" + name + " must be a number, got '" + *v + "'");
    return fallback;
  }
  return x;
}

bool Args::Switch(const std::string& name) {
  known_.insert(name);
  bool present = false;
  for (auto& [n, v] : given_) {
    if (n != name) continue;
    if (v && *v != "true" && *v != "false") Fail("--" + name + " takes no value");
    present = !v || *v == "true";
  }
  return present;
}

Status Args::Finish(const std::string& command) const {
  if (!error_.empty()) return Status::Error(error_);
  for (auto& [n, v] : given_) {
    if (!known_.count(n)) return Status::Error("unknown flag --" + n + " for '" + command + "'");
  }
  return Status::Ok();
}

}  // namespace mlaserve::cli
