// HttpServer over real loopback sockets with a raw test client written here (so tests control
// every byte: pipelining, partial requests, stalls, disconnects), plus the request parser and
// the JSON error helper on their own.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/http_parser.h"
#include "support/peer_has_read.h"

namespace mlaserve {
namespace {

using namespace std::chrono_literals;

// Every wait in these tests is bounded by this, so a broken server fails a test, not the run.
constexpr int kClientTimeoutMs = 5000;

struct TestResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::vector<std::string> chunks;  // a chunked body's chunks, in order, but the empty last one

  const std::string* Header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers) {
      if (name == lower_name) return &value;
    }
    return nullptr;
  }
  std::string HeaderOr(std::string_view lower_name, std::string fallback = "") const {
    const std::string* value = Header(lower_name);
    return value != nullptr ? *value : fallback;
  }
};

// A blocking HTTP/1.1 client on one loopback connection that sends raw bytes and parses
// responses strictly (so framing mistakes of the server show up). Reads time out after
// kClientTimeoutMs.
class TestClient {
 public:
  explicit TestClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval timeout = {.tv_sec = kClientTimeoutMs / 1000, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      connect_errno_ = errno;
      Close();
    }
  }
  ~TestClient() { Close(); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  int connect_errno() const { return connect_errno_; }
  int fd() const { return fd_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(sent));
    }
    return true;
  }

  // Sends `request` and reads the response to it; nullopt when either fails.
  std::optional<TestResponse> RoundTrip(std::string_view request) {
    if (!Send(request)) return std::nullopt;
    return ReadResponse();
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // The status line and headers of the next response.
  std::optional<TestResponse> ReadHead() {
    std::optional<std::string> status_line = ReadLine();
    if (!status_line || status_line->rfind("HTTP/1.1 ", 0) != 0 || status_line->size() < 12) {
      return std::nullopt;
    }
    TestResponse response;
    response.status = std::stoi(status_line->substr(9, 3));
    for (;;) {
      std::optional<std::string> line = ReadLine();
      if (!line) return std::nullopt;
      if (line->empty()) break;
      size_t colon = line->find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string name = line->substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t value_begin = line->find_first_not_of(' ', colon + 1);
      response.headers.emplace_back(
          name, value_begin == std::string::npos ? "" : line->substr(value_begin));
    }
    return response;
  }

  // One chunk of a chunked body: its data, "" for the last chunk (whose trailer it also reads),
  // nullopt on a framing error or a timeout.
  std::optional<std::string> ReadChunk() {
    std::optional<std::string> size_line = ReadLine();
    if (!size_line || size_line->empty()) return std::nullopt;
    size_t chunk_bytes = std::stoul(*size_line, nullptr, 16);
    if (chunk_bytes == 0) {
      std::optional<std::string> trailer_end = ReadLine();
      if (!trailer_end || !trailer_end->empty()) return std::nullopt;
      return std::string();
    }
    std::optional<std::string> data = ReadBytes(chunk_bytes);
    std::optional<std::string> crlf = ReadBytes(2);
    if (!data || !crlf || *crlf != "\r\n") return std::nullopt;
    return data;
  }

  // A whole response; bodies without Content-Length or chunking are read until close.
  std::optional<TestResponse> ReadResponse() {
    std::optional<TestResponse> response = ReadHead();
    if (!response) return std::nullopt;
    if (response->HeaderOr("transfer-encoding") == "chunked") {
      for (;;) {
        std::optional<std::string> chunk = ReadChunk();
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        response->body += *chunk;
        response->chunks.push_back(*chunk);
      }
    } else if (const std::string* length = response->Header("content-length")) {
      std::optional<std::string> body = ReadBytes(std::stoul(*length));
      if (!body) return std::nullopt;
      response->body = *body;
    } else {
      response->body = ReadUntilClose();
    }
    return response;
  }

  // Waits up to timeout_ms for the server to send something (or close); true when it has.
  bool WaitReadable(int timeout_ms) {
    if (!buffer_.empty()) return true;
    pollfd fds = {.fd = fd_, .events = POLLIN, .revents = 0};
    return ::poll(&fds, 1, timeout_ms) > 0;
  }

  // True when the server closes the connection (EOF or reset) with no further bytes.
  bool ServerClosed() {
    if (!buffer_.empty()) return false;
    return !Fill();
  }

  std::string ReadUntilClose() {
    while (Fill()) {
    }
    return std::exchange(buffer_, "");
  }

 private:
  // Appends what the socket has to buffer_; false on EOF, error or timeout.
  bool Fill() {
    char chunk[4096];
    ssize_t received = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (received <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(received));
    return true;
  }

  std::optional<std::string> ReadLine() {
    for (;;) {
      size_t end = buffer_.find("\r\n");
      if (end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 2);
        return line;
      }
      if (!Fill()) return std::nullopt;
    }
  }

  std::optional<std::string> ReadBytes(size_t num_bytes) {
    while (buffer_.size() < num_bytes) {
      if (!Fill()) return std::nullopt;
    }
    std::string bytes = buffer_.substr(0, num_bytes);
    buffer_.erase(0, num_bytes);
    return bytes;
  }

  int fd_ = -1;
  int connect_errno_ = 0;
  std::string buffer_;  // received, not yet parsed
};

