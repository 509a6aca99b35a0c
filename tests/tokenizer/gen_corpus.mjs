// Deterministic tokenizer test corpus: node gen_corpus.mjs OUT.json [--seed N] [--count N]
//
// Writes {"seed": N, "strings": [{"cat": "...", "hex": "..."}, ...]}. Every string is stored as the hex
// of its raw bytes, because some are deliberately invalid UTF-8 and must not pass through a JS string.
// The same seed always gives the same file (own PRNG, no Math.random, no dates, no locale).
//
// Character pools stick to code points whose Unicode properties (L, N, White_Space) are the same in
// Unicode 14 (PCRE2 10.42, used by runtime/tokenizer.cpp) and in Node's newer ICU; see README.md.
import fs from "node:fs";

const args = process.argv.slice(2);
if (args.length < 1) {
  console.error("usage: node gen_corpus.mjs OUT.json [--seed N] [--count N]");
  process.exit(2);
}
const out_path = args[0];
let seed = 20240611;
let total = 12000;
for (let i = 1; i < args.length; ++i) {
  if (args[i] === "--seed") seed = Number(args[++i]);
  else if (args[i] === "--count") total = Number(args[++i]);
  else throw new Error(`unknown argument ${args[i]}`);
}

// ---- PRNG (mulberry32) ------------------------------------------------------------------------
let state = seed >>> 0;
function rnd() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));  // inclusive
const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
const chance = (p) => rnd() < p;
const repeat = (n, f) => Array.from({ length: n }, f);
const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));

// ---- pools ----------------------------------------------------------------------------------------
const EN_WORDS = (
  "the of and to in is you that it he was for on are as with his they I at be this have from or one had " +
  "by word but not what all were we when your can said there use an each which she do how their if will " +
  "up other about out many then them these so some her would make like him into time has look two more " +
  "write go see number no way could people my than first water been call who oil its now find long down " +
  "day did get come made may part tokenizer model kernel decode batch latency throughput GPU CPU memory " +
  "Hello World OpenAI LLaMA Qwen Transformer attention softmax don't won't it's I'm you're we've they'll " +
  "she'd I'D YOU'RE WE'VE THEY'LL SHE'S isn't aren't O'Neil rock'n'roll ma'am y'all naïve café résumé " +
  "coöperate façade jalapeño über Zürich São Paulo Ångström"
).split(" ");
const PUNCT = [".", ",", "!", "?", ";", ":", "...", " -", " --", " —", "–", "(", ")", "\"", "'", "`", "«", "»", "“", "”", "‘", "’", "…"];
const CODE_LINES = [
  "int main(int argc, char** argv) {", "  return 0;", "}", "for (size_t i = 0; i < n; ++i) {",
  "    x[i] += y[i] * alpha;", "def forward(self, x):", "        return self.proj(x) @ W.T",
  "import numpy as np", "const f = async (a, b) => { await g(a ?? b); };", "#include <vector>",
  "std::vector<std::pair<int, float>> v{{1, 2.5f}};", "if (a && !b || c != d) { throw std::runtime_error(\"bad\"); }",
  "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;", "<div class=\"a\">&lt;b&gt;</div>",
  "fn main() { println!(\"{}\", x.unwrap_or_default()); }", "x = [i**2 for i in range(10) if i % 2 == 0]",
  "#!/usr/bin/env bash", "set -euo pipefail", "echo \"${HOME}/.cache\" | sed -e 's/a/b/g' >> /tmp/log",
  "\tmov rax, [rbp-0x18]", "/* comment */ // another", "a->b.c[d]::e<<=f>>=g", "0x7fffffff 0b1010 1e-9 3.14159f",
  "{\"key\": [1, 2, {\"nested\": null}], \"t\": true}", "  - name: build\n    run: cmake --build .",
  "\"\"\"docstring with 'quotes'\"\"\"", "lambda x: x if x else None", "@property", "__init__", "$$\\sum_{i=0}^{n} x_i^2$$",
];
const INDENTS = ["", "  ", "    ", "        ", "\t", "\t\t", "   "];
const HAN = [[0x4e00, 0x9fa5]];
const HIRAGANA = [[0x3041, 0x3096]];
const KATAKANA = [[0x30a1, 0x30fa]];
const HANGUL = [[0xac00, 0xd7a3]];
const CJK_PUNCT = ["。", "、", "，", "！", "？", "「", "」", "『", "』", "（", "）", "：", "；", "ー", "・", "〜", "　"];
const ZH_PHRASES = ["你好，世界", "机器学习", "大型语言模型", "今天天气很好。", "我们正在测试分词器", "中华人民共和国", "繁體中文測試"];
const JA_PHRASES = ["こんにちは世界", "東京都渋谷区", "カタカナとひらがな", "ｶﾀｶﾅ半角", "ありがとうございます。"];
const KO_PHRASES = ["안녕하세요", "대한민국", "토크나이저 테스트", "한국어 문장입니다."];
const ARABIC = [[0x0621, 0x064a]];
const ARABIC_PHRASES = ["مرحبا بالعالم", "اللغة العربية", "السلام عليكم", "٠١٢٣٤٥٦٧٨٩", "كتاب", "مُحَمَّد", "ﷺ"];
const HEBREW_PHRASES = ["שלום עולם", "עִבְרִית"];
const OTHER_PHRASES = [
  "Привет, мир!", "Ελληνικά γράμματα", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "ქართული", "Հայերեն",
  "ᚠᚢᚦᚨᚱᚲ", "Ꭰ Ꭱ Ꭲ", "ⓐⓑⓒ ①②③", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３", "½ ¼ ¾ ² ³ ¹ Ⅻ ⅷ", "µ Ω ℃ № ™ ©",
  "e\u0301 (e + combining acute)", "A\u030a vs Å vs \u212b", "\u1100\u1161\u11a8 (conjoining jamo)", "n\u0303o\u0308",
  "ﬁ ﬂ ﬀ ligatures", "Ǆǅǆ", "ß ẞ", "İstanbul ı", "\u0958\u0959 (composition exclusions)", "\u0344\u0340",
];
const EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "❤️", "❤", "🔥", "🎉", "🚀", "🤖", "🧠", "🇺🇸", "🇯🇵", "🇩🇪", "🏳️‍🌈",
  "🏴‍☠️", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑‍🤝‍🧑", "👁️‍🗨️", "🐕‍🦺", "1️⃣", "#️⃣", "©️", "☺︎", "🫠", "🦄", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👩‍❤️‍💋‍👨", "✍🏻", "🙇‍♀️"];
