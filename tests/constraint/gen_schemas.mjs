// The schemas of the structured-output tests and benchmark (docs/structured_output.md): 1,000 seeded
// random schemas covering every supported keyword, then schemas after the examples of OpenAI's
// structured-outputs guide. One JSON object a line: {"name", "schema"}. Deterministic: the same file every
// run (node tests/constraint/gen_schemas.mjs > tests/constraint/schemas.jsonl).
const COUNT = 1000;

// mulberry32: a small seeded generator, so that the file is the same everywhere.
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20261128);
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (xs) => xs[int(0, xs.length - 1)];
const chance = (p) => rand() < p;

const WORDS = ["name", "id", "title", "age", "email", "city", "tags", "score", "items", "status", "count", "price",
  "author", "date", "kind", "color", "notes", "rating", "active", "level", "owner", "label", "steps", "answer"];
const PATTERNS = ["^[a-z]+$", "^\\d{3}-\\d{4}$", "^[A-Z][a-z]*$", "^(red|green|blue)$", "^[a-f0-9]{8}$",
  "^\\w+@\\w+\\.com$", "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "^\\+?[0-9 ]{7,15}$", "^[^\\s]+$", "^[A-Z]{2,3}-\\d+$"];
const ENUM_STRINGS = ["low", "medium", "high", "yes", "no", "unknown", "draft", "done", "red", "blue"];

function stringSchema() {
  const s = { type: "string" };
  const r = rand();
  if (r < 0.25) {
    s.minLength = int(0, 4);
    s.maxLength = s.minLength + int(0, 24);
  } else if (r < 0.45) {
    s.pattern = pick(PATTERNS);
  } else if (r < 0.55) {
    s.pattern = pick(["^[a-z]+$", "^[A-Z][a-z]*$", "^[^\\s]+$"]);
    s.maxLength = int(3, 16);
  } else if (r < 0.65) {
    s.minLength = int(1, 3);
  }
  return s;
}

function leaf() {
  const r = rand();
  if (r < 0.35) return stringSchema();
  if (r < 0.5) return { type: "integer" };
  if (r < 0.6) return { type: "number" };
  if (r < 0.68) return { type: "boolean" };
  if (r < 0.72) return { type: "null" };
  if (r < 0.82) {
    const values = [...new Set(Array.from({ length: int(1, 4) }, () => pick(ENUM_STRINGS)))];
    return chance(0.5) ? { type: "string", enum: values } : { enum: chance(0.5) ? values : [...values, int(0, 9), null] };
  }
  if (r < 0.88) return { const: chance(0.5) ? pick(ENUM_STRINGS) : int(0, 99) };
  if (r < 0.94) return { type: ["string", "null"], ...(chance(0.5) ? { maxLength: int(4, 20) } : {}) };
  return { anyOf: [stringSchema(), { type: pick(["integer", "null", "boolean"]) }] };
}

function schema(depth, defs) {
  const r = rand();
  if (depth >= 3 || r < 0.45) return leaf();
  if (r < 0.7) return object(depth + 1, defs);
  if (r < 0.88) {
    const a = { type: "array", items: schema(depth + 1, defs) };
    if (chance(0.5)) a.minItems = int(0, 2);
    if (chance(0.5)) a.maxItems = (a.minItems ?? 0) + int(0, 4);
    return a;
  }
  // A definition used through $ref.
  const name = `def${Object.keys(defs).length}`;
  defs[name] = null;  // the name taken before the definition's own definitions take theirs
  defs[name] = object(depth + 1, defs);
  return { $ref: `#/$defs/${name}` };
}

function object(depth, defs) {
  const names = [...new Set(Array.from({ length: int(1, 5) }, () => pick(WORDS)))];
  const properties = {};
  for (const n of names) properties[n] = schema(depth, defs);
  const o = { type: "object", properties };
  const strict = chance(0.5);
  o.required = strict ? names : names.filter(() => chance(0.5));
  if (strict || chance(0.5)) o.additionalProperties = false;
  if (chance(0.15)) o.description = "an annotation, which constrains nothing";
  return o;
}

const out = [];
for (let i = 0; i < COUNT; ++i) {
  const defs = {};
  const s = object(0, defs);
  if (Object.keys(defs).length) s.$defs = defs;
  out.push({ name: `generated-${i}`, schema: s });
}

// After the examples of OpenAI's structured-outputs guide (the recursive UI example is refused: the
// tests expect its error).
out.push({ name: "openai-math-reasoning", schema: {
  type: "object", properties: {
    steps: { type: "array", items: { type: "object", properties: { explanation: { type: "string" }, output: { type: "string" } },
      required: ["explanation", "output"], additionalProperties: false } },
    final_answer: { type: "string" } },
  required: ["steps", "final_answer"], additionalProperties: false } });
out.push({ name: "openai-calendar-event", schema: {
  type: "object", properties: { name: { type: "string" }, date: { type: "string" }, participants: { type: "array", items: { type: "string" } } },
  required: ["name", "date", "participants"], additionalProperties: false } });
out.push({ name: "openai-research-paper", schema: {
  type: "object", properties: {
    title: { type: "string" }, authors: { type: "array", items: { type: "string" } }, abstract: { type: "string" },
    keywords: { type: "array", items: { type: "string" } } },
  required: ["title", "authors", "abstract", "keywords"], additionalProperties: false } });
out.push({ name: "openai-moderation", schema: {
  type: "object", properties: {
    is_violating: { type: "boolean", description: "Indicates if the content is violating guidelines" },
    category: { type: ["string", "null"], enum: ["violence", "sexual", "self_harm", null] },
    explanation_if_violating: { type: ["string", "null"] } },
  required: ["is_violating", "category", "explanation_if_violating"], additionalProperties: false } });
out.push({ name: "openai-definitions", schema: {
  type: "object", properties: { steps: { type: "array", items: { $ref: "#/$defs/step" } }, final_answer: { type: "string" } },
  $defs: { step: { type: "object", properties: { explanation: { type: "string" }, output: { type: "string" } },
    required: ["explanation", "output"], additionalProperties: false } },
  required: ["steps", "final_answer"], additionalProperties: false } });
out.push({ name: "openai-ui-recursive", refused: "recursive", schema: {
  type: "object", properties: {
    type: { type: "string", enum: ["div", "button", "header", "section", "field", "form"] },
    label: { type: "string" }, children: { type: "array", items: { $ref: "#" } },
    attributes: { type: "array", items: { type: "object", properties: { name: { type: "string" }, value: { type: "string" } },
      required: ["name", "value"], additionalProperties: false } } },
  required: ["type", "label", "children", "attributes"], additionalProperties: false } });

for (const o of out) console.log(JSON.stringify(o));
