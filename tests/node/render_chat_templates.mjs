// Renders chat-template cases with @huggingface/jinja, the reference for
// tests/tokenizer/jinja_reference_test.cc. Usage: node render_chat_templates.mjs CASES.json
// CASES.json: [{template, messages, add_generation_prompt, kwargs}]; prints [{output} | {error}].
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const results = cases.map((c) => {
  try {
    const template = new Template(c.template);
    const output = template.render({
      ...(c.kwargs ?? {}),
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt ?? false,
    });
    return { output };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(results) + "\n");