const WS_ATOMS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085",
  "\u000b", "\u000c", "\u2003", "\u200b", "\ufeff", "\u1680", "\u202f", "\u205f", "\u180e"];
const DIGIT_RUNS = () => {
  const kind = int(0, 7);
  const n = int(1, 40);
  switch (kind) {
    case 0: return repeat(n, () => String(int(0, 9))).join("");
    case 1: return `${int(0, 99999)}.${int(0, 99999)}`;
    case 2: return `${int(1, 999)},${String(int(0, 999)).padStart(3, "0")},${String(int(0, 999)).padStart(3, "0")}`;
    case 3: return repeat(n, () => cp(0x0660, 0x0669)).join("");       // Arabic-Indic digits
    case 4: return repeat(n, () => cp(0xff10, 0xff19)).join("");       // fullwidth digits
    case 5: return repeat(n, () => cp(0x0966, 0x096f)).join("");       // Devanagari digits
    case 6: return `-${int(0, 9)}e${int(-30, 30)}`;
    default: return repeat(n, () => pick(["1", "2", "²", "½", "Ⅷ", "٣", "3", "0"])).join("");
  }
};

// Special-token look-alikes (both models' real ones and broken variants).
const SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
  "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_0|>",
  "<|reserved_special_token_247|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",
  "<tool_call>", "</tool_call>", "<think>", "</think>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
  "<tool_response>", "</tool_response>", "<|file_sep|>"];
function broken_special() {
  const s = pick(SPECIALS);
  switch (int(0, 11)) {
    case 0: return s.slice(0, int(1, s.length - 1));                       // truncated
    case 1: return s.slice(int(1, s.length - 1));                          // missing head
    case 2: return s.toUpperCase();
    case 3: return s.replace("|", "| ");
    case 4: return s.replace(">", " >");
    case 5: return "<" + s;
    case 6: return s + s.slice(0, 3);
    case 7: return s.replace("_", "-");
    case 8: return "<|reserved_special_token_" + int(200, 400) + "|>";      // 256+ do not exist
    case 9: return s.slice(0, 4) + s;                                        // overlapping prefix
    case 10: return s.split("").join(pick(["", " ", "\u200b"]));
    default: return "\\" + s;
  }
}

