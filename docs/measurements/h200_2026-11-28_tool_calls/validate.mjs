// Checks gpu_requests.py's record with ajv: every reply to a forced call ends in tool_calls, each call
// names a function of its request and its arguments validate against that function's parameters; a named
// function is the one called, once. Run from a directory whose node_modules has ajv (the server tests').
//   node validate.mjs RECORD.jsonl
import fs from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";

const ajv = new Ajv2020({ strict: false });
let replies = 0, calls = 0, bad = 0, tokens = 0, seconds = 0;
for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean)) {
  const { request, response } = JSON.parse(line);
  const choice = response.choices[0];
  const fail = (why) => { bad++; console.log(`seed ${request.seed}: ${why}: ${JSON.stringify(choice.message)}`); };
  replies++;
  tokens += response.usage.completion_tokens;
  seconds += response.timings.predicted_n / Math.max(response.timings.predicted_per_second, 1e-9);
  if (choice.finish_reason !== "tool_calls") { fail(`finish_reason ${choice.finish_reason}`); continue; }
  const list = choice.message.tool_calls;
  const named = typeof request.tool_choice === "object" ? request.tool_choice.function.name : null;
  if ((named || request.parallel_tool_calls === false) && list.length !== 1) fail(`${list.length} calls where one was asked`);
  for (const call of list) {
    calls++;
    const tool = request.tools.find((t) => t.function.name === call.function.name);
    if (!tool || (named && call.function.name !== named)) { fail(`function ${call.function.name}`); continue; }
    let args;
    try { args = JSON.parse(call.function.arguments); } catch (e) { fail(`arguments do not parse: ${call.function.arguments}`); continue; }
    const check = ajv.compile(tool.function.parameters ?? { type: "object", maxProperties: 0 });
    if (!check(args)) fail(`${call.function.arguments}: ${ajv.errorsText(check.errors)}`);
  }
}
console.log(`${replies} replies, ${calls} calls, ${bad} invalid; ${tokens} tokens generated, ${(tokens / seconds).toFixed(0)} tok/s`);
process.exitCode = bad || !replies ? 1 : 0;
