// The official openai npm client against `mlaserve serve --reasoning-parser ... --tool-call-parser
// ...` serving a scripted model (tests/support/scripted_model.h):
//   node tests/node/reasoning_tools.mjs http://127.0.0.1:PORT MODEL SCRIPTS_JSON
// SCRIPTS_JSON: {"reasoned": FIELDS, "call": FIELDS, "tools": [...], "call_id": ID or null}, where
// FIELDS force a reply: "reasoned" is reasoning then the answer "Sunny.", "call" is reasoning
// then one get_weather call for Paris. Checks reasoning_content, tool_calls and finish_reason,
// non-streamed, streamed by hand, and through the client's own stream accumulator
// (beta.chat.completions.stream), which rebuilds the message from the deltas. Exits non-zero,
// with the reason, on any mismatch.
import OpenAI from "openai";

const [baseUrl, model, scriptsJson] = process.argv.slice(2);
const scripts = JSON.parse(scriptsJson);
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0 });
const messages = [{ role: "user", content: "Weather in Paris?" }];

function check(condition, message) {
  if (!condition) {
    console.error(`FAIL: ${message}`);
    process.exit(1);
  }
}

// Reasoning, non-streamed and streamed.
const reasoned = await client.chat.completions.create({ model, messages, ...scripts.reasoned });
const answer = reasoned.choices[0].message;
check(answer.reasoning_content === "Let me think about it", `reasoning_content ${JSON.stringify(answer)}`);
check(answer.content === "Sunny.", `content ${JSON.stringify(answer)}`);
check(reasoned.choices[0].finish_reason === "stop", `finish_reason ${reasoned.choices[0].finish_reason}`);

let reasoning = "";
let content = "";
for await (const chunk of await client.chat.completions.create({ model, messages, ...scripts.reasoned, stream: true })) {
  for (const choice of chunk.choices) {
    reasoning += choice.delta?.reasoning_content ?? "";
    content += choice.delta?.content ?? "";
  }
}
check(reasoning === "Let me think about it", `streamed reasoning ${JSON.stringify(reasoning)}`);
check(content === "Sunny.", `streamed content ${JSON.stringify(content)}`);

// A tool call, non-streamed.
const called = await client.chat.completions.create({ model, messages, tools: scripts.tools, ...scripts.call });
const call = called.choices[0].message.tool_calls?.[0];
check(called.choices[0].finish_reason === "tool_calls", `finish_reason ${called.choices[0].finish_reason}`);
check(call && call.type === "function" && call.function.name === "get_weather", `tool call ${JSON.stringify(call)}`);
check(JSON.parse(call.function.arguments).city === "Paris", `arguments ${call.function.arguments}`);
check(scripts.call_id === null || call.id === scripts.call_id, `id ${call.id}`);
check(called.choices[0].message.reasoning_content === "Let me think", "reasoning before the call");

// Streamed, rebuilt by the client's own accumulator.
const runner = client.beta.chat.completions.stream({ model, messages, tools: scripts.tools, ...scripts.call });
let toolDeltas = 0;
runner.on("chunk", (chunk) => {
  toolDeltas += chunk.choices[0]?.delta?.tool_calls?.length ?? 0;
});
const final = await runner.finalChatCompletion();
const streamedCall = final.choices[0].message.tool_calls?.[0];
check(final.choices[0].finish_reason === "tool_calls", `streamed finish_reason ${final.choices[0].finish_reason}`);
check(streamedCall && streamedCall.function.name === "get_weather", `streamed call ${JSON.stringify(streamedCall)}`);
check(streamedCall.function.arguments === call.function.arguments,
      `streamed arguments ${streamedCall.function.arguments} vs ${call.function.arguments}`);
check(toolDeltas >= 2, `${toolDeltas} tool-call deltas (want the name, then argument pieces)`);

console.log(`OK: reasoning ${JSON.stringify(answer.reasoning_content)}, call ${call.id} ${call.function.name}` +
            `(${call.function.arguments}), ${toolDeltas} streamed tool-call deltas`);