// ---- generators (each returns a JS string or a Uint8Array) ------------------------------------------
const enc = new TextEncoder();
function from_ranges(ranges, n) {
  return repeat(n, () => { const r = pick(ranges); return cp(r[0], r[1]); }).join("");
}
function english() {
  const n = int(1, 30);
  let words = repeat(n, () => {
    let w = pick(EN_WORDS);
    if (chance(0.1)) w = w.toUpperCase();
    else if (chance(0.15)) w = w[0].toUpperCase() + w.slice(1);
    return w;
  });
  let s = "";
  for (const w of words) {
    s += (s && !chance(0.05) ? " " : "") + w;
    if (chance(0.12)) s += pick(PUNCT);
    if (chance(0.03)) s += pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'D"]);
    if (chance(0.02)) s += "\n";
  }
  if (chance(0.2)) s = " " + s;
  if (chance(0.2)) s += pick([".", "!", "?", "\n", " ", "  "]);
  return s;
}
function code() {
  const lines = repeat(int(1, 8), () => pick(INDENTS) + pick(CODE_LINES) + (chance(0.1) ? "   " : ""));
  return lines.join(pick(["\n", "\n", "\r\n", "\n\n"])) + (chance(0.5) ? "\n" : "");
}
function cjk() {
  const parts = repeat(int(1, 6), () => {
    switch (int(0, 7)) {
      case 0: return from_ranges(HAN, int(1, 20));
      case 1: return from_ranges(HIRAGANA, int(1, 10)) + from_ranges(KATAKANA, int(0, 5));
      case 2: return from_ranges(HANGUL, int(1, 12));
      case 3: return pick(ZH_PHRASES);
      case 4: return pick(JA_PHRASES);
      case 5: return pick(KO_PHRASES);
      case 6: return pick(CJK_PUNCT);
      default: return pick(EN_WORDS);
    }
  });
  return parts.join(pick(["", "", " ", "\n"]));
}
function emoji() {
  const parts = repeat(int(1, 10), () => chance(0.7) ? pick(EMOJI) : pick([" ", "a", "ok", "!", "\n", pick(EN_WORDS), "中文"]));
  return parts.join(chance(0.5) ? "" : " ");
}
function scripts() {
  const parts = repeat(int(1, 6), () => {
    switch (int(0, 5)) {
      case 0: return pick(ARABIC_PHRASES);
      case 1: return from_ranges(ARABIC, int(1, 12));
      case 2: return pick(HEBREW_PHRASES);
      case 3: return pick(OTHER_PHRASES);
      case 4: return from_ranges([[0x0391, 0x03a9], [0x03b1, 0x03c9], [0x0410, 0x044f], [0x00c0, 0x00ff], [0x0100, 0x017e]], int(1, 10));
      default: return pick(EN_WORDS);
    }
  });
  return parts.join(pick([" ", "", "\n", ", "]));
}
function whitespace() {
  switch (int(0, 5)) {
    case 0: return " ".repeat(int(1, 300));
    case 1: return repeat(int(1, 40), () => pick(WS_ATOMS)).join("");
    case 2: return pick(EN_WORDS) + " ".repeat(int(2, 64)) + pick(EN_WORDS) + " ".repeat(int(0, 5));
    case 3: return repeat(int(1, 6), () => pick(INDENTS) + pick(EN_WORDS)).join("\n") + "\n".repeat(int(0, 5));
    case 4: return "\t".repeat(int(1, 20)) + pick(CODE_LINES) + "\r\n".repeat(int(1, 4));
    default: return repeat(int(1, 10), () => pick(WS_ATOMS) + pick(["x", "1", "中", "!", "é", ""])).join("");
  }
}
function digits() {
  switch (int(0, 3)) {
    case 0: return repeat(int(1, 3), () => String(int(0, 9)).repeat(int(1, 3)) + DIGIT_RUNS()).join(" ");
    case 1: return repeat(int(1, 200), () => String(int(0, 9))).join("");
    case 2: return `${pick(EN_WORDS)} ${DIGIT_RUNS()}${pick(["", "%", "px", "$", "€", "kg"])} ${pick(EN_WORDS)}`;
    default: return `${int(1900, 2100)}-${String(int(1, 12)).padStart(2, "0")}-${String(int(1, 28)).padStart(2, "0")}T${int(0, 23)}:${int(10, 59)}:${int(10, 59)}.${int(0, 999999)}Z`;
  }
}
function specials() {
  const parts = repeat(int(1, 7), () => {
    switch (int(0, 5)) {
      case 0: case 1: return pick(SPECIALS);
      case 2: return broken_special();
      case 3: return pick(EN_WORDS);
      case 4: return pick(WS_ATOMS);
      default: return pick(["user", "assistant", "system", "\n\n", "Hello", "中文", "🙂"]);
    }
  });
  return parts.join(pick(["", "", " ", "\n"]));
}
// Invalid UTF-8 building blocks.
const BAD = [
  [0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xc2], [0xdf], [0xe0, 0x80, 0x80], [0xe0, 0x9f, 0xbf], [0xe2, 0x82],
  [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xf0, 0x80, 0x80, 0x80], [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80],
  [0xf5, 0x80, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xfe], [0xff], [0xc3, 0x28], [0xe2, 0x28, 0xa1],
  [0xf0, 0x28, 0x8c, 0xbc], [0xf0, 0x90, 0x28, 0xbc], [0xef, 0xbb, 0xbf], [0xef, 0xbf, 0xbd],
];
function invalid() {
  const chunks = [];
  for (let i = int(1, 8); i > 0; --i) {
    switch (int(0, 4)) {
      case 0: chunks.push(Uint8Array.from(pick(BAD))); break;
      case 1: chunks.push(Uint8Array.from(repeat(int(1, 12), () => int(0, 255)))); break;
      case 2: {  // valid text cut in the middle of a multi-byte sequence
        const b = enc.encode(pick([...ZH_PHRASES, ...EMOJI, ...ARABIC_PHRASES, ...OTHER_PHRASES]));
        chunks.push(b.slice(int(0, b.length - 1), int(1, b.length)));
        break;
      }
      default: chunks.push(enc.encode(pick([english(), cjk(), emoji(), " ", "\n", pick(SPECIALS)])));
    }
  }
  let len = 0;
  for (const c of chunks) len += c.length;
  const out = new Uint8Array(len);
  let o = 0;
  for (const c of chunks) { out.set(c, o); o += c.length; }
  return out;
}
function mixed() {
  const gens = [english, code, cjk, emoji, scripts, whitespace, digits, specials];
  return repeat(int(2, 5), () => pick(gens)()).join(pick(["", " ", "\n"]));
}
function random_codepoints() {
  // Broad random code points from ranges fully assigned since long before Unicode 14.
  const ranges = [[0x20, 0x7e], [0x00, 0x1f], [0xa0, 0x7ff], [0x0900, 0x097f], [0x0e00, 0x0e5b], [0x1e00, 0x1fff],
    [0x2000, 0x206f], [0x2100, 0x27bf], [0x3000, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xfb00, 0xfb06],
    [0xff01, 0xffee], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1d400, 0x1d6a5], [0x10000, 0x1000b]];
  // Skip code points whose meaning differs between the references (see README.md: case folding of U+017F,
  // U+212A; unassigned code points inside otherwise old blocks).
  const skip = (c) => c === 0x17f || c === 0x212a || /\p{Cn}/u.test(String.fromCodePoint(c));
  let s = "";
  for (let n = int(1, 40); n > 0;) {
    const r = pick(ranges);
    const c = int(r[0], r[1]);
    if (skip(c)) continue;
    s += String.fromCodePoint(c);
    --n;
  }
  return s;
}
function long_string() {
  switch (int(0, 4)) {
    case 0: return repeat(int(50, 200), english).join(" ");
    case 1: return " ".repeat(int(1000, 5000)) + "x";
    case 2: return repeat(int(1000, 6000), () => String(int(0, 9))).join("");
    case 3: return repeat(int(30, 80), code).join("\n");
    default: return repeat(int(30, 80), mixed).join("");
  }
}

