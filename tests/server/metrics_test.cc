// The /metrics page: the strict text-format reader used to check it (it must reject what
// Prometheus rejects, or the server tests prove nothing), and ServerMetrics' page itself:
// SGLang's names and types, and label values escaped for any model name.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "support/prometheus_text.h"

namespace mlaserve {
namespace {

using testing::FindFamily;
using testing::ParsePrometheusText;

TEST(PrometheusText, AcceptsAWellFormedPage) {
  const std::string page =
      "# A comment line.\n"
      "# HELP a_total Counts \\\\ things,\\nover two lines.\n"
      "# TYPE a_total counter\n"
      "a_total{model_name=\"org/m \\\"v2\\\" \\\\ x\\ny\",} 3 1700000000000\n"
      "\n"
      "# TYPE g gauge\n"
      "g NaN\n"
      "g{k=\"\"} -1.5e-3\n"
      "g{k=\"inf\"} +Inf\n"
      "# HELP h Latency.\n"
      "# TYPE h histogram\n"
      "h_bucket{le=\"0.1\"} 1\n"
      "h_bucket{le=\"1\"} 2\n"
      "h_bucket{le=\"+Inf\"} 2\n"
      "h_sum 0.75\n"
      "h_count 2\n"
      "untyped_thing{a=\"1\",b=\"2\"} .5\n";
  auto families = ParsePrometheusText(page);
  ASSERT_TRUE(families.ok()) << families.error();
  ASSERT_EQ(families->size(), 4u);
  const auto* a = FindFamily(*families, "a_total");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, "counter");
  EXPECT_EQ(a->help, "Counts \\ things,\nover two lines.");
  ASSERT_EQ(a->samples.size(), 1u);
  EXPECT_EQ(*a->samples[0].Label("model_name"), "org/m \"v2\" \\ x\ny");
  EXPECT_EQ(a->samples[0].value, 3);
  const auto* g = FindFamily(*families, "g");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->samples.size(), 3u);
  EXPECT_TRUE(std::isnan(g->samples[0].value));
  EXPECT_EQ(g->samples[1].value, -1.5e-3);
  EXPECT_TRUE(std::isinf(g->samples[2].value));
  const auto* h = FindFamily(*families, "h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->type, "histogram");
  EXPECT_EQ(h->samples.size(), 5u);
  EXPECT_EQ(FindFamily(*families, "untyped_thing")->type, "untyped");
}

TEST(PrometheusText, RejectsMalformedPages) {
  const std::string histogram = "# TYPE h histogram\n";
  const std::map<std::string, std::string> bad = {
      // Grammar.
      {"g{model_name=\"a \"quoted\" name\"} 1\n", "no , or }"},       // unescaped quote
      {"g{model_name=\"two\nlines\"} 1\n", "no closing double quote"},  // raw line feed
      {"g{model_name=\"back\\slash\"} 1\n", "escape"},                 // lone backslash
      {"g{k=\"v\"} 1", "line feed"},
      {"1g 1\n", "bad metric name"},
      {"g-h 1\n", "no blank before the value"},
      {"g{1k=\"v\"} 1\n", "bad label name"},
      {"g{__name__=\"v\"} 1\n", "reserved"},
      {"g{k=\"a\",k=\"b\"} 1\n", "twice"},
      {"g{k=v} 1\n", "no quoted value"},
      {"g 1,5\n", "bad value"},
      {"g inf\n", "bad value"},
      {"g 1 2 3\n", "text after the value"},
      {"g 1 12.5\n", "bad timestamp"},
      {"g 1\r\n", "carriage return"},
      {"# HELP g a \\t tab\n", "HELP text"},
      {"# TYPE g gauge extra\n", "text after the type"},
      {"# TYPE g meter\n", "unknown type"},
      // Families.
      {"# TYPE g gauge\n# TYPE g gauge\n", "second TYPE"},
      {"# HELP g x\n# HELP g y\n", "second HELP"},
      {"g 1\n# TYPE g gauge\n", "after the samples"},
      {"g{k=\"1\"} 1\nh 1\ng{k=\"2\"} 1\n", "not together"},
      {"g{k=\"1\"} 1\ng{k=\"1\"} 2\n", "repeated series"},
      {"# TYPE c counter\nc 1\n", "not named *_total"},
      {"# TYPE c_total counter\nc_total -1\n", "negative"},
      // Histograms.
      {histogram + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
      {histogram + "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "not cumulative"},
      {histogram + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
       "not increasing"},
      {histogram + "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", "differs from _count"},
      {histogram + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n", "without _sum"},
      {histogram + "h_bucket 1\n", "no le label"},
      {histogram + "h_bucket{le=\"x\"} 1\n", "not a float"},
      {histogram + "h 1\n", "not _bucket, _sum or _count"},
  };
  for (const auto& [page, why] : bad) {
    auto families = ParsePrometheusText(page);
    ASSERT_FALSE(families.ok()) << "accepted:\n" << page;
    EXPECT_NE(families.error().find(why), std::string::npos) << families.error() << "\nfor:\n" << page;
  }
}

TEST(ServerMetrics, PageHasSglangNamesAndTypesAndEscapesTheModelName) {
  const std::string model = "org/model \"v2\" \\ x\nsecond line";
  ServerMetrics metrics(model);
  metrics.ObserveRequest(/*queue_s=*/0.01, /*ttft_s=*/0.2, /*e2e_s=*/1.5, /*completion_tokens=*/10);
  metrics.ObserveRequest(0.0, 0.0, 0.05, 0);  // aborted before its first token
  metrics.ObserveInterTokenLatency(0.03);
  EngineStatsSnapshot stats{.num_running_reqs = 2, .num_queue_reqs = 1, .num_used_tokens = 300, .token_usage = 0.3,
                            .gen_throughput = 12.5, .cache_hit_rate = 0.25, .prompt_tokens_total = 40,
                            .generation_tokens_total = 10, .cached_tokens_total = 10, .num_requests_total = 2,
                            .num_aborted_requests_total = 1, .num_retracted_reqs = 1,
                            .num_retracted_requests_total = 3, .max_total_num_tokens = 1000,
                            .spec_accept_length = 2.5, .spec_accept_rate = 0.375};
  const std::string page = metrics.Render(stats);
  auto families = ParsePrometheusText(page);
  ASSERT_TRUE(families.ok()) << families.error() << "\n" << page;

  const std::map<std::string, std::string> expected = {
      {"sglang:prompt_tokens_total", "counter"},
      {"sglang:generation_tokens_total", "counter"},
      {"sglang:cached_tokens_total", "counter"},
      {"sglang:num_requests_total", "counter"},
      {"sglang:num_aborted_requests_total", "counter"},
      {"sglang:num_retracted_requests_total", "counter"},
      {"sglang:num_running_reqs", "gauge"},
      {"sglang:num_queue_reqs", "gauge"},
      {"sglang:num_used_tokens", "gauge"},
      {"sglang:token_usage", "gauge"},
      {"sglang:cache_hit_rate", "gauge"},
      {"sglang:gen_throughput", "gauge"},
      {"sglang:max_total_num_tokens", "gauge"},
      {"sglang:num_retracted_reqs", "gauge"},
      {"sglang:spec_accept_length", "gauge"},
      {"sglang:spec_accept_rate", "gauge"},
      {"sglang:time_to_first_token_seconds", "histogram"},
      {"sglang:e2e_request_latency_seconds", "histogram"},
      {"sglang:time_per_output_token_seconds", "histogram"},
      {"sglang:inter_token_latency_seconds", "histogram"},
      {"sglang:queue_time_seconds", "histogram"},
  };
  std::map<std::string, std::string> got;
  for (const auto& f : *families) {
    got[f.name] = f.type;
    EXPECT_FALSE(f.help.empty()) << f.name;
    for (const auto& s : f.samples) {
      ASSERT_NE(s.Label("model_name"), nullptr) << s.name;
      EXPECT_EQ(*s.Label("model_name"), model) << s.name;
    }
  }
  EXPECT_EQ(got, expected);

  auto value = [&](const std::string& name) {
    const auto* f = FindFamily(*families, name);
    return f == nullptr || f->samples.empty() ? -1.0 : f->samples.back().value;  // _count is last
  };
  EXPECT_EQ(value("sglang:num_requests_total"), 2);
  EXPECT_EQ(value("sglang:num_aborted_requests_total"), 1);
  EXPECT_EQ(value("sglang:num_retracted_requests_total"), 3);
  EXPECT_EQ(value("sglang:num_retracted_reqs"), 1);
  EXPECT_EQ(value("sglang:token_usage"), 0.3);
  EXPECT_EQ(value("sglang:spec_accept_length"), 2.5);
  EXPECT_EQ(value("sglang:spec_accept_rate"), 0.375);
  EXPECT_EQ(value("sglang:e2e_request_latency_seconds"), 2);
  EXPECT_EQ(value("sglang:time_to_first_token_seconds"), 1);  // only the request with a token
  // Floats print as the shortest text that reads back: le="0.1", not 0.10000000000000001.
  EXPECT_NE(page.find("le=\"0.1\""), std::string::npos) << page;
}

TEST(ServerMetrics, EscapeLabelValue) {
  EXPECT_EQ(EscapeLabelValue("plain/name-1.5"), "plain/name-1.5");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace mlaserve
