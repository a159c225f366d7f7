// Template: lexer + parser at Parse, a fresh Interpreter per Render.
#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace mlaserve::jinja {

Result<Template> Template::Parse(std::string_view source) {
  Result<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  Result<Body> body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(std::move(body).value()));
}

Result<std::string> Template::Render(const Value& variables, const RenderLimits& limits) const {
  if (!variables.is_dict()) return Status::Error("template variables must be a dict");
  Dict globals;
  AddGlobalFunctions(globals);
  for (const auto& [name, value] : variables.dict().items) globals.Set(name, value);
  return Interpreter(limits, concurrent_bytes_.get()).Render(*body_, std::move(globals));
}

}  // namespace mlaserve::jinja