// ---- assemble -----------------------------------------------------------------------------------------
const strings = [];
const add = (cat, v) => {
  const bytes = typeof v === "string" ? enc.encode(v) : v;
  strings.push({ cat, hex: Buffer.from(bytes).toString("hex") });
};

// Fixed edge cases first.
add("edge", "");
for (let b = 0; b < 128; ++b) add("edge", String.fromCharCode(b));
for (let c = 0x80; c < 0x100; ++c) add("edge", String.fromCharCode(c));
for (let b = 0x80; b < 0x100; ++b) add("edge_invalid", Uint8Array.of(b));
for (const s of SPECIALS) { add("special", s); add("special", ` ${s} `); add("special", `${s}${s}`); }
for (const s of ["<|eot_id|>", "<|im_end|>"]) for (let i = 1; i < s.length; ++i) add("special", s.slice(0, i) + "x" + s.slice(i));
for (const s of EMOJI) add("emoji", s);
for (const w of ["'s", "'S", "'ll", "'LL", "'Ll", "'lL", "don't", "DON'T", "I'M", "'re'", "''s", "'", "''"]) add("english", w);
add("edge", "\ufeffBOM at start");
add("edge_invalid", Uint8Array.of(0xef, 0xbb, 0xbf, 0x41));

const plan = [
  ["english", english, 0.15], ["code", code, 0.11], ["cjk", cjk, 0.09], ["emoji", emoji, 0.07],
  ["scripts", scripts, 0.09], ["whitespace", whitespace, 0.08], ["digits", digits, 0.07],
  ["special", specials, 0.08], ["invalid", invalid, 0.08], ["mixed", mixed, 0.08], ["random", random_codepoints, 0.094],
  ["long", long_string, 0.006],
];
const remaining = Math.max(0, total - strings.length);
for (const [cat, gen, share] of plan) {
  const n = Math.round(remaining * share);
  for (let i = 0; i < n; ++i) add(cat, gen());
}
while (strings.length < total) add("mixed", mixed());

fs.writeFileSync(out_path, JSON.stringify({ seed, strings }));
const counts = {};
for (const s of strings) counts[s.cat] = (counts[s.cat] ?? 0) + 1;
console.error(`gen_corpus: ${strings.length} strings (seed ${seed}) -> ${out_path}: ${JSON.stringify(counts)}`);
