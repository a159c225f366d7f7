#include "support/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <regex>
#include <set>

namespace mlaserve::testing {
namespace {

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// One line, read left to right.
class Cursor {
 public:
  explicit Cursor(std::string_view line) : s_(line) {}
  bool done() const { return i_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[i_]; }
  bool Consume(char c) {
    if (peek() != c || done()) return false;
    ++i_;
    return true;
  }
  bool SkipBlanks() {
    const size_t start = i_;
    while (!done() && IsBlank(s_[i_])) ++i_;
    return i_ > start;
  }
  // Up to the next blank or the end of the line.
  std::string_view Token() {
    const size_t start = i_;
    while (!done() && !IsBlank(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  // A metric name [a-zA-Z_:][a-zA-Z0-9_:]* (with_colon) or a label name [a-zA-Z_][a-zA-Z0-9_]*;
  // empty when none starts here.
  std::string_view Name(bool with_colon) {
    const size_t start = i_;
    auto ok = [&](char c, bool first) { return IsLetter(c) || (with_colon && c == ':') || (!first && IsDigit(c)); };
    if (done() || !ok(s_[i_], true)) return {};
    while (!done() && ok(s_[i_], i_ == start)) ++i_;
    return s_.substr(start, i_ - start);
  }
  char Next() { return s_[i_++]; }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

// A sample value or an `le` bound: a decimal float, +Inf, -Inf or NaN.
bool ParseFloat(std::string_view text, double& value) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (text == "+Inf" || text == "-Inf" || text == "NaN") {
    value = text == "NaN" ? std::numeric_limits<double>::quiet_NaN() : text == "+Inf" ? kInf : -kInf;
    return true;
  }
  static const std::regex decimal(R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  const std::string s(text);
  if (!std::regex_match(s, decimal)) return false;
  value = std::strtod(s.c_str(), nullptr);
  return true;
}

// A label value after its opening quote, up to and including the closing one.
Status ReadLabelValue(Cursor& c, std::string& value) {
  while (!c.done()) {
    const char ch = c.Next();
    if (ch == '"') return Status::Ok();
    if (ch != '\\') {
      value += ch;
      continue;
    }
    if (c.done()) break;
    switch (c.Next()) {
      case '\\': value += '\\'; break;
      case '"': value += '"'; break;
      case 'n': value += '\n'; break;
      default: return Status::Error("a label value has an escape other than \\\\, \\\" or \\n");
    }
  }
  return Status::Error("a label value has no closing double quote (a raw line feed or quote in it?)");
}

// HELP text: only \\ and \n are escapes.
Status ReadHelp(Cursor& c, std::string& help) {
  while (!c.done()) {
    const char ch = c.Next();
    if (ch != '\\') {
      help += ch;
      continue;
    }
    const char next = c.done() ? '\0' : c.Next();
    if (next == '\\') {
      help += '\\';
    } else if (next == 'n') {
      help += '\n';
    } else {
      return Status::Error("HELP text has an escape other than \\\\ or \\n");
    }
  }
  return Status::Ok();
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A label set as one string, in name order, leaving out `skip`.
std::string LabelKey(const PromSample& s, std::string_view skip = {}) {
  auto labels = s.labels;
  std::sort(labels.begin(), labels.end());
  std::string key;
  for (const auto& [name, value] : labels) {
    if (name == skip) continue;
    key += name + '\x01' + value + '\x02';
  }
  return key;
}

struct FamilyState {
  bool help = false;
  bool type = false;
};

Status CheckHistogram(const PromFamily& f) {
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, cumulative count) in page order
    bool has_sum = false, has_count = false;
    double count = 0;
  };
  std::map<std::string, Series> series;  // by label set without le
  for (const PromSample& s : f.samples) {
    Series& one = series[LabelKey(s, "le")];
    if (s.name == f.name + "_bucket") {
      const std::string* le = s.Label("le");
      double bound = 0;
      if (le == nullptr) return Status::Error(s.name + " has no le label");
      if (!ParseFloat(*le, bound) || std::isnan(bound)) return Status::Error(s.name + " has le=\"" + *le + "\", not a float");
      if (!one.buckets.empty() && bound <= one.buckets.back().first) {
        return Status::Error(s.name + " bounds are not increasing at le=\"" + *le + "\"");
      }
      if (!one.buckets.empty() && s.value < one.buckets.back().second) {
        return Status::Error(s.name + " counts are not cumulative at le=\"" + *le + "\"");
      }
      one.buckets.emplace_back(bound, s.value);
    } else if (s.Label("le") != nullptr) {
      return Status::Error(s.name + " has an le label");
    } else if (s.name == f.name + "_sum") {
      one.has_sum = true;
    } else if (s.name == f.name + "_count") {
      one.has_count = true;
      one.count = s.value;
    } else {
      return Status::Error("histogram " + f.name + " has a sample " + s.name + " (not _bucket, _sum or _count)");
    }
  }
  for (const auto& [key, one] : series) {
    if (one.buckets.empty() || !std::isinf(one.buckets.back().first)) {
      return Status::Error("histogram " + f.name + " has a series without an le=\"+Inf\" bucket");
    }
    if (!one.has_sum || !one.has_count) return Status::Error("histogram " + f.name + " has a series without _sum or _count");
    if (one.buckets.back().second != one.count) {
      return Status::Error("histogram " + f.name + ": the +Inf bucket differs from _count");
    }
  }
  return Status::Ok();
}

Status CheckFamily(const PromFamily& f) {
  if (f.type == "counter") {
    if (!EndsWith(f.name, "_total")) return Status::Error("counter " + f.name + " is not named *_total");
    for (const PromSample& s : f.samples) {
      if (std::isnan(s.value) || s.value < 0) return Status::Error("counter " + f.name + " has a negative or NaN value");
    }
  }
  if (f.type == "histogram") return CheckHistogram(f);
  if (f.type == "summary") {
    for (const PromSample& s : f.samples) {
      if (s.name == f.name && s.Label("quantile") == nullptr) return Status::Error(f.name + " has a sample without quantile");
    }
  }
  return Status::Ok();
}

}  // namespace

const std::string* PromSample::Label(std::string_view label_name) const {
  for (const auto& label : labels) {
    if (label.first == label_name) return &label.second;
  }
  return nullptr;
}

const PromFamily* FindFamily(const std::vector<PromFamily>& families, std::string_view name) {
  for (const PromFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Result<std::vector<PromFamily>> ParsePrometheusText(std::string_view page) {
  std::vector<PromFamily> families;
  std::vector<FamilyState> states;
  std::map<std::string, size_t, std::less<>> index;  // family name -> position
  std::set<std::string> series;                      // name + label set of every sample
  size_t current = SIZE_MAX;                          // the family the last line belonged to
  if (!page.empty() && page.back() != '\n') return Status::Error("the page does not end with a line feed");

  auto family = [&](const std::string& name) -> size_t {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    families.push_back(PromFamily{.name = name});
    states.emplace_back();
    index.emplace(name, families.size() - 1);
    return families.size() - 1;
  };
  // The family a sample belongs to: x for x_bucket/_sum/_count of a declared histogram x.
  auto family_of_sample = [&](const std::string& name) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!EndsWith(name, suffix)) continue;
      auto it = index.find(name.substr(0, name.size() - suffix.size()));
      if (it == index.end()) continue;
      const std::string& type = families[it->second].type;
      if (type == "histogram" || (type == "summary" && suffix != "_bucket")) return it->second;
    }
    return family(name);
  };

  size_t line_no = 0;
  size_t pos = 0;
  while (pos < page.size()) {
    const size_t end = page.find('\n', pos);
    const std::string_view line = page.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    auto fail = [&](const std::string& why) {
      return Status::Error("line " + std::to_string(line_no) + ": " + why + ": " + std::string(line));
    };
    if (line.find('\r') != std::string_view::npos) return fail("a carriage return");
    Cursor c(line);
    c.SkipBlanks();
    if (c.done()) continue;  // blank lines are allowed

    if (c.Consume('#')) {
      c.SkipBlanks();
      const std::string_view keyword = c.Token();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a comment
      if (!c.SkipBlanks()) return fail("no metric name after " + std::string(keyword));
      const std::string name(c.Name(/*with_colon=*/true));
      if (name.empty() || (!c.done() && !IsBlank(c.peek()))) return fail("a bad metric name");
      const size_t f = family(name);
      if (!families[f].samples.empty()) return fail(std::string(keyword) + " after the samples of " + name);
      current = f;
      if (keyword == "HELP") {
        if (states[f].help) return fail("a second HELP for " + name);
        states[f].help = true;
        c.SkipBlanks();
        const Status s = ReadHelp(c, families[f].help);
        if (!s.ok()) return fail(s.message());
        continue;
      }
      if (states[f].type) return fail("a second TYPE for " + name);
      states[f].type = true;
      c.SkipBlanks();
      const std::string type(c.Token());
      c.SkipBlanks();
      if (!c.done()) return fail("text after the type");
      if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped") {
        return fail("an unknown type '" + type + "'");
      }
      families[f].type = type;
      continue;
    }

    PromSample sample;
    sample.name = std::string(c.Name(/*with_colon=*/true));
    if (sample.name.empty()) return fail("a bad metric name");
    if (c.Consume('{')) {
      for (;;) {
        c.SkipBlanks();
        if (c.Consume('}')) break;
        const std::string label(c.Name(/*with_colon=*/false));
        if (label.empty()) return fail("a bad label name");
        if (label.rfind("__", 0) == 0) return fail("a reserved label name " + label);
        if (sample.Label(label) != nullptr) return fail("label " + label + " twice");
        c.SkipBlanks();
        if (!c.Consume('=')) return fail("no = after label " + label);
        c.SkipBlanks();
        if (!c.Consume('"')) return fail("label " + label + " has no quoted value");
        std::string value;
        const Status s = ReadLabelValue(c, value);
        if (!s.ok()) return fail(s.message());
        sample.labels.emplace_back(label, std::move(value));
        c.SkipBlanks();
        if (c.Consume(',')) continue;
        if (c.Consume('}')) break;
        return fail("no , or } after label " + label);
      }
    }
    if (!c.SkipBlanks()) return fail("no blank before the value");
    const std::string_view value = c.Token();
    if (!ParseFloat(value, sample.value)) return fail("a bad value '" + std::string(value) + "'");
    if (c.SkipBlanks() && !c.done()) {
      static const std::regex timestamp("-?[0-9]+");
      if (!std::regex_match(std::string(c.Token()), timestamp)) return fail("a bad timestamp");
      c.SkipBlanks();
    }
    if (!c.done()) return fail("text after the value");

    const size_t f = family_of_sample(sample.name);
    if (f != current && !families[f].samples.empty()) return fail("samples of " + families[f].name + " are not together");
    current = f;
    if (!series.insert(sample.name + '\x03' + LabelKey(sample)).second) return fail("a repeated series");
    families[f].samples.push_back(std::move(sample));
  }
  for (const PromFamily& f : families) MLA_RETURN_IF_ERROR(CheckFamily(f));
  return families;
}

}  // namespace mlaserve::testing
