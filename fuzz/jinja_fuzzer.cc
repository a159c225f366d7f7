// The Jinja engine (tokenizer/jinja/) as the server drives it: a template parsed once
// (ChatTemplate::FromJinja -> Template::Parse) and rendered with messages, the generation
// switch and chat_template_kwargs (ChatTemplate::Render). The input is the template, a NUL,
// then a JSON object: its "messages" are the conversation, "add_generation_prompt" the switch,
// and every other key a kwarg (as a request's chat_template_kwargs and tools arrive).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "nlohmann/json.hpp"
#include "server/client_json.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mlaserve::fuzz::SplitParts(mlaserve::fuzz::AsText(data, size), 2);
  auto chat_template = mlaserve::ChatTemplate::FromJinja(
      parts[0], "jinja_fuzzer", nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (!chat_template.ok()) return 0;
  // The server bounds a body's nesting before parsing it (client_json.h); so does this.
  if (!mlaserve::ParseClientJson(parts[1]).ok()) return 0;
  nlohmann::ordered_json context = nlohmann::ordered_json::parse(parts[1], nullptr, false);
  if (!context.is_object()) context = nlohmann::ordered_json::object();
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  for (auto& [key, value] : context.items()) {
    if (key == "messages") {
      messages = value;
    } else if (key == "add_generation_prompt") {
      add_generation_prompt = value.is_boolean() && value.get<bool>();
    } else {
      kwargs[key] = value;
    }
  }
  (void)chat_template->Render(messages, add_generation_prompt, kwargs);
  return 0;
}
