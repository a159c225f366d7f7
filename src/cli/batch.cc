// mlaserve batch: regenerate the answers of a JSONL file of conversations, exactly once per
// record, through running servers (--endpoint, repeatable) or an in-process engine
// (--model-path). Progress lives in OUT.progress.db (batch/progress_db.h); the input is streamed
// and indexed there once (batch/input_file.h); the output is written only from done records
// (batch/output_writer.h) and checked against the DB at start-up (batch/reconcile.h); kill either
// side at any moment and rerun the same command. docs/batch.md has the design and the figures.
// Threads: the runner's workers generate; a progress thread prints; a signal thread turns
// SIGINT / SIGTERM into a stop request; the main thread waits.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "batch/batch_dashboard.h"
#include "batch/batch_runner.h"
#include "batch/endpoint_pool.h"
#include "batch/engine_generator.h"
#include "batch/hidden_dump.h"
#include "batch/http_generator.h"
#include "batch/input_file.h"
#include "batch/output_writer.h"
#include "batch/progress_db.h"
#include "batch/reconcile.h"
#include "batch/records.h"
#include "batch/remote_tokenizer.h"
#include "batch/run_gate.h"
#include "batch/work_queue.h"
#include "chat/reasoning_parser.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_setup.h"
#include "core/read_file.h"
#include "dist/mpi_group.h"
#include "engine/cpu_model_runner.h"
#include "model/config.h"
#include "server/dashboard.h"
#include "server/http_server.h"

namespace mlaserve::cli {
namespace {

using batch::Clock;
using nlohmann::json;

constexpr int kControlTimeoutMs = 5'000;  // /health, /get_model_info, /get_server_info

struct BatchFlags {
  std::string input, output, errors, tokenizer, model, chat_template;
  std::vector<std::string> endpoints;
  bool ordered = true;
  bool dry_run = false;
  bool accept_existing = false;
  bool retry_failed = true;
  double server_wait_report_s = 300;
  double request_timeout_s = 600;
  double progress_interval_s = 10;
  int dashboard_port = -1;             // --dashboard-port (-1: no dashboard; 0: an ephemeral port)
  std::string dashboard_host = "127.0.0.1";
  batch::RunnerOptions runner;
  std::optional<chat::ReasoningFormat> reasoning_parser;
  bool strip_reasoning = false;
  std::string dump_hidden_states;  // --dump-hidden-states DIR ("": off)
  std::vector<int> hidden_layers;  // --hidden-layers, resolved
};

std::string ErrorsPathFor(const std::string& output) {
  const std::string ext = ".jsonl";
  if (output.size() > ext.size() && output.compare(output.size() - ext.size(), ext.size(), ext) == 0) {
    return output.substr(0, output.size() - ext.size()) + ".errors.jsonl";
  }
  return output + ".errors.jsonl";
}

// What binds a progress DB to its job, besides the input: everything that changes an answer.
std::string SettingsText(const BatchFlags& f) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "max_new_tokens=%d temperature=%g top_p=%g seed=%llu %s",
                f.runner.max_new_tokens, f.runner.temperature, f.runner.top_p, (unsigned long long)f.runner.seed,
                f.ordered ? "ordered" : "unordered");
  std::string text = std::string(buf) + (f.model.empty() ? "" : " model=" + f.model);
  if (f.reasoning_parser) {
    text += " reasoning_parser=" + std::string(chat::ReasoningFormatName(*f.reasoning_parser));
    if (f.strip_reasoning) text += " strip_reasoning";
  }
  if (!f.dump_hidden_states.empty()) text += " hidden_layers=" + batch::JoinLayers(f.hidden_layers);
  return text;
}

