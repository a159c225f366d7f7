// HttpClient against a tiny loopback server written here (one thread, one connection at a time,
// canned bytes), and bench-serving end to end against a fake SGLang/OpenAI streaming server.
#include "server/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/peer_has_read.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using namespace std::chrono_literals;

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

// Listens on 127.0.0.1 (a free port) and serves connections one after another on its own
// thread: reads one request (head and Content-Length body, 2 s at most), hands it to the
// handler, which writes whatever it likes to the socket, then closes. The destructor stops the
// thread after the current handler returns; handlers must end by themselves.
class TestServer {
 public:
  using Handler = std::function<void(int fd, const std::string& request)>;

  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~TestServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  std::string Url(const std::string& target) const {
    return "http://127.0.0.1:" + std::to_string(port_) + target;
  }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const std::string request = ReadRequest(fd);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(request);
      }
      handler_(fd, request);
      ::close(fd);
    }
  }

  static std::string ReadRequest(int fd) {
    std::string in;
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    for (;;) {
      const size_t head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t body_bytes = 0;
        const size_t cl = in.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) body_bytes = std::stoul(in.substr(cl + 16));
        if (in.size() >= head_end + 4 + body_bytes) return in;
      }
      if (std::chrono::steady_clock::now() > deadline) return in;
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return in;
      in.append(buf, size_t(n));
    }
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

std::string Chunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + std::string(data) + "\r\n";
}

TEST(HttpClientUrlTest, ParsesHostPortAndTarget) {
  auto u = HttpClient::ParseUrl("http://127.0.0.1:30000/generate");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 30000);
  EXPECT_EQ(u->target, "/generate");

  u = HttpClient::ParseUrl("HTTP://Example.com");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "Example.com");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->target, "/");

  u = HttpClient::ParseUrl("http://localhost:8080?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->target, "/?x=1");

  u = HttpClient::ParseUrl("http://h/v1/models?a=b&c=d#top");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->target, "/v1/models?a=b&c=d");

  u = HttpClient::ParseUrl("http://[::1]:8080/v1");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->target, "/v1");

  u = HttpClient::ParseUrl("http://[::1]");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->port, 80);
}

TEST(HttpClientUrlTest, RejectsWhatItCannotServe) {
  for (const char* bad : {"https://127.0.0.1/", "ftp://h/", "127.0.0.1:30000", "http://", "http://:80/",
                          "http://h:0/", "http://h:70000/", "http://h:/", "http://h:8a/", "http://a b/",
                          "http://user@h/", "http://::1/", "http://[::1/", "http://[::1]x/", ""}) {
    auto u = HttpClient::ParseUrl(bad);
    EXPECT_FALSE(u.ok()) << bad;
    if (!u.ok()) {
      EXPECT_NE(u.error().find("bad URL"), std::string::npos) << u.error();
    }
  }
  auto tls = HttpClient::ParseUrl("https://h/");
  ASSERT_FALSE(tls.ok());
  EXPECT_NE(tls.error().find("no TLS"), std::string::npos) << tls.error();
}

TEST(HttpClientTest, ContentLengthResponseAndTheRequestSent) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nX-Extra:  v  \r\n\r\nhello world");
  });
  const HttpClient client;
  auto r = client.Request("POST", server.Url("/generate?x=1"), R"({"a":1})", {{"X-Test", "yes"}}, 2000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status_code, 200);
  EXPECT_EQ(r->reason, "OK");
  EXPECT_EQ(r->body, "hello world");
  ASSERT_NE(HttpHeaderValue(r->headers, "Content-Type"), nullptr);
  EXPECT_EQ(*HttpHeaderValue(r->headers, "content-type"), "text/plain");
  EXPECT_EQ(*HttpHeaderValue(r->headers, "x-extra"), "v");
  EXPECT_EQ(HttpHeaderValue(r->headers, "missing"), nullptr);

  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const std::string& req = requests[0];
  EXPECT_EQ(req.rfind("POST /generate?x=1 HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_NE(req.find("\r\nHost: 127.0.0.1:" + std::to_string(server.port()) + "\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("\r\nContent-Length: 7\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("\r\nConnection: close\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("\r\nX-Test: yes\r\n"), std::string::npos) << req;
  EXPECT_EQ(req.substr(req.size() - 7), R"({"a":1})");
}

TEST(HttpClientTest, GetSendsNoBodyAndErrorStatusesAreResponses) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
  });
  auto r = HttpClient().Request("GET", server.Url("/nope"), "", {}, 2000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status_code, 404);
  EXPECT_EQ(r->reason, "Not Found");
  EXPECT_EQ(r->body, "not found");
  const std::string req = server.requests().at(0);
  EXPECT_EQ(req.find("Content-Length"), std::string::npos) << req;
  EXPECT_EQ(req.rfind("GET /nope HTTP/1.1\r\n", 0), 0u) << req;
}