// Answers "METHOD TARGET|BODY" as text/plain.
void EchoHandler(const HttpRequest& request, HttpResponseWriter& writer) {
  writer.Send(200, "text/plain", request.method + " " + request.target + "|" + request.body);
}

HttpServerOptions TestOptions() {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.read_timeout_ms = kClientTimeoutMs;
  options.keep_alive_timeout_ms = kClientTimeoutMs;
  return options;
}

std::unique_ptr<HttpServer> StartServer(HttpHandler handler,
                                        const HttpServerOptions& options = TestOptions()) {
  Result<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, std::move(handler));
  if (!server.ok()) {
    ADD_FAILURE() << server.error();
    return nullptr;
  }
  return std::move(server).value();
}

// Waits (bounded) until `condition` holds.
template <typename Condition>
bool Eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Threads of this process now (the in-process server's included), from /proc/self/status.
int CountThreads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Checks that `body` is OpenAI's error shape with this code and type.
void ExpectJsonError(const std::string& body, int code, std::string_view type) {
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << body;
  ASSERT_TRUE(json.contains("error")) << body;
  const nlohmann::json& error = json["error"];
  EXPECT_TRUE(error["message"].is_string()) << body;
  EXPECT_FALSE(error["message"].get<std::string>().empty()) << body;
  EXPECT_EQ(error["type"], type) << body;
  EXPECT_TRUE(error["param"].is_null()) << body;
  EXPECT_EQ(error["code"], code) << body;
}

// ---------------------------------------------------------------------------------------------
// Requests and responses

TEST(HttpRequest, QueryParameterDecodes) {
  HttpRequest r;
  r.target = "/dashboard?x=1&key=a%20b%2Bc+d&key=second&empty=&bare&bad=%4g%4";
  EXPECT_EQ(r.QueryParameter("key"), "a b+c d");  // the first one
  EXPECT_EQ(r.QueryParameter("x"), "1");
  EXPECT_EQ(r.QueryParameter("empty"), "");
  EXPECT_EQ(r.QueryParameter("bare"), "");
  EXPECT_EQ(r.QueryParameter("bad"), "%4g%4");  // malformed escapes stay as sent
  EXPECT_EQ(r.QueryParameter("ke"), std::nullopt);
  r.target = "/dashboard";
  EXPECT_EQ(r.QueryParameter("key"), std::nullopt);
}

TEST(HttpServer, GetAndPostWithBody) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.connected());

  auto get = client.RoundTrip("GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->HeaderOr("content-type"), "text/plain");
  EXPECT_EQ(get->body, "GET /v1/models?x=1|");

  auto post = client.RoundTrip(
      "POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\n\r\n{\"a\":\"b c\"}");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200);
  EXPECT_EQ(post->body, "POST /generate|{\"a\":\"b c\"}");
}