// The errors file is rewritten whole each run: the input's problems, then the failed records.
Status WriteErrors(const std::string& path, batch::ProgressDb& db) {
  auto problems = db.Problems();
  if (!problems.ok()) return problems.status();
  auto failed = db.Failed();
  if (!failed.ok()) return failed.status();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const batch::InputProblem& p : *problems) {
      json j{{"line", p.line_no}, {"error", p.reason}};
      if (!p.id.empty()) j["id"] = p.id;
      out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
    for (const batch::RecordProgress& p : *failed) {
      out << json{{"line", p.line_no}, {"id", p.id}, {"error", p.error}}.dump(-1, ' ', false,
                                                                              json::error_handler_t::replace)
          << "\n";
    }
    if (!out) return Status::Error(path + ": cannot write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::Error(path + ": cannot replace");
  return Status::Ok();
}

void PrintSummary(const std::string& input, const batch::InputSummary& s) {
  std::fprintf(stderr,
               "batch: %s: %d lines, %lld records (%d chat, %d sharegpt, %d prompt; %lld answers to generate), %lld "
               "problems\n",
               input.c_str(), s.num_lines, (long long)s.num_records, s.shapes[0], s.shapes[1], s.shapes[2],
               (long long)s.answers, (long long)s.num_problems);
}

// The input's index in the DB: reused when the DB has one for this very input (its hash was
// checked by BindJob), else built by one streamed pass.
Result<batch::InputSummary> IndexedInput(const std::string& input, batch::ProgressDb& db) {
  auto summary = db.Summary();
  if (!summary.ok()) return summary.status();
  if (*summary) return **summary;
  return batch::IndexInput(input, db);
}

void PrintReconciliation(const std::string& output, const batch::ProgressDb& db, const batch::ReconcileReport& r) {
  if (r.truncated_bytes > 0) {
    std::fprintf(stderr, "batch: %s: cut a partial last line (%lld bytes) left by a killed run\n", output.c_str(),
                 (long long)r.truncated_bytes);
  }
  if (r.lost > 0) {
    std::fprintf(stderr, "batch: %s lost %lld line(s) that the progress DB had as written; those records are "
                         "generated again\n", output.c_str(), (long long)r.lost);
  }
  if (r.adopted > 0) {
    std::fprintf(stderr, "batch: %s %lld line(s) of %s adopted as results%s\n",
                 db.created() ? "progress DB rebuilt from the output file:" : "progress DB behind the output file:",
                 (long long)r.adopted, output.c_str(),
                 r.accepted_other_settings > 0
                     ? (" (" + std::to_string(r.accepted_other_settings) + " with other settings, --accept-existing)").c_str()
                     : "");
  }
}

std::string Clock_(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "--:--";
  const long s = long(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// The run's dashboard (batch/batch_dashboard.h) on an HTTP server of its own: GET /dashboard (the
// server's page) and GET /dashboard/data; anything else is a 404.
Result<std::unique_ptr<HttpServer>> StartBatchDashboard(const std::string& host, int port, const batch::RunnerStats& stats,
                                                        Clock::time_point started) {
  HttpServerOptions options;
  options.host = host;
  options.port = port;
  options.max_connections = 64;
  options.max_handler_threads = 8;
  auto server = HttpServer::Start(options, [&stats, started](const HttpRequest& r, HttpResponseWriter& w) {
    if (r.method != "GET") return w.Send(405, "application/json", JsonError(405, "method " + r.method + " is not allowed", JsonErrorType(405)));
    if (r.path == "/dashboard") return w.Send(200, "text/html; charset=utf-8", DashboardPage(), {{"Cache-Control", "no-store"}});
    if (r.path == "/dashboard/data") {
      return w.Send(200, "application/json", batch::BatchDashboardData(stats, started, Clock::now()).dump());
    }
    w.Send(404, "application/json", JsonError(404, "no route for GET " + r.path + " (the batch dashboard has /dashboard)", JsonErrorType(404)));
  });
  if (!server.ok()) return server.status();
  std::fprintf(stderr, "batch: dashboard on http://%s:%d/dashboard\n", host.c_str(), (*server)->port());
  return server;
}

// Prints progress until stopped: a redrawn bar on a terminal, plain lines every interval otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter(const batch::RunnerStats& stats, double interval_s)
      : stats_(stats), tty_(isatty(STDERR_FILENO) != 0), interval_s_(tty_ ? 0.5 : interval_s) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressPrinter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (tty_) std::fputs("\n", stderr);
  }

 private:
  void Loop() {
    const Clock::time_point t0 = Clock::now();
    const int done_at_start = stats_.done;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stop_; })) {
      const double elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const int done = stats_.done, total = stats_.total, failed = stats_.failed;
      const double rate = double(done - done_at_start) / std::max(elapsed_s, 1e-9);
      const double eta_s = rate > 0 ? double(total - done - failed) / rate : -1;
      const double tok_s = double(stats_.new_tokens) / std::max(elapsed_s, 1e-9);
      const std::string outage = OutageText();
      const std::string eta = outage.empty() ? Clock_(eta_s) : "paused";  // no rate to project from
      if (tty_) {
        const int width = 30;
        const int filled = total > 0 ? int(double(done + failed) / total * width) : width;
        std::fprintf(stderr, "\r[%s%s] %d/%d done, %d running, %.1f tok/s, ETA %s, %d errors%s ",
                     std::string(size_t(filled), '=').c_str(), std::string(size_t(width - filled), ' ').c_str(), done,
                     total, int(stats_.running), tok_s, eta.c_str(), failed, outage.c_str());
      } else {
        std::fprintf(stderr, "batch: %d/%d done, %d running, %.1f tok/s, ETA %s, %d errors%s\n", done, total,
                     int(stats_.running), tok_s, eta.c_str(), failed, outage.c_str());
      }
      std::fflush(stderr);
    }
  }

  // ", paused: no server for 12 s" while the run waits for one.
  std::string OutageText() const {
    const int64_t since_ms = stats_.down_since_ms;
    if (since_ms == 0) return "";
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
    return ", paused: no server for " + std::to_string((now_ms - since_ms) / 1000) + " s";
  }

  const batch::RunnerStats& stats_;
  bool tty_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// SIGINT / SIGTERM, blocked in every thread (RunBatch blocks them before any thread starts) and
