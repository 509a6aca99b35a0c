// Checks the outputs of mk-structured-samples against their schemas with ajv (an outside validator, not
// this project's code). Fails when:
//   - an output does not parse or does not validate;
//   - an output stopped for any reason but eos (the constraint or an EOS ended it): one cut by max_tokens
//     fails too, since a reply ends within its budget (docs/structured_output.md);
//   - a supported schema was refused;
//   - a schema marked "refused" compiled, or its error lacks that word.
// The counts are printed and kept in docs/structured_output.md.
//   node structured_output_validity.mjs SCHEMAS.jsonl OUTPUTS.jsonl... (copied next to ajv by
//   scripts/server_test_setup.sh)
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";

const [schemasPath, ...outputPaths] = process.argv.slice(2);
const lines = (p) => readFileSync(p, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const schemas = lines(schemasPath);
const outputs = new Map(outputPaths.flatMap(lines).map((o) => [o.name, o]));
const ajv = new Ajv2020({ strict: false, allErrors: true });
let valid = 0, refused = 0;
const failures = [];
for (const { name, schema, refused: expectRefusal } of schemas) {
  const o = outputs.get(name);
  if (!o) { failures.push(`${name}: no output`); continue; }
  if (expectRefusal) {
    if (o.refused && o.refused.includes(expectRefusal)) ++refused;
    else failures.push(`${name}: should be refused (${expectRefusal}); got ${JSON.stringify(o)}`);
    continue;
  }
  if (o.refused) { failures.push(`${name}: refused: ${o.refused}`); continue; }
  if (o.stop !== "eos") { failures.push(`${name}: stopped by ${o.stop} after ${o.tokens} tokens: ${o.text.slice(0, 200)}`); continue; }
  let value;
  try { value = JSON.parse(o.text); } catch (e) { failures.push(`${name}: does not parse: ${e.message}: ${o.text}`); continue; }
  const check = ajv.compile(schema);
  if (check(value)) ++valid;
  else failures.push(`${name}: does not validate: ${ajv.errorsText(check.errors)}: ${o.text}`);
}
const supported = schemas.filter((s) => !s.refused).length;
const tokens = [...outputs.values()].filter((o) => o.tokens !== undefined).map((o) => o.tokens).sort((a, b) => a - b);
console.log(`structured_output_validity: ${valid} of ${supported} outputs complete, parsed and valid; ${refused} schemas ` +
            `refused as expected; ${failures.length} failures; reply tokens p50 ${tokens[tokens.length >> 1]}, max ` +
            `${tokens[tokens.length - 1]}`);
for (const f of failures.slice(0, 30)) console.log("  " + f);
process.exit(failures.length === 0 ? 0 : 1);
