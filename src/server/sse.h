// An incremental Server-Sent-Events parser (the text/event-stream format of the WHATWG HTML
// spec, "Interpreting an event stream"), for clients reading streamed completions. Bytes go in
// as the network delivers them, split anywhere; complete events come out.
//   - Lines end in "\n", "\r\n" or a lone "\r", even when the "\r" and "\n" arrive in different
//     chunks. A leading UTF-8 byte-order mark is skipped.
//   - "data:" lines accumulate, joined with "\n"; "event:" names the event; "id:" sets its id;
//     one space after the colon is dropped; lines starting with ':' are comments; other fields
//     ("retry:", unknown names) are ignored.
//   - An empty line ends the event. Events without any data line are not emitted (the spec's
//     rule: a lone "event:" block is dropped). `data: [DONE]` (OpenAI's end marker) is an
//     ordinary event whose data is "[DONE]": recognising it is the caller's business.
//   - Bytes after the last empty line are an incomplete event: they are kept for the next Feed
//     and never emitted if the stream ends there (the spec discards them too).
// Not thread-safe: one parser per stream.
#pragma once

#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace mlaserve {

struct SseEvent {
  std::string event;  // the "event:" name; empty when none was given (the spec's "message")
  std::string data;   // the "data:" lines joined with "\n", without a trailing "\n"
  std::string id;     // the last "id:" seen on this stream so far (ids persist across events)
};

class SseParser {
 public:
  // Parses `bytes` and calls on_event, in order, for each event they complete. The event is
  // valid only during the call.
  void Feed(std::string_view bytes, FunctionRef<void(const SseEvent&)> on_event);

  // Bytes held back for an unfinished line or event (for diagnostics: a stream that ended with
  // pending bytes was cut off or did not end its last event with an empty line).
  bool has_pending() const { return !line_.empty() || has_data_ || !event_.event.empty(); }

 private:
  void ProcessLine(FunctionRef<void(const SseEvent&)> on_event);

  std::string line_;          // the current line so far, without its terminator
  bool after_cr_ = false;     // the last byte seen was '\r': a '\n' next is the same line end
  bool checked_bom_ = false;  // the first bytes of the stream were checked for a BOM
  bool has_data_ = false;     // a data line was seen in the current event
  SseEvent event_;            // the event being built
};

}  // namespace mlaserve