TEST(HttpClientTest, ChunkedResponseIsDecoded) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    SendAll(fd, Chunk("Hello, "));
    EXPECT_TRUE(testing::PeerHasRead(fd));  // the client decodes the rest from later reads
    SendAll(fd, "C;ext=1\r\nchunked worl\r\n");  // upper-case hex and a chunk extension
    SendAll(fd, Chunk("d"));
    SendAll(fd, "0\r\nX-Trailer: t\r\n\r\n");
  });
  auto r = HttpClient().Request("GET", server.Url("/"), "", {}, 2000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "Hello, chunked world");
}

TEST(HttpClientTest, BodyUntilCloseAndInterim100Continue) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nall of ");
    EXPECT_TRUE(testing::PeerHasRead(fd));  // the body's end comes in a later read
    SendAll(fd, "it");
  });
  auto r = HttpClient().Request("POST", server.Url("/"), "x", {}, 2000);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status_code, 200);
  EXPECT_EQ(r->body, "all of it");
}

TEST(HttpClientTest, StreamDeliversEachChunkBeforeTheNextIsSent) {
  std::atomic<int> pieces_seen{0};
  std::atomic<bool> server_waited_in_vain{false};
  TestServer server([&](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; ++i) {
      SendAll(fd, Chunk("piece" + std::to_string(i) + ";"));
      // The next chunk goes out only once the client has handed this one to its callback.
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      while (pieces_seen.load() <= i && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
      if (pieces_seen.load() <= i) server_waited_in_vain = true;
    }
    SendAll(fd, "0\r\n\r\n");
  });
  std::string got;
  HttpResponse head;
  Status s = HttpClient().Stream(
      "POST", server.Url("/stream"), "{}", {}, 5000,
      [&](std::string_view piece) {
        EXPECT_FALSE(piece.empty());
        got.append(piece);
        pieces_seen = int(std::count(got.begin(), got.end(), ';'));
        return true;
      },
      &head);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got, "piece0;piece1;piece2;");
  EXPECT_FALSE(server_waited_in_vain.load());
  EXPECT_EQ(head.status_code, 200);
  EXPECT_TRUE(head.body.empty());
}

