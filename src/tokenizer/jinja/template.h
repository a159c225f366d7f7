// A compiled Jinja chat template: parse once at start-up, render per request (const and
// thread-safe: each Render runs its own interpreter over the shared, immutable tree).
//
//   auto t = jinja::Template::Parse(source);                 // errors: "line 7: expected '%}' ..."
//   auto text = t->Render(context, jinja::RenderLimits{});   // context: a dict of variables
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"

namespace mlaserve::jinja {

class Template {
 public:
  static Result<Template> Parse(std::string_view source);

  // `variables` must be a dict; its entries (messages, add_generation_prompt, bos_token, ...)
  // become the template's global names beside range, namespace, raise_exception, strftime_now.
  Result<std::string> Render(const Value& variables, const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body)
      : body_(std::move(body)), concurrent_bytes_(std::make_shared<std::atomic<size_t>>(0)) {}
  std::shared_ptr<const Body> body_;  // shared by copies; never mutated after Parse
  // Bytes allocated by the renders now running (RenderLimits::max_concurrent_render_bytes),
  // shared by copies.
  std::shared_ptr<std::atomic<size_t>> concurrent_bytes_;
};

}  // namespace mlaserve::jinja
