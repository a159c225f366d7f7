// mlaserve render-chat (not listed in --help): renders chat templates for tests. Reads a JSON
// list of cases {"template", "messages", "add_generation_prompt", "kwargs"} (kwargs are the
// template's other variables, bos_token included) and prints a JSON list of {"output"} or
// {"error"}, one per case. The reference comparison with @huggingface/jinja drives it.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "tokenizer/chat_template.h"

namespace mlaserve::cli {

int RunRenderChat(Args& args) {
  const std::string cases_path = args.Str("cases", "", "JSON list of {template, messages, add_generation_prompt, kwargs}",
                                          {.value_name = "FILE"});
  if (cases_path.empty()) args.Reject("--cases is required");
  if (auto exit_code = args.Finish()) return *exit_code;

  std::ifstream in(cases_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Fail("render-chat", cases_path + ": cannot read", 2);
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!cases.is_array()) return Fail("render-chat", cases_path + ": not a JSON list", 2);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    nlohmann::ordered_json result = nlohmann::ordered_json::object();
    auto t = ChatTemplate::FromJinja(c.value("template", ""), "template");
    Result<std::string> out = t.ok() ? t->Render(c.value("messages", nlohmann::ordered_json::array()),
                                                 c.value("add_generation_prompt", false),
                                                 c.value("kwargs", nlohmann::ordered_json::object()))
                                     : Result<std::string>(t.status());
    if (out.ok()) {
      result["output"] = *out;
    } else {
      result["error"] = out.error();
    }
    results.push_back(std::move(result));
  }
  std::printf("%s\n", results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace mlaserve::cli