TEST(HttpClientTest, StreamStopsEarlyAndClosesTheConnection) {
  std::atomic<bool> server_saw_close{false};
  TestServer server([&](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 2000; ++i) {  // ~4 s at most, unless the client goes away
      if (!SendAll(fd, Chunk("tick;"))) {
        server_saw_close = true;
        return;
      }
      // Paces the ticks like a token stream; nothing waits on it: the loop ends when the client
      // has gone (the send fails), however the ticks were grouped into reads.
      std::this_thread::sleep_for(2ms);
    }
  });
  int ticks = 0;
  const auto start = std::chrono::steady_clock::now();
  Status s = HttpClient().Stream("GET", server.Url("/"), "", {}, 5000, [&](std::string_view piece) {
    ticks += int(std::count(piece.begin(), piece.end(), ';'));
    return ticks < 3;
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(ticks, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!server_saw_close && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server_saw_close.load());
}

TEST(HttpClientTest, StreamReportsNon2xxWithTheBody) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 27\r\n\r\n{\"error\": \"prompt too long\"}");
  });
  bool called = false;
  Status s = HttpClient().Stream("POST", server.Url("/generate"), "{}", {}, 2000, [&](std::string_view) {
    called = true;
    return true;
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("HTTP 400 Bad Request"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("prompt too long"), std::string::npos) << s.message();
  EXPECT_FALSE(called);
}

TEST(HttpClientTest, ConnectionRefused) {
  // A bound socket that never listens refuses connections, and holding it keeps the port ours.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string where = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto r = HttpClient().Request("GET", "http://" + where + "/health", "", {}, 2000);
  ::close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("refused"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find(where), std::string::npos) << r.error();
}

TEST(HttpClientTest, TimesOutWhenTheServerGoesQuiet) {
  // Quiet until the client hangs up (bounded, so the server thread always ends): the silence
  // lasts however long the client takes to give up, so it cannot end before the timeout does.
  const auto go_quiet = [](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    char byte;
    while (::poll(&p, 1, 10'000) == 1 && ::recv(fd, &byte, 1, 0) > 0) {
    }
  };
  TestServer server(go_quiet);
  const auto start = std::chrono::steady_clock::now();
  auto r = HttpClient().Request("GET", server.Url("/"), "", {}, 100);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("timed out after 100 ms"), std::string::npos) << r.error();
  EXPECT_LT(elapsed, 500ms);

  TestServer stream_server(go_quiet);
  bool called = false;
  Status s = HttpClient().Stream("GET", stream_server.Url("/"), "", {}, 100, [&](std::string_view) {
    called = true;
    return true;
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.message();
  EXPECT_TRUE(called);  // "abc" arrived before the silence
}

TEST(HttpClientTest, MalformedAndTruncatedResponsesAreErrors) {
  struct Case {
    const char* response;
    const char* want;
  };
  const Case cases[] = {
      {"garbage\r\n\r\n", "bad status line"},
      {"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"},
      {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "bad Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n", "chunk longer"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "3 of 10 bytes"},
      {"HTTP/1.1 200 OK\r\nContent-Le", "in the middle of the headers"},
      {"", "without a response"},
  };
  for (const Case& c : cases) {
    TestServer server([&](int fd, const std::string&) { SendAll(fd, c.response); });
    auto r = HttpClient().Request("GET", server.Url("/"), "", {}, 2000);
    ASSERT_FALSE(r.ok()) << c.response;
    EXPECT_NE(r.error().find(c.want), std::string::npos) << r.error();
  }
}

// A fake server speaking just enough of SGLang's /generate and OpenAI's /v1/completions streams
// for bench-serving: each request gets max tokens chunks, one token each, then [DONE]. The 1 ms
// between chunks paces them like tokens so the latencies are not all zero; no assertion depends
// on it (counts come from meta_info / usage and from events, however they are grouped in reads).
void FakeLlmServer(int fd, const std::string& request) {
  const size_t body_at = request.find("\r\n\r\n");
  const size_t target_at = request.find(' ') + 1;
  const std::string target = request.substr(target_at, request.find(' ', target_at) - target_at);
  auto reply_json = [&](const std::string& json) {
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(json.size()) + "\r\n\r\n" + json);
  };
  if (target == "/get_model_info") return reply_json(R"({"model_path": "fake", "vocab_size": 100})");
  if (target == "/v1/models") return reply_json(R"({"object": "list", "data": [{"id": "fake-model"}]})");
  const auto body = nlohmann::json::parse(request.substr(body_at + 4), nullptr, false);
  if (body.is_discarded()) {
    SendAll(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
  if (target == "/generate") {
    const int max_tokens = body["sampling_params"]["max_new_tokens"].get<int>();
    const int prompt_tokens = int(body["input_ids"].size());
    std::string text;
    for (int k = 1; k <= max_tokens; ++k) {
      text += " w";
      nlohmann::json chunk{{"text", text}, {"meta_info", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", k}}}};
      SendAll(fd, Chunk("data: " + chunk.dump() + "\n\n"));
      std::this_thread::sleep_for(1ms);
    }
  } else {  // /v1/completions
    const int max_tokens = body["max_tokens"].get<int>();
    for (int k = 1; k <= max_tokens; ++k) {
      nlohmann::json chunk{{"choices", {{{"index", 0}, {"text", " w"}}}}};
      SendAll(fd, Chunk("data: " + chunk.dump() + "\r\n\r\n"));
      std::this_thread::sleep_for(1ms);
    }
    nlohmann::json usage{{"choices", nlohmann::json::array()}, {"usage", {{"prompt_tokens", 7}, {"completion_tokens", max_tokens}}}};
    SendAll(fd, Chunk("data: " + usage.dump() + "\n\n"));
  }
  SendAll(fd, Chunk("data: [DONE]\n\n"));
  SendAll(fd, "0\r\n\r\n");
}

std::string RowValue(const std::string& out, const std::string& label) {
  const size_t at = out.find("\n" + label);
  if (at == std::string::npos) return "";
  const size_t value_at = out.find_first_not_of(' ', at + 1 + label.size());
  return out.substr(value_at, out.find_first_of(" \n", value_at) - value_at);
}

TEST(HttpClientBenchServingTest, SglangBackendAgainstAFakeServer) {
  TestServer server(FakeLlmServer);
  testing::TempDir dir;
  const std::string json_path = dir.path() + "/result.jsonl";
  auto r = testing::RunMlaserve("bench-serving --backend sglang --base-url " + server.Url("") +
                                " --num-prompts 3 --random-input-len 8 --random-output-len 4 --max-concurrency 1"
                                " --disable-progress --output-file " + testing::ShellQuote(json_path));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("============ Serving Benchmark Result ============\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nBackend:                                 sglang    \n"), std::string::npos) << r.out;
  EXPECT_EQ(RowValue(r.out, "Traffic request rate:"), "inf");
  EXPECT_EQ(RowValue(r.out, "Max request concurrency:"), "1");
  EXPECT_EQ(RowValue(r.out, "Successful requests:"), "3");
  EXPECT_EQ(RowValue(r.out, "Total input tokens:"), "24");
  EXPECT_EQ(RowValue(r.out, "Total generated tokens:"), "12");
  EXPECT_NE(RowValue(r.out, "P99 ITL (ms):"), "");
  EXPECT_NE(r.out.find("\n==================================================\n"), std::string::npos);

  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 5u);  // model info, warmup, 3 measured
  EXPECT_EQ(requests[0].rfind("GET /get_model_info ", 0), 0u);
  const auto body = nlohmann::json::parse(requests[2].substr(requests[2].find("\r\n\r\n") + 4));
  EXPECT_EQ(body["input_ids"].size(), 8u);
  EXPECT_EQ(body["sampling_params"]["max_new_tokens"], 4);
  EXPECT_EQ(body["sampling_params"]["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);

  std::ifstream in(json_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto result = nlohmann::json::parse(line);
  EXPECT_EQ(result["completed"], 3);
  EXPECT_EQ(result["total_output_tokens"], 12);
  EXPECT_EQ(result["request_rate"], "inf");
}

TEST(HttpClientBenchServingTest, OpenAiBackendAsksForTheModelAndUsage) {
  TestServer server(FakeLlmServer);
  auto r = testing::RunMlaserve("bench-serving --backend openai --port " + std::to_string(server.port()) +
                                " --num-prompts 2 --random-input-len 5 --random-output-len 3 --max-concurrency 1"
                                " --request-rate 50 --warmup-requests 0 --disable-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(RowValue(r.out, "Traffic request rate:"), "50.0");
  EXPECT_EQ(RowValue(r.out, "Successful requests:"), "2");
  EXPECT_EQ(RowValue(r.out, "Total input tokens:"), "14");  // the server's usage, not the estimate
  EXPECT_EQ(RowValue(r.out, "Total generated tokens:"), "6");
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].rfind("GET /v1/models ", 0), 0u);
  const auto body = nlohmann::json::parse(requests[1].substr(requests[1].find("\r\n\r\n") + 4));
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["max_tokens"], 3);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_TRUE(body["prompt"].is_string());
}

TEST(HttpClientBenchServingTest, FailedRequestsAreCountedAndTheFirstErrorPrinted) {
  TestServer server([](int fd, const std::string&) {
    SendAll(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\noverload");
  });
  auto r = testing::RunMlaserve("bench-serving --base-url " + server.Url("") +
                                " --vocab-size 50 --num-prompts 2 --warmup-requests 0 --disable-progress");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(RowValue(r.out, "Successful requests:"), "0");
  EXPECT_NE(r.err.find("2 of 2 requests failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP 503 Service Unavailable"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("overload"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlaserve
