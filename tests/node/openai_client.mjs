// The official openai npm client against a running `mlaserve serve`:
//   node tests/node/openai_client.mjs http://127.0.0.1:PORT MODEL
// a streaming chat completion (with usage) and a completion with logprobs. Exits non-zero,
// with the reason, on any mismatch.
import OpenAI from "openai";

const [baseUrl, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0 });

function check(condition, message) {
  if (!condition) {
    console.error(`FAIL: ${message}`);
    process.exit(1);
  }
}

const models = await client.models.list();
check(models.data.some((m) => m.id === model), `models.list has ${model}`);

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Speak, friend." }],
  max_tokens: 16,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let finish = null;
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks += 1;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    text += choice.delta?.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
check(chunks >= 3, `streamed ${chunks} chunks`);
check(text.length > 0, "chat stream produced text");
check(finish === "length", `chat finish_reason ${finish}`);
check(usage && usage.completion_tokens === 16, `chat usage ${JSON.stringify(usage)}`);

const completion = await client.completions.create({
  model,
  prompt: "ROMEO:",
  max_tokens: 8,
  temperature: 0,
  logprobs: 3,
});
const choice = completion.choices[0];
check(choice.text.length > 0, "completion text");
check(choice.logprobs.token_logprobs.length === 8, "8 token logprobs");
check(choice.logprobs.token_logprobs.every((lp) => lp <= 0), "logprobs are <= 0");
check(Object.keys(choice.logprobs.top_logprobs[0]).length >= 1, "top logprobs present");
check(completion.usage.completion_tokens === 8, "completion usage");

let notFound = false;
try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
} catch (e) {
  notFound = e.status === 404;
}
check(notFound, "unknown model gives 404");

console.log(`OK: chat streamed ${chunks} chunks (${JSON.stringify(text)}), completion ${JSON.stringify(choice.text)}`);