TEST(HttpServer, HandlerSeesPathHeadersAndExtraHeadersAreSent) {
  auto server = StartServer([](const HttpRequest& request, HttpResponseWriter& writer) {
    const std::string* custom = request.Header("x-custom");
    std::string body = request.path + "|" + (custom != nullptr ? *custom : "absent") + "|" +
                       (request.Header("x-missing") == nullptr ? "no" : "yes");
    writer.Send(201, "application/json", body,
                {{"X-Request-Id", "abc"}, {"Bad\r\nInjected", "x"}, {"Content-Length", "999"}});
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  auto response =
      client.RoundTrip("GET /v1/chat?stream=true HTTP/1.1\r\nX-CUSTOM:  Value 1  \r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->body, "/v1/chat|Value 1|no");
  EXPECT_EQ(response->HeaderOr("x-request-id"), "abc");
  EXPECT_EQ(response->Header("bad\r\ninjected"), nullptr);
  EXPECT_EQ(response->HeaderOr("content-length"), "19");  // the handler's bogus one was dropped
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  std::atomic<int> calls{0};
  auto server = StartServer([&](const HttpRequest& request, HttpResponseWriter& writer) {
    ++calls;
    EchoHandler(request, writer);
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  for (int i = 0; i < 2; ++i) {
    auto response = client.RoundTrip("GET /n" + std::to_string(i) + " HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body, "GET /n" + std::to_string(i) + "|");
    EXPECT_EQ(response->Header("connection"), nullptr);  // HTTP/1.1 persistence is implicit
  }
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(server->active_connections(), 1);
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  // Three requests in one write, the second with a body, the last asking to close.
  auto first = client.RoundTrip(
      "GET /first HTTP/1.1\r\n\r\n"
      "POST /second HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"
      "GET /third HTTP/1.1\r\nConnection: close\r\n\r\n");
  auto second = client.ReadResponse();
  auto third = client.ReadResponse();
  ASSERT_TRUE(first && second && third);
  EXPECT_EQ(first->body, "GET /first|");
  EXPECT_EQ(second->body, "POST /second|body");
  EXPECT_EQ(third->body, "GET /third|");
  EXPECT_EQ(third->HeaderOr("connection"), "close");
  EXPECT_TRUE(client.ServerClosed());
}

TEST(HttpServer, ChunkedRequestBodyIsDecoded) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n"));
  ASSERT_TRUE(testing::PeerHasRead(client.fd()));  // the server decodes the rest from a later read
  ASSERT_TRUE(client.Send("5;name=value\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "POST /c|Wikipedia");
}

TEST(HttpServer, ExpectContinueGets100BeforeTheBody) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("POST /e HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = client.ReadHead();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  auto response = client.RoundTrip("hello");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "POST /e|hello");
}

TEST(HttpServer, ConnectionCloseAndHttp10AreHonoured) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  {
    TestClient client(server->port());
    auto response = client.RoundTrip("GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->HeaderOr("connection"), "close");
    EXPECT_TRUE(client.ServerClosed());
  }
  {
    TestClient client(server->port());  // HTTP/1.0 closes unless asked to keep alive
    auto response = client.RoundTrip("GET /b HTTP/1.0\r\n\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->body, "GET /b|");
    EXPECT_EQ(response->HeaderOr("connection"), "close");
    EXPECT_TRUE(client.ServerClosed());
  }
  {
    TestClient client(server->port());
    for (int i = 0; i < 2; ++i) {
      auto response = client.RoundTrip("GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
      ASSERT_TRUE(response);
      EXPECT_EQ(response->HeaderOr("connection"), "keep-alive");
    }
  }
}

TEST(HttpServer, IdleKeepAliveConnectionIsClosedAfterTimeout) {
  HttpServerOptions options = TestOptions();
  options.keep_alive_timeout_ms = 100;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(client.ReadResponse());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.ServerClosed());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(Eventually([&] { return server->active_connections() == 0; }));
}

TEST(HttpServer, FreshConnectionThatSendsNothingIsClosedAfterKeepAliveTimeout) {
  HttpServerOptions options = TestOptions();  // read_timeout_ms stays long
  options.keep_alive_timeout_ms = 100;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.connected());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.ServerClosed());  // quietly: no request, no response
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(Eventually([&] { return server->active_connections() == 0; }));
}

TEST(HttpServer, HeadTricklingPastTheHeadDeadlineGets408) {
  HttpServerOptions options = TestOptions();  // read_timeout_ms stays long: no line stalls
  options.head_timeout_ms = 300;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /slow HTTP/1.1\r\n"));
  const auto start = std::chrono::steady_clock::now();
  int header_lines_sent = 0;
  // One header line every 50 ms, far inside read_timeout_ms, until the server answers.
  while (!client.WaitReadable(50) && std::chrono::steady_clock::now() - start < 5s) {
    (void)client.Send("X-Trickle-" + std::to_string(header_lines_sent++) + ": 1\r\n");
  }
  const auto answered_after = std::chrono::steady_clock::now() - start;
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  EXPECT_EQ(response->HeaderOr("connection"), "close");
  ExpectJsonError(response->body, 408, "invalid_request_error");
  EXPECT_TRUE(client.ServerClosed());
  EXPECT_GE(answered_after, 300ms);
  EXPECT_LT(answered_after, 2s);
  EXPECT_GE(header_lines_sent, 3);  // it was trickling, not stalled
}

TEST(HttpServer, IdleConnectionsHoldNoThread) {
  HttpServerOptions options = TestOptions();
  options.max_connections = 1000;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  const int threads_before = CountThreads();
  constexpr int kNumIdle = 200;
  std::vector<std::unique_ptr<TestClient>> idle;
  for (int i = 0; i < kNumIdle; ++i) {
    idle.push_back(std::make_unique<TestClient>(server->port()));
    ASSERT_TRUE(idle.back()->connected());
    if (i % 2 == 0) {  // half between keep-alive requests, half never asked anything
      auto response = idle.back()->RoundTrip("GET /once HTTP/1.1\r\n\r\n");
      ASSERT_TRUE(response);
      EXPECT_EQ(response->status, 200);
    }
  }
  ASSERT_TRUE(Eventually([&] { return server->active_connections() == kNumIdle; }));
  // Handler threads exit once their request is done; 200 open sockets leave no thread behind.
  EXPECT_TRUE(Eventually([&] { return CountThreads() <= threads_before + 2; }))
      << CountThreads() << " threads, " << threads_before << " before";
  TestClient another(server->port());
  auto response = another.RoundTrip("GET /more HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

// ---------------------------------------------------------------------------------------------
// Streaming and departing clients

TEST(HttpServer, StreamingResponseArrivesChunkByChunk) {
  std::promise<void> first_read;
  std::shared_future<void> first_read_done = first_read.get_future().share();
  std::atomic<bool> writes_ok{true};
  auto server = StartServer([&](const HttpRequest&, HttpResponseWriter& writer) {
    writer.BeginStream(200, "text/event-stream");
    writes_ok = writer.Write("data: one\n\n") && writer.Write("");
    // The client must see the first chunk before the second exists: Write() flushes.
    if (first_read_done.wait_for(5s) != std::future_status::ready) writes_ok = false;
    writes_ok = writes_ok && writer.Write("data: two\n\n");
    writer.EndStream();
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("POST /generate HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  auto head = client.ReadHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->HeaderOr("content-type"), "text/event-stream");
  EXPECT_EQ(head->HeaderOr("transfer-encoding"), "chunked");
  EXPECT_EQ(head->Header("content-length"), nullptr);
  EXPECT_EQ(client.ReadChunk(), "data: one\n\n");
  first_read.set_value();
  EXPECT_EQ(client.ReadChunk(), "data: two\n\n");
  EXPECT_EQ(client.ReadChunk(), "");  // the last chunk
  EXPECT_TRUE(writes_ok.load());

  // The connection stays usable after a complete stream (the same handler streams again).
  auto next = client.RoundTrip("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->chunks, (std::vector<std::string>{"data: one\n\n", "data: two\n\n"}));
}

TEST(HttpServer, StreamToHttp10ClientEndsWithClose) {
  auto server = StartServer([](const HttpRequest&, HttpResponseWriter& writer) {
    writer.BeginStream(200, "text/event-stream");
    writer.Write("a");
    writer.Write("b");
    // Returning without EndStream() ends the stream too.
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  auto response = client.RoundTrip("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->Header("transfer-encoding"), nullptr);
  EXPECT_EQ(response->HeaderOr("connection"), "close");
  EXPECT_EQ(response->body, "ab");
}

TEST(HttpServer, WriteReturnsFalseAfterClientDisconnects) {
  std::promise<void> streaming;
  std::promise<std::pair<bool, bool>> outcome;  // (first write ok, a later write failed)
  auto server = StartServer([&](const HttpRequest&, HttpResponseWriter& writer) {
    writer.BeginStream(200, "text/event-stream");
    bool first_ok = writer.Write("data: first\n\n");
    streaming.set_value();
    bool failed = false;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!failed && std::chrono::steady_clock::now() < deadline) {
      failed = !writer.Write("data: tick\n\n");
      std::this_thread::sleep_for(2ms);
    }
    if (failed) failed = !writer.Write("data: after\n\n");  // stays false
    outcome.set_value({first_ok, failed});
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("GET /stream HTTP/1.1\r\n\r\n"));
  ASSERT_EQ(streaming.get_future().wait_for(5s), std::future_status::ready);
  client.Close();
  std::future<std::pair<bool, bool>> result = outcome.get_future();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  auto [first_ok, failed] = result.get();
  EXPECT_TRUE(first_ok);
  EXPECT_TRUE(failed);
  EXPECT_TRUE(Eventually([&] { return server->active_connections() == 0; }));
}

TEST(HttpServer, ClientGoneTurnsTrueAfterPeerCloses) {
  std::promise<bool> gone_at_start;
  std::promise<bool> gone_later;
  auto server = StartServer([&](const HttpRequest&, HttpResponseWriter& writer) {
    gone_at_start.set_value(writer.ClientGone());
    bool gone = false;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!gone && std::chrono::steady_clock::now() < deadline) {
      gone = writer.ClientGone();
      std::this_thread::sleep_for(2ms);
    }
    gone_later.set_value(gone);
    writer.Send(200, "text/plain", "too late");  // harmless: nobody is listening
  });
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  ASSERT_TRUE(client.Send("POST /generate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));
  std::future<bool> at_start = gone_at_start.get_future();
  ASSERT_EQ(at_start.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(at_start.get());
  client.Close();
  std::future<bool> later = gone_later.get_future();
  ASSERT_EQ(later.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(later.get());
}

// ---------------------------------------------------------------------------------------------
// Errors the server answers itself

TEST(HttpServer, OversizedBodyGets413) {
  std::atomic<int> calls{0};
  HttpServerOptions options = TestOptions();
  options.max_body_bytes = 16;
  auto server = StartServer(
      [&](const HttpRequest& request, HttpResponseWriter& writer) {
        ++calls;
        EchoHandler(request, writer);
      },
      options);
  ASSERT_NE(server, nullptr);
  {
    TestClient client(server->port());  // exactly the limit is fine
    auto response =
        client.RoundTrip("POST / HTTP/1.1\r\nContent-Length: 16\r\n\r\n0123456789abcdef");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200);
  }
  {
    TestClient client(server->port());  // judged from Content-Length; the body is never sent
    auto response = client.RoundTrip("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 413);
    EXPECT_EQ(response->HeaderOr("connection"), "close");
    ExpectJsonError(response->body, 413, "invalid_request_error");
    EXPECT_TRUE(client.ServerClosed());
  }
  {
    TestClient client(server->port());  // chunked: judged as the chunks add up
    auto response = client.RoundTrip(
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n9\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 413);
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST(HttpServer, OversizedHeadersGet431) {
  HttpServerOptions options = TestOptions();
  options.max_header_bytes = 512;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  auto response =
      client.RoundTrip("GET / HTTP/1.1\r\nX-Big: " + std::string(600, 'x') + "\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 431);
  ExpectJsonError(response->body, 431, "invalid_request_error");
  EXPECT_TRUE(client.ServerClosed());
}

TEST(HttpServer, GarbageRequestLineGets400JsonError) {
  std::atomic<int> calls{0};
  auto server = StartServer([&](const HttpRequest& request, HttpResponseWriter& writer) {
    ++calls;
    EchoHandler(request, writer);
  });
  ASSERT_NE(server, nullptr);
  for (std::string_view garbage : {std::string_view("GARBAGE\r\n\r\n"),
                                   std::string_view("GET / HTTP/1.1\r\nno colon here\r\n\r\n"),
                                   std::string_view("\x16\x03\x01\x02\x00\x01\x00\r\n\r\n", 11)}) {
    TestClient client(server->port());
    auto response = client.RoundTrip(garbage);
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 400);
    EXPECT_EQ(response->HeaderOr("content-type"), "application/json");
    ExpectJsonError(response->body, 400, "invalid_request_error");
    EXPECT_TRUE(client.ServerClosed());
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(HttpServer, StalledClientGets408) {
  HttpServerOptions options = TestOptions();
  options.read_timeout_ms = 150;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  const auto start = std::chrono::steady_clock::now();
  auto response = client.RoundTrip("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nhalf");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 408);
  ExpectJsonError(response->body, 408, "invalid_request_error");
  EXPECT_TRUE(client.ServerClosed());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(HttpServer, BeyondMaxConnectionsProbesAnswerAndOthersGet503) {
  HttpServerOptions options = TestOptions();
  options.max_connections = 1;
  auto server = StartServer(EchoHandler, options);
  ASSERT_NE(server, nullptr);
  auto held = std::make_unique<TestClient>(server->port());
  ASSERT_TRUE(held->Send("GET /held HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(held->ReadResponse());  // admitted and now idle, still holding its slot
  EXPECT_EQ(server->active_connections(), 1);

  TestClient turned_away(server->port());
  auto rejected = turned_away.RoundTrip("GET /extra HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->status, 503);
  EXPECT_EQ(rejected->HeaderOr("connection"), "close");
  EXPECT_EQ(rejected->HeaderOr("retry-after"), "1");
  ExpectJsonError(rejected->body, 503, "server_error");
  EXPECT_TRUE(turned_away.ServerClosed());

  TestClient probe(server->port());  // a liveness probe is still answered, on its own socket
  auto health = probe.RoundTrip("GET /health HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "GET /health|");
  EXPECT_EQ(health->HeaderOr("connection"), "close");  // beyond the cap: one request only
  EXPECT_TRUE(probe.ServerClosed());

  held.reset();  // frees the slot
  ASSERT_TRUE(Eventually([&] { return server->active_connections() == 0; }));
  TestClient admitted(server->port());
  auto response = admitted.RoundTrip("GET /later HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST(HttpServer, RequestsBeyondTheHandlerThreadsWaitAndProbesStillAnswer) {
  HttpServerOptions options = TestOptions();
  options.max_handler_threads = 2;
  options.probe_threads = 1;
  std::atomic<int> running{0};
  std::atomic<int> peak_running{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto server = StartServer(
      [&](const HttpRequest& request, HttpResponseWriter& writer) {
        if (request.path == "/slow") {
          const int now_running = ++running;
          int peak = peak_running.load();
          while (now_running > peak && !peak_running.compare_exchange_weak(peak, now_running)) {
          }
          released.wait_for(5s);
          --running;
        }
        EchoHandler(request, writer);
      },
      options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<TestClient>> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(std::make_unique<TestClient>(server->port()));
    ASSERT_TRUE(slow.back()->Send("GET /slow HTTP/1.1\r\n\r\n"));
  }
  ASSERT_TRUE(Eventually([&] { return running.load() == 2; }));  // the third waits its turn
  TestClient queued_too(server->port());
  ASSERT_TRUE(queued_too.Send("GET /other HTTP/1.1\r\n\r\n"));

  TestClient probe(server->port());  // answered now, on the probe reserve
  auto health = probe.RoundTrip("GET /health HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(running.load(), 2);

  release.set_value();
  for (auto& client : slow) {
    auto response = client->ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "GET /slow|");
  }
  auto other = queued_too.ReadResponse();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(peak_running.load(), 2);
}

TEST(HttpServer, HandlerThatSendsNothingGets500) {
  auto server = StartServer([](const HttpRequest&, HttpResponseWriter&) {});
  ASSERT_NE(server, nullptr);
  TestClient client(server->port());
  auto response = client.RoundTrip("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 500);
  ExpectJsonError(response->body, 500, "server_error");
  // A forgotten response is the handler's bug, not the connection's: it stays usable.
  response = client.RoundTrip("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 500);
}

TEST(HttpServer, HandlerThatThrowsGets500AndServerKeepsServing) {
  auto server = StartServer([](const HttpRequest& request, HttpResponseWriter& writer) {
    if (request.path == "/throw") throw std::runtime_error("boom");
    if (request.path == "/throw-mid-stream") {
      writer.BeginStream(200, "text/plain");
      writer.Write("partial");
      throw 42;
    }
    EchoHandler(request, writer);
  });
  ASSERT_NE(server, nullptr);
  {
    TestClient client(server->port());
    auto response = client.RoundTrip("GET /throw HTTP/1.1\r\n\r\n");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 500);
    ExpectJsonError(response->body, 500, "server_error");
    EXPECT_TRUE(client.ServerClosed());
  }
  {
    TestClient client(server->port());  // the stream is cut without its last chunk
    ASSERT_TRUE(client.Send("GET /throw-mid-stream HTTP/1.1\r\n\r\n"));
    auto head = client.ReadHead();
    ASSERT_TRUE(head);
    EXPECT_EQ(client.ReadChunk(), "partial");
    EXPECT_EQ(client.ReadChunk(), std::nullopt);
  }
  TestClient client(server->port());
  auto response = client.RoundTrip("GET /fine HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

TEST(HttpServer, StopWaitsForInFlightHandler) {
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto server = StartServer([&](const HttpRequest& request, HttpResponseWriter& writer) {
    if (request.path == "/slow") {
      entered.set_value();
      released.wait_for(5s);
    }
    EchoHandler(request, writer);
  });
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  TestClient idle(port);  // between requests when Stop() comes: closed at once
  ASSERT_TRUE(idle.Send("GET /quick HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(idle.ReadResponse());
  TestClient busy(port);
  ASSERT_TRUE(busy.Send("GET /slow HTTP/1.1\r\n\r\n"));
  ASSERT_EQ(entered.get_future().wait_for(5s), std::future_status::ready);

  std::atomic<bool> stop_returned{false};
  std::thread stopper([&] {
    server->Stop();
    stop_returned = true;
  });
  EXPECT_TRUE(idle.ServerClosed());
  TestClient late(port);
  EXPECT_FALSE(late.connected());  // the listening socket is gone
  EXPECT_EQ(late.connect_errno(), ECONNREFUSED);
  // Stop() has begun (the listener is gone, the idle client closed); a Stop() that did not wait
  // for the running handler would return within this window. A sleep, because the event checked
  // for is one that must not happen: a correct server passes whatever the timing (the handler
  // cannot return before `release`, below), so it cannot fail falsely.
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(stop_returned.load());  // the handler is still running

  release.set_value();
  stopper.join();
  EXPECT_TRUE(stop_returned.load());
  EXPECT_EQ(server->active_connections(), 0);
  auto response = busy.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "GET /slow|");
  EXPECT_EQ(response->HeaderOr("connection"), "close");
  EXPECT_TRUE(busy.ServerClosed());
  server->Stop();  // idempotent
}

TEST(HttpServer, StopAcceptingKeepsServingOpenConnections) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  TestClient open(server->port());
  ASSERT_TRUE(open.Send("GET /1 HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(open.ReadResponse());
  server->StopAccepting();
  TestClient late(server->port());
  EXPECT_FALSE(late.connected());
  auto response = open.RoundTrip("GET /2 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->body, "GET /2|");
  server->Stop();
  EXPECT_TRUE(open.ServerClosed());
}

TEST(HttpServer, PortZeroPicksAnEphemeralPort) {
  auto first = StartServer(EchoHandler);
  auto second = StartServer(EchoHandler);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_GT(first->port(), 0);
  EXPECT_GT(second->port(), 0);
  EXPECT_NE(first->port(), second->port());
}

TEST(HttpServer, ListenErrorWhenThePortIsTaken) {
  auto first = StartServer(EchoHandler);
  ASSERT_NE(first, nullptr);
  HttpServerOptions options = TestOptions();
  options.port = first->port();
  Result<std::unique_ptr<HttpServer>> second = HttpServer::Start(options, EchoHandler);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error(), "cannot listen on 127.0.0.1:" + std::to_string(first->port()) +
                                ": " + std::strerror(EADDRINUSE));
}

TEST(HttpServer, ManyConcurrentClients) {
  auto server = StartServer(EchoHandler);
  ASSERT_NE(server, nullptr);
  constexpr int kNumClients = 16;
  std::atomic<int> ok_responses{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kNumClients; ++i) {
    clients.emplace_back([&, i] {
      TestClient client(server->port());
      for (int round = 0; round < 5; ++round) {
        std::string body = std::to_string(i) + "-" + std::to_string(round);
        client.Send("POST /m HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n\r\n" + body);
        auto response = client.ReadResponse();
        if (response && response->body == "POST /m|" + body) ++ok_responses;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(ok_responses.load(), kNumClients * 5);
}

// ---------------------------------------------------------------------------------------------
// The parser on its own

HttpRequestParser MakeParser(size_t max_header_bytes = 1024, size_t max_body_bytes = 1024) {
  return HttpRequestParser(
      {.max_header_bytes = max_header_bytes, .max_body_bytes = max_body_bytes});
}

TEST(HttpParser, ByteByByteMatchesWholeAndLeavesThePipelinedRest) {
  const std::string request =
      "\r\nPOST /v1/x?y=1 HTTP/1.1\r\nHost: a\r\nX-Thing: \t v w \t\r\nContent-Length: 5\r\n\r\n"
      "hello";
  const std::string next = "GET / HTTP/1.1\r\n\r\n";
  const std::string bytes = request + next;

  HttpRequestParser whole = MakeParser();
  EXPECT_EQ(whole.Feed(bytes), request.size());
  ASSERT_EQ(whole.state(), HttpRequestParser::State::kDone);

  HttpRequestParser split = MakeParser();
  size_t used = 0;
  for (size_t i = 0; i < bytes.size() && split.state() != HttpRequestParser::State::kDone; ++i) {
    used += split.Feed(std::string_view(bytes).substr(i, 1));
    if (i == 1) {
      EXPECT_FALSE(split.started());  // a leading blank line is skipped
    }
  }
  EXPECT_EQ(used, request.size());
  for (HttpRequestParser* parser : {&whole, &split}) {
    const HttpRequest& parsed = parser->request();
    EXPECT_EQ(parsed.method, "POST");
    EXPECT_EQ(parsed.target, "/v1/x?y=1");
    EXPECT_EQ(parsed.path, "/v1/x");
    ASSERT_NE(parsed.Header("x-thing"), nullptr);
    EXPECT_EQ(*parsed.Header("x-thing"), "v w");
    EXPECT_EQ(*parsed.Header("host"), "a");
    EXPECT_EQ(parsed.body, "hello");
    EXPECT_TRUE(parser->keep_alive());
  }

  whole.Reset();
  EXPECT_EQ(whole.Feed(std::string_view(bytes).substr(request.size())), next.size());
  EXPECT_EQ(whole.state(), HttpRequestParser::State::kDone);
  EXPECT_EQ(whole.request().body, "");
}

TEST(HttpParser, ChunkedBodyWithExtensionsAndTrailers) {
  HttpRequestParser parser = MakeParser();
  const std::string bytes =
      "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"
      "4;ext=1\r\nWiki\r\n5 \r\npedia\r\nA\r\n 01234567 \r\n0\r\nX-T: y\r\n\r\nNEXT";
  EXPECT_EQ(parser.Feed(bytes), bytes.size() - 4);
  ASSERT_EQ(parser.state(), HttpRequestParser::State::kDone) << parser.error().message;
  EXPECT_EQ(parser.request().body, "Wikipedia 01234567 ");
}

TEST(HttpParser, KeepAliveAndExpectRules) {
  struct Case {
    std::string_view head;
    bool keep_alive;
  };
  for (const Case& c : {Case{"GET / HTTP/1.1\r\n\r\n", true},
                        Case{"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", false},
                        Case{"GET / HTTP/1.0\r\n\r\n", false},
                        Case{"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
                        Case{"GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n", false}}) {
    HttpRequestParser parser = MakeParser();
    parser.Feed(c.head);
    ASSERT_EQ(parser.state(), HttpRequestParser::State::kDone) << c.head;
    EXPECT_EQ(parser.keep_alive(), c.keep_alive) << c.head;
  }
  HttpRequestParser parser = MakeParser();
  parser.Feed("POST / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_TRUE(parser.expects_continue());
  parser.Feed("ok");
  EXPECT_FALSE(parser.expects_continue());  // the body is here
  EXPECT_EQ(parser.state(), HttpRequestParser::State::kDone);
}

TEST(HttpParser, TargetForms) {
  HttpRequestParser parser = MakeParser();
  parser.Feed("GET http://host:8080/v1/models?a=b HTTP/1.1\r\nContent-Length: 0, 0\r\n\r\n");
  ASSERT_EQ(parser.state(), HttpRequestParser::State::kDone) << parser.error().message;
  EXPECT_EQ(parser.request().path, "/v1/models");
  parser.Reset();
  parser.Feed("OPTIONS * HTTP/1.1\r\n\r\n");
  ASSERT_EQ(parser.state(), HttpRequestParser::State::kDone);
  EXPECT_EQ(parser.request().path, "*");
}

TEST(HttpParser, RejectsMalformedRequestsWithTheRightStatus) {
  struct Case {
    std::string_view bytes;
    int status;
  };
  const Case cases[] = {
      {"GET /\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 \r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET /\x7f HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\rz\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nExpect: something\r\n\r\n", 417},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n", 413},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n", 413},
  };
  for (const Case& c : cases) {
    HttpRequestParser parser = MakeParser();
    parser.Feed(c.bytes);
    ASSERT_EQ(parser.state(), HttpRequestParser::State::kError) << c.bytes;
    EXPECT_EQ(parser.error().status, c.status) << c.bytes;
    EXPECT_FALSE(parser.error().message.empty());
    EXPECT_EQ(parser.Feed("more"), 0u);  // stuck until Reset()
  }
}

TEST(HttpParser, HeaderLimitsCountTheHeadAndTheTrailers) {
  const std::string head = "GET / HTTP/1.1\r\nX: " + std::string(40, 'v') + "\r\n\r\n";
  HttpRequestParser at_limit = MakeParser(head.size());
  at_limit.Feed(head);
  EXPECT_EQ(at_limit.state(), HttpRequestParser::State::kDone);

  HttpRequestParser over = MakeParser(head.size() - 1);
  over.Feed(head);
  ASSERT_EQ(over.state(), HttpRequestParser::State::kError);
  EXPECT_EQ(over.error().status, 431);

  HttpRequestParser endless = MakeParser(64);  // never a line end: still bounded
  endless.Feed("GET /" + std::string(100, 'a'));
  EXPECT_EQ(endless.state(), HttpRequestParser::State::kError);

  HttpRequestParser trailers = MakeParser(64);
  trailers.Feed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n");
  trailers.Feed("X-T: " + std::string(70, 't') + "\r\n\r\n");
  ASSERT_EQ(trailers.state(), HttpRequestParser::State::kError);
  EXPECT_EQ(trailers.error().status, 431);
}

// ---------------------------------------------------------------------------------------------
// JsonError

TEST(HttpJsonError, HasOpenAiShapeAndEscapes) {
  EXPECT_EQ(JsonError(404, "not found", "invalid_request_error"),
            R"({"error":{"message":"not found","type":"invalid_request_error","param":null,)"
            R"("code":404}})");
  const std::string message =
      "quote \" backslash \\ newline \n tab \t ctrl \x01 bad \xff ok \xc3\xa9";
  const std::string json = JsonError(400, message, "invalid_request_error");
  EXPECT_EQ(json.find('\n'), std::string::npos);
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(parsed.is_object()) << json;
  EXPECT_EQ(parsed["error"]["message"],
            "quote \" backslash \\ newline \n tab \t ctrl \x01 bad \xef\xbf\xbd ok \xc3\xa9");
  EXPECT_EQ(parsed["error"]["code"], 400);
}

}  // namespace
}  // namespace mlaserve