// taken here: the first stops the run (no new records; running ones are checkpointed and stay
// running; the summary prints), a second exits at once (like kill -9: the DB's last checkpoint
// stands).
class StopOnSignal {
 public:
  explicit StopOnSignal(batch::RunGate& gate) : gate_(gate) { thread_ = std::thread([this] { Loop(); }); }
  ~StopOnSignal() {
    done_ = true;
    thread_.join();
  }
  int signal() const { return signal_; }  // the first one taken; 0: none

 private:
  void Loop() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const timespec tick{.tv_sec = 0, .tv_nsec = 100'000'000};  // how soon the destructor is noticed
    while (!done_) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig <= 0) continue;
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (signal_ != 0) {
        std::fprintf(stderr, "\nbatch: second signal (%s): exiting now; rerun the same command to resume\n", name);
        std::_Exit(128 + sig);
      }
      signal_ = sig;
      std::fprintf(stderr, "\nbatch: %s: stopping: no new records, the running ones keep their tokens "
                           "(a second signal exits at once)\n", name);
      gate_.RequestStop();
    }
  }

  batch::RunGate& gate_;
  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;
};

std::string JoinUrls(const std::vector<std::string>& urls) {
  std::string out;
  for (const std::string& u : urls) out += (out.empty() ? "" : ", ") + u;
  return out;
}

Result<std::string> ModelTypeFromDir(const std::string& dir) {
  auto text = ReadWholeFile(dir + "/config.json");
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("model_type")) return std::string();
  if (!j["model_type"].is_string()) return Status::Error(dir + "/config.json: field 'model_type' must be a string");
  return j["model_type"].get<std::string>();
}

struct BatchTokenizer {
  Tokenizer tokenizer;
  std::string model_type;  // from the tokenizer directory's config.json, when read from disk
  std::optional<ChatTemplate> chat_template;
};

// --tokenizer DIR if given; else what the server serves (GET /tokenizer_file/..., mlaserve's);
// else the tokenizer_path / model_path it reports, read from disk (an SGLang server on this machine).
Result<BatchTokenizer> LoadBatchTokenizer(const std::string& flag_dir, const batch::EndpointInfo& info,
                                          const HttpHeaders& headers, const std::string& chat_template_file) {
  std::string dir = flag_dir;
  if (dir.empty()) {
    auto fetched = batch::FetchTokenizer(info.base_url, headers, kControlTimeoutMs, info.model_type, chat_template_file);
    if (fetched.ok()) {
      return BatchTokenizer{.tokenizer = std::move(fetched->tokenizer), .chat_template = std::move(fetched->chat_template)};
    }
    std::fprintf(stderr, "batch: %s; reading the tokenizer from the tokenizer_path (else model_path) it reports\n",
                 fetched.error().c_str());
    dir = !info.tokenizer_path.empty() ? info.tokenizer_path : info.model_path;
  }
  if (dir.empty()) return Status::Error("the server does not report its model_path: give --tokenizer DIR");
  auto t = Tokenizer::FromDirectory(dir);
  if (!t.ok()) return Status::Error(t.error() + " (give --tokenizer DIR: a directory with the model's tokenizer)");
  auto model_type = ModelTypeFromDir(dir);
  const std::string type = model_type.ok() ? *model_type : info.model_type;
  auto chat_template = ChatTemplate::ForModel(dir, chat_template_file, *t, !info.model_type.empty() ? info.model_type : type);
  if (!chat_template.ok()) return chat_template.status();
  return BatchTokenizer{.tokenizer = std::move(t).value(), .model_type = type, .chat_template = std::move(chat_template).value()};
}

// Resume continues an interrupted record from its checkpointed tokens: bit-identical to an
// uninterrupted run only on servers in deterministic mode. One line names those that are not
// (or do not say: an older server, or one not reached yet).
void WarnIfNotDeterministic(const batch::EndpointPool& endpoints, size_t num_endpoints) {
  std::string names;
  for (size_t i = 0; i < num_endpoints; ++i) {
    const batch::EndpointInfo info = endpoints.info(i);
    if (info.deterministic != true) names += (names.empty() ? "" : ", ") + info.base_url;
  }
  if (names.empty()) return;
  std::fprintf(stderr,
               "batch: warning: not in deterministic mode (/get_server_info's enable_deterministic_inference is not "
               "true): %s; a record resumed mid-generation continues validly but may differ from an uninterrupted "
               "run (no record is lost or repeated; serve with --enable-deterministic-inference for identical "
               "continuations)\n",
               names.c_str());
}

}  // namespace

int RunBatch(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args, ForwardSize::kEngineStep);
  EngineOptions engine_options = ReadEngineFlags(args, model_flags);
  BatchFlags f;
  f.input = args.Str("input", "", "JSONL of conversations (required)", {.value_name = "IN.jsonl"});
  f.output = args.Str("output", "", "JSONL of answers; progress in OUT.jsonl.progress.db (required)",
                      {.value_name = "OUT.jsonl"});
  f.endpoints = args.All("endpoint", "a running server (or give --model-path)", {.value_name = "URL"});
  f.errors = args.Str("errors", "", "input problems and failed records", {.value_name = "FILE",
                                                                          .shown_default = "OUT.errors.jsonl"});
  f.tokenizer = args.Str("tokenizer", "", "tokenizer directory for --endpoint",
                         {.value_name = "DIR", .shown_default = "the model_path the server reports"});
  f.chat_template = args.Str("chat-template", "", "a Jinja chat template file to render prompts with",
                             {.value_name = "FILE", .shown_default = "the server's, or the model's"});
  f.model = args.Str("model", "", "the model name sent and written in settings",
                     {.shown_default = "what the server reports"});
  const bool unordered = args.Switch("unordered", "write lines in completion order");
  const bool ordered_flag = args.Switch("ordered", "write lines in input order (the default)");
  f.ordered = !unordered;
  f.dry_run = args.Switch("dry-run", "validate the input and print the counts; contact no one");
  f.accept_existing = args.Switch("accept-existing",
                                  "keep output lines the progress DB lacks even if made with other settings");
  f.request_timeout_s = args.Double("request-timeout", 600, "seconds per request to --endpoint servers",
                                    {.value_name = "S", .above = 0});
  f.progress_interval_s = args.Double("progress-interval", 10, "seconds between progress lines off a terminal",
                                      {.value_name = "S", .above = 0});
  f.dashboard_port = args.Int("dashboard-port", -1,
                              "serve the run's live dashboard at http://HOST:PORT/dashboard; 0: an ephemeral port, "
                              "printed; -1: none",
                              {.value_name = "PORT", .min = -1, .max = 65535});
  f.dashboard_host = args.Str("dashboard-host", "127.0.0.1", "address the dashboard listens on",
                              {.value_name = "HOST"});
  f.runner.concurrency = args.Int("concurrency", 8, "requests in flight", {.min = 1});
  f.runner.max_new_tokens = args.Int("max-new-tokens", 256, "tokens per answer at most", {.min = 1});
  f.runner.temperature = args.Double("temperature", 0.0, "0: greedy", {.min = 0});
  f.runner.top_p = args.Double("top-p", 1.0, "nucleus sampling mass", {.above = 0, .max = 1});
  f.runner.seed = uint64_t(args.Int64("seed", 0, "each record samples with a hash of this and its id"));
  f.runner.max_retries = args.Int("max-retries", 3, "retries of a failed record", {.min = 0});
  f.server_wait_report_s = args.Double(
      "server-wait-timeout", 300,
      "while no server answers, the run waits (however long) and says so again every S seconds",
      {.value_name = "S", .above = 0});
  f.retry_failed = !args.Switch("no-retry-failed", "keep records that failed in an earlier run failed");
  // Above zero: every checkpoint is a DB transaction, and 0 would make that one per token.
  f.runner.checkpoint_interval_s = args.Double("checkpoint-interval", 0.2, "seconds between progress DB checkpoints",
                                               {.value_name = "S", .min = 0.01});
  const std::optional<std::string> reasoning_parser = args.OptStr(
      "reasoning-parser",
      "how the model marks its reasoning: OpenAI-messages output gets it in reasoning_content, apart from content",
      {.value_name = "NAME", .choices = {"deepseek-r1", "kimi"}});
  f.strip_reasoning = args.Switch("strip-reasoning", "write the answers without their reasoning (needs --reasoning-parser)");
  f.dump_hidden_states = args.Str(
      "dump-hidden-states", "",
      "also write each record's hidden states (EAGLE-3 training data) into DIR, from the same run (--model-path only)",
      {.value_name = "DIR"});
  const std::string hidden_layers = args.Str(
      "hidden-layers", "auto", "with --dump-hidden-states: the residual stream entering these layers; auto: SGLang's "
      "EAGLE-3 default [2, L/2, L-3]", {.value_name = "auto|i,j,k"});
  if (reasoning_parser) f.reasoning_parser = *chat::ReasoningFormatFromName(*reasoning_parser);
  if (f.strip_reasoning && !reasoning_parser) args.Reject("--strip-reasoning needs --reasoning-parser NAME");
  if (f.input.empty()) args.Reject("--input IN.jsonl is required");
  if (f.output.empty() && !f.dry_run) args.Reject("--output OUT.jsonl is required");
  if (ordered_flag && unordered) args.Reject("give --ordered or --unordered, not both");
  const bool in_process = !model_flags.model_path.empty();
  if (!f.dry_run && in_process == !f.endpoints.empty()) {
    args.Reject("give --endpoint URL (repeatable) or --model-path DIR (in-process), not both");
  }
  if (in_process && !f.tokenizer.empty()) {
    args.Reject("--tokenizer is for --endpoint runs; in process the tokenizer is --model-path's");
  }
  if (!in_process && !f.dry_run && args.WasGiven("enable-deterministic-inference")) {
    args.Reject("--enable-deterministic-inference is the server's mode with --endpoint: start the server with it "
                "(batch reads /get_server_info and warns when a server runs without it)");
  }
  if (in_process && args.WasGiven("request-timeout")) {
    args.Reject("--request-timeout is for --endpoint runs; in process no request times out");
  }
  if (args.WasGiven("hidden-layers") && f.dump_hidden_states.empty()) {
    args.Reject("--hidden-layers needs --dump-hidden-states DIR");
  }
  if (args.WasGiven("dashboard-host") && f.dashboard_port < 0) args.Reject("--dashboard-host needs --dashboard-port");
  if (f.dry_run && f.dashboard_port >= 0) args.Reject("--dashboard-port: a --dry-run has no run to show");
  if (!f.dump_hidden_states.empty() && engine_options.speculative_algorithm == "EAGLE3") {
    args.Reject("--dump-hidden-states cannot be combined with --speculative-algorithm EAGLE3 (both capture target "
                "layers; generate the training data without the draft)");
  }
  if (!f.dump_hidden_states.empty() && !f.dry_run) {
    if (!in_process) {
      args.Reject("--dump-hidden-states needs the in-process engine (--model-path DIR): a server (--endpoint) does "
                  "not return hidden states");
    } else if (model_flags.tp_size > 1) {
      args.Reject("--dump-hidden-states is not supported with tensor parallelism (--tp-size > 1)");
    } else if (auto config = LoadModelConfig(model_flags.model_path); config.ok()) {
      auto layers = batch::ResolveHiddenLayers(hidden_layers, config->num_hidden_layers);
      if (layers.ok()) {
        f.hidden_layers = std::move(layers).value();
      } else {
        args.Reject(layers.error());
      }
    }  // (an unreadable config is reported when the model loads)
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  if (f.errors.empty()) f.errors = ErrorsPathFor(f.output);

  // The input, streamed: a dry run only checks it.
  if (f.dry_run) {
    auto summary = batch::CheckInput(f.input, [&](const batch::InputProblem& p) {
      std::fprintf(stderr, "batch: %s:%d: %s\n", f.input.c_str(), p.line_no, p.reason.c_str());
    });
    if (!summary.ok()) return Fail("batch", summary.error());
    PrintSummary(f.input, *summary);
    std::printf("dry run: %d lines, %lld valid records, %lld answers, %lld problems\n", summary->num_lines,
                (long long)summary->num_records, (long long)summary->answers, (long long)summary->num_problems);
    return summary->num_problems == 0 ? 0 : 1;
  }

  // From here on SIGINT / SIGTERM stop the run cleanly (StopOnSignal); blocked before any
  // thread starts, so that every thread inherits the mask and only the watcher takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::unique_ptr<batch::EndpointPool> endpoints;
  batch::RunnerStats stats;
  const auto note = [](const std::string& line) { std::fprintf(stderr, "batch: %s\n", line.c_str()); };
  batch::RunGate gate([&endpoints] { return endpoints == nullptr || endpoints->WaitHealthy(Clock::now()); },
                      JoinUrls(f.endpoints), f.server_wait_report_s, note, stats);
  StopOnSignal stop_on_signal(gate);

  // A tensor-parallel job loads the model first, on every rank together: ranks 1.. only serve
  // rank 0's forward calls (LoadModel does not return on them), and once they do, any return of
  // rank 0 (a locked output, nothing left to do) stops them. The output and the progress DB are
  // rank 0's alone.
  std::optional<LoadedModel> loaded;
  if (in_process && model_flags.tp_size > 1) {
    // Resume continues an interrupted record from its checkpointed tokens; only batch- and
    // chunk-invariant logits make that continuation the one an uninterrupted run would write.
    model_flags.options.deterministic = true;
    auto l = LoadModel(model_flags, /*need_tokenizer=*/true);
    if (!l.ok()) return Fail("batch", l.error());
    loaded = std::move(l).value();
  }
  // The dashboard from here on (rank 0's alone: the others never get here), so that it shows a
  // wait for the first server too.
  std::unique_ptr<HttpServer> dashboard;
  if (f.dashboard_port >= 0) {
    auto d = StartBatchDashboard(f.dashboard_host, f.dashboard_port, stats, Clock::now());
    if (!d.ok()) return Fail("batch", "--dashboard-port: " + d.error());
    dashboard = std::move(d).value();
  }

  // The output first: its lock refuses a second concurrent run before anything is written.
  auto writer = batch::OutputWriter::Open(f.output, f.ordered);
  if (!writer.ok()) return Fail("batch", writer.error());

  // The progress DB, bound to this input and these settings, with the input indexed.
  auto db = batch::ProgressDb::Open(f.output + ".progress.db");
  if (!db.ok()) return Fail("batch", db.error());
  auto input_hash = batch::HashFile(f.input);
  if (!input_hash.ok()) return Fail("batch", input_hash.error());
  const std::string settings_text = SettingsText(f);
  if (Status s = (*db)->BindJob(batch::Hex64(*input_hash), batch::Hex64(batch::Fnv1a64(settings_text)), settings_text);
      !s.ok()) {
    return Fail("batch", s.message(), 2);
  }
  auto summary = IndexedInput(f.input, **db);
  if (!summary.ok()) return Fail("batch", summary.error());
  PrintSummary(f.input, *summary);

  // Reconciled with the output, and what the DB already has written, before any server.
  f.runner.output = {.model = f.model, .seed = f.runner.seed, .temperature = f.runner.temperature,
                     .top_p = f.runner.top_p, .max_new_tokens = f.runner.max_new_tokens,
                     .reasoning_parser = f.reasoning_parser, .strip_reasoning = f.strip_reasoning};
  auto report = batch::Reconcile(**writer, **db, {.settings = f.runner.output, .check_model = !f.model.empty(),
                                                   .accept_existing = f.accept_existing});
  if (!report.ok()) return Fail("batch", report.error(), 2);
  PrintReconciliation(f.output, **db, *report);
  (*writer)->set_on_written([&db](const batch::WrittenLine& w) { return (*db)->MarkWritten({&w, 1}); });
  if (f.retry_failed) {
    auto retried = (*db)->RetryFailed();
    if (!retried.ok()) return Fail("batch", retried.error());
    if (*retried > 0) {
      std::fprintf(stderr, "batch: retrying %d records that failed in an earlier run (--no-retry-failed keeps them "
                           "failed)\n", *retried);
    }
  }
  // The hidden-state files, reconciled with the DB's done records before anything is generated.
  std::unique_ptr<batch::HiddenStateDump> dump;
  if (!f.dump_hidden_states.empty()) {
    auto config = LoadModelConfig(model_flags.model_path);
    if (!config.ok()) return Fail("batch", config.error());
    auto opened = batch::HiddenStateDump::Open({.dir = f.dump_hidden_states,
                                                .owner = std::filesystem::absolute(f.output).lexically_normal().string(),
                                                .layers = f.hidden_layers,
                                                .hidden_size = int(config->hidden_size),
                                                .model_path = model_flags.model_path},
                                               **db, note);
    if (!opened.ok()) return Fail("batch", opened.error(), 2);
    dump = std::move(opened).value();
    f.runner.dump = dump.get();
  }
  batch::WorkQueue queue(**db, **writer);
  if (Status s = queue.WriteFinished(); !s.ok()) return Fail("batch", s.message());
  auto counts = (*db)->Counts();
  if (!counts.ok()) return Fail("batch", counts.error());
  if (counts->pending + counts->running == 0) {
    if (Status s = WriteErrors(f.errors, **db); !s.ok()) return Fail("batch", s.message());
    std::printf("batch: nothing to do: all %lld records are finished (%lld in %s, %lld failed; problems and failures "
                "in %s)\n",
                (long long)counts->total(), (long long)(counts->written + counts->done), f.output.c_str(),
                (long long)counts->failed, f.errors.c_str());
    return counts->failed == 0 && counts->done == 0 ? 0 : 1;
  }
  auto input_file = batch::InputFile::Open(f.input);
  if (!input_file.ok()) return Fail("batch", input_file.error());

  // Who generates.
  EngineKv kv;
  EngineDrafter drafter;  // speculative decoding's drafter (outlives the engine)
  std::unique_ptr<CpuModelRunner> model_runner;
  std::unique_ptr<Engine> engine;
  std::optional<Tokenizer> own_tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<batch::TurnGenerator> generator;
  const Tokenizer* tokenizer = nullptr;
  std::string model_type;
  if (in_process) {
    engine_options.log_batches = false;
    // (See above: deterministic, for resume.)
    model_flags.options.deterministic = true;
    if (dump) {
      // A position served from the prefix cache is never run, so it would have no hidden states.
      model_flags.options.capture_layers = f.hidden_layers;
      engine_options.disable_radix_cache = true;
      std::fprintf(stderr, "batch: --dump-hidden-states: radix cache off (every position of each record is run "
                           "once, so every one has its hidden states), layers [%s]\n",
                   batch::JoinLayers(f.hidden_layers).c_str());
    }
    if (!loaded) {
      auto l = LoadModel(model_flags, /*need_tokenizer=*/true);
      if (!l.ok()) return Fail("batch", l.error());
      loaded = std::move(l).value();
    }
    const ModelConfig& c = loaded->model->config();
    auto created_kv = CreateEngineKv(*loaded, model_flags.page_size);
    if (!created_kv.ok()) return Fail("batch", created_kv.error());
    kv = std::move(created_kv).value();
    auto attached = AttachDrafter(engine_options, *loaded, kv);
    if (!attached.ok()) return Fail("batch", attached.error());
    drafter = std::move(attached).value();
    model_runner = std::make_unique<CpuModelRunner>(*loaded->model, *loaded->kernels, *kv.storage);
    engine = std::make_unique<Engine>(*model_runner, *kv.allocator, engine_options, &*loaded->tokenizer);
    engine->Start();
    tokenizer = &*loaded->tokenizer;
    model_type = c.model_type;
    auto ct = ChatTemplate::ForModel(TokenizerPath(model_flags), f.chat_template, *tokenizer, model_type);
    if (!ct.ok()) return Fail("batch", ct.error(), 2);
    chat_template = std::move(ct).value();
    if (f.runner.output.model.empty()) f.runner.output.model = model_flags.model_path;
    generator = std::make_unique<batch::EngineGenerator>(
        *engine, batch::Serving{.kv_cache_dtype = KvFormatName(loaded->kv_cache.kv_format),
                                .model = model_flags.model_path,
                                .server_id = "in-process"});
    std::fprintf(stderr,
                 "batch: in-process engine on %s, kv_cache_dtype=%s, deterministic inference on (set by batch: a "
                 "resumed record continues exactly as an uninterrupted run)\n",
                 model_flags.model_path.c_str(), KvFormatName(loaded->kv_cache.kv_format));
  } else {
    HttpHeaders headers = {{"Content-Type", "application/json"}};
    if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
      headers.emplace_back("Authorization", std::string("Bearer ") + key);
    }
    endpoints = std::make_unique<batch::EndpointPool>(f.endpoints, headers, kControlTimeoutMs);
    endpoints->set_note(note);
    if (gate.AwaitServer() == batch::RunGate::Wait::kStopped) {
      std::printf("batch: stopped before any server answered; nothing was sent\n");
      return 128 + stop_on_signal.signal();
    }
    if (Status s = endpoints->Discover(Clock::now()); !s.ok()) return Fail("batch", s.message());
    const batch::EndpointInfo info = endpoints->first_healthy();
    auto t = LoadBatchTokenizer(f.tokenizer, info, headers, f.chat_template);
    if (!t.ok()) return Fail("batch", t.error(), 2);
    own_tokenizer = std::move(t->tokenizer);
    chat_template = std::move(t->chat_template);
    tokenizer = &*own_tokenizer;
    model_type = !info.model_type.empty() ? info.model_type : t->model_type;
    if (f.runner.output.model.empty()) {
      f.runner.output.model = !info.served_model_name.empty() ? info.served_model_name : info.model_path;
    }
    if (!info.native) {
      std::fprintf(stderr, "batch: %s has no SGLang-native /generate: using /v1/chat/completions; an interrupted "
                           "record is restarted there, not continued\n", info.base_url.c_str());
    }
    WarnIfNotDeterministic(*endpoints, f.endpoints.size());
    generator = std::make_unique<batch::HttpGenerator>(*endpoints, *tokenizer, f.request_timeout_s, f.model);
    std::fprintf(stderr, "batch: %zu endpoint(s), first %s (kv_cache_dtype=%s), concurrency %d\n",
                 f.endpoints.size(), info.base_url.c_str(), info.kv_format.c_str(), f.runner.concurrency);
  }
  if (!chat_template) chat_template = ChatTemplate::Builtin(ChatFormatFor(*tokenizer, model_type));
  std::fprintf(stderr, "batch: chat template: %s\n", chat_template->origin().c_str());

  stats.total = int(counts->total());
  stats.done = int(counts->written + counts->done);
  stats.failed = int(counts->failed);
  const Clock::time_point t0 = Clock::now();
  Status run_status;
  {
    batch::BatchRunner runner(**input_file, queue, *generator, **db, **writer, *tokenizer, *chat_template, f.runner,
                              stats, gate);
    ProgressPrinter printer(stats, f.progress_interval_s);
    run_status = runner.Run();
  }
  if (engine) engine->Stop();
  const double duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const batch::RunFigures figures{.records_done = stats.done_this_run,
                                  .records_failed = stats.failed_this_run,
                                  .interruptions = stats.interruptions,
                                  .continued = stats.continued,
                                  .restarted = stats.restarted,
                                  .time_lost_s = double(stats.outage_ms) / 1000.0,
                                  .output_tokens = stats.new_tokens,
                                  .duration_s = duration_s};
  if (Status s = (*db)->RecordRun(figures); !s.ok()) std::fprintf(stderr, "batch: %s\n", s.message().c_str());
  if (Status s = WriteErrors(f.errors, **db); !s.ok()) std::fprintf(stderr, "batch: %s\n", s.message().c_str());
  if (dump) {
    if (Status s = dump->WriteIndex(); !s.ok()) std::fprintf(stderr, "batch: %s\n", s.message().c_str());
  }
  std::printf("batch: %d records: %d done, %d failed; %lld input problems (errors in %s)\n", int(stats.total),
              int(stats.done), int(stats.failed), (long long)summary->num_problems, f.errors.c_str());
  std::printf("batch: this run: %d done, %d failed, %lld tokens in %.1f s (%.1f tok/s, %.2f records/s)\n",
              figures.records_done, figures.records_failed, (long long)figures.output_tokens, duration_s,
              double(figures.output_tokens) / std::max(duration_s, 1e-9),
              double(figures.records_done) / std::max(duration_s, 1e-9));
  std::printf("batch: interruptions %d: continued %d, restarted %d; no server answered %d times, for %.1f s "
              "(wall time); %d records resumed from a killed run's checkpoint\n",
              figures.interruptions, figures.continued, figures.restarted, int(stats.outages), figures.time_lost_s,
              int(stats.resumed_from_checkpoint));
  if (!run_status.ok()) return Fail("batch", run_status.message());
  if (const int sig = stop_on_signal.signal(); sig != 0) {
    const int unfinished = int(stats.total) - int(stats.done) - int(stats.failed);
    std::printf("batch: stopped by %s: %d records unfinished (the interrupted ones keep their tokens); rerun the "
                "same command to resume: done records are not sent again\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", unfinished);
    return 128 + sig;
  }
  return stats.failed == 0 ? 0 : 1;
}

}  // namespace mlaserve::cli
