#!/usr/bin/env python3
"""Trains the small Llama model shipped with monokernel (issue 16): a byte-level BPE tokenizer and a
~6.6M-parameter LlamaForCausalLM on the Python standard library's own sources, seeded.

    python3 scripts/train_tiny_model.py --out OUTDIR --device cuda --steps 3000 --max-minutes 6.5

Needs torch, transformers (4.5x or 5.x) and tokenizers; made for one H100 (a few minutes). The text is
the running Python's standard library (sysconfig's 'stdlib' path, *.py files, site-/dist-packages
left out; license: the PSF License Agreement), or --text-dir. Every 50th file (sorted by path) is held
out. Besides the raw files, the training stream holds a few ChatML conversations built from the
training files (user: "Write a Python function NAME(ARGS). <docstring summary>", assistant: the
function's source), so that the chat template works with mk-chat. Documents are shuffled (seeded) and
joined with <|endoftext|> in front of each.

OUTDIR receives exactly these 7 files (flat):
  config.json, generation_config.json, model.safetensors (bf16, tied embeddings),
  tokenizer.json, tokenizer_config.json (ChatML chat_template, eos <|im_end|>),
  TRAINING.md (how it was made, losses), training.json (the same, plus the loss curves and the
  self-check: prompt ids and 256 greedy tokens from transformers in fp32 on the CPU, with top-2 margins).

--max-minutes caps the whole run: after a few timed steps the step count is lowered (and the cosine
schedule re-planned) if --steps would not fit; training.json records the steps actually run, and
re-running with --steps set to that number reproduces the model (as far as torch is deterministic).
The self-check at the end reloads the saved files with transformers in fp32, prints greedy text and a
chat reply, and checks the file sizes (each file <= 16 MiB, the weights <= 16 MB, or --max-weights-mb);
the exit code is nonzero if any check fails, but the files are written first.

A target model for speculative decoding, with pystdlib-6m as its draft: the same text and held-out
files, the draft's tokenizer.json byte for byte (--tokenizer-from), a larger shape and weights limit
(docs/measurements/h200_2026-11-28_speculation_tau/ has the command; scripts/speculation_tau.py
measures the pair's acceptance).
"""
import argparse
import ast
import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import textwrap
import time
import warnings

# Before torch initialises CUDA: deterministic cuBLAS workspaces.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

T0 = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIALS = [ENDOFTEXT, IM_START, IM_END]  # ids 0, 1, 2
SYSTEM_PROMPT = "You are a helpful assistant that writes Python code."
# Qwen2.5's chat template (ChatML with tools and <tool_call> blocks), its default system prompt ours: the
# form runtime/chat_template.cpp recognises. For conversations without tools it renders as render_chat.
CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are a helpful assistant that writes Python code.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are a helpful assistant that writes Python code.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
    "")
TEXT_PROMPT = ENDOFTEXT + '"""Helpers for working with file paths."""\n\nimport os\n\n\ndef '
CHAT_PROMPT_USER = "Write a Python function is_palindrome(s). Return True if s reads the same forwards and backwards."
HELD_OUT_EVERY = 50
MAX_WEIGHTS_BYTES = 16_000_000
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_FILES = 8


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def render_chat(messages, add_generation_prompt):
    """CHAT_TEMPLATE rendered in Python (what transformers' apply_chat_template and mk-chat produce)."""
    out = ""
    if messages and messages[0]["role"] != "system":
        out += f"{IM_START}system\n{SYSTEM_PROMPT}{IM_END}\n"
    for m in messages:
        out += f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n"
    if add_generation_prompt:
        out += f"{IM_START}assistant\n"
    return out


# ---------------------------------------------------------------------------------------------------
# Text

def list_sources(root, max_files):
    """Sorted *.py files under root (relative paths), without site-packages / dist-packages / caches."""
    skip = {"site-packages", "dist-packages", "__pycache__"}
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for f in filenames:
            if f.endswith(".py"):
                found.append(os.path.relpath(os.path.join(dirpath, f), root))
    found.sort(key=lambda p: p.replace(os.sep, "/"))
    return found[:max_files] if max_files else found


def read_sources(root, rel_paths):
    """(path, text) of the files that are UTF-8 without NULs and do not contain our special tokens."""
    docs, skipped = [], []
    for rel in rel_paths:
        try:
            with open(os.path.join(root, rel), "rb") as f:
                raw = f.read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            skipped.append(rel)
            continue
        if not text.strip() or "\x00" in text or any(s in text for s in SPECIALS):
            skipped.append(rel)
            continue
        docs.append((rel, text))
    return docs, skipped


def function_chats(text):
    """ChatML conversations from the documented functions of one source file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(text)
        except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError on odd test files
            return []
    lines = [line + "\n" for line in text.split("\n")]  # ast counts \n (and \r\n) lines, not \f or \x1c
    chats = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        summary = " ".join(doc.strip().split("\n\n")[0].split())
        if not 10 <= len(summary) <= 300:
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        src = textwrap.dedent("".join(lines[start - 1:node.end_lineno])).rstrip()
        if len(src) > 1500 or not src.lstrip().startswith(("def ", "async def ", "@")):
            continue
        try:
            args = ast.unparse(node.args)
        except Exception:
            continue
        user = f"Write a Python function {node.name}({args}). {summary}"
        chats.append(render_chat([{"role": "user", "content": user}, {"role": "assistant", "content": src}], False))
    return chats


# ---------------------------------------------------------------------------------------------------
# Tokenizer

def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    # runtime/tokenizer.cpp: ByteLevel pre-tokenizer with the GPT-2 regex, ByteLevel decoder, no normalizer.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"tokenizer: {s} has id {tok.token_to_id(s)}, expected {i}")
    return tok


def check_tokenizer_json(path):
    """The parts of tokenizer.json that runtime/tokenizer.cpp requires (it rejects anything else)."""
    j = json.load(open(path, encoding="utf-8"))
    m = j["model"]
    problems = []
    if m.get("type") != "BPE" or m.get("byte_fallback") or m.get("continuing_subword_prefix") or m.get(
            "end_of_word_suffix") or m.get("dropout"):
        problems.append(f"model: {dict((k, v) for k, v in m.items() if k not in ('vocab', 'merges'))}")
    if j.get("normalizer") is not None:
        problems.append(f"normalizer {j['normalizer']}")
    if (j.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        problems.append(f"pre_tokenizer {j.get('pre_tokenizer')}")
    if (j.get("decoder") or {}).get("type") != "ByteLevel":
        problems.append(f"decoder {j.get('decoder')}")
    from tokenizers import pre_tokenizers
    missing = [c for c in pre_tokenizers.ByteLevel.alphabet() if c not in m["vocab"]]
    if missing:
        problems.append(f"{len(missing)} byte-level characters missing from the vocabulary")
    added = {a["content"]: a for a in j.get("added_tokens", [])}
    for i, s in enumerate(SPECIALS):
        if s not in added or added[s]["id"] != i or not added[s]["special"]:
            problems.append(f"added token {s}: {added.get(s)}")
    return problems


def write_tokenizer_config(path, max_len):
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, s in enumerate(SPECIALS)},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")


def encode_stream(tok, docs):
    """One token stream: <|endoftext|> before each document."""
    out = []
    for enc in tok.encode_batch(docs):
        out.append(0)
        out.extend(enc.ids)
    return torch.tensor(out, dtype=torch.int32)


# ---------------------------------------------------------------------------------------------------
# Model

def make_config(args, vocab_size):
    from transformers import LlamaConfig

    # rope_theta is LlamaConfig's default (10000): transformers 4 writes it as "rope_theta", 5 inside
    # "rope_parameters"; runtime/model_config.cpp reads both.
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, hidden_act="silu", max_position_embeddings=2048,
        rms_norm_eps=1e-5, initializer_range=0.02, tie_word_embeddings=True, attention_bias=False,
        mlp_bias=False, attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def check_shapes(args):
    """What device/gpu_backend.cu's validate_model accepts (and what the weights budget allows)."""
    hd = args.hidden // args.heads
    errors = []
    if args.hidden % args.heads:
        errors.append("hidden must be a multiple of heads")
    if args.heads % args.kv_heads:
        errors.append("heads must be a multiple of kv-heads")
    if args.hidden % 8 or args.intermediate % 8 or hd % 8 or hd > 256:
        errors.append("hidden, intermediate and head_dim must be multiples of 8, head_dim <= 256")
    if args.heads // args.kv_heads > 16:
        errors.append("at most 16 query heads per kv head")
    if errors:
        raise SystemExit("bad model shape: " + "; ".join(errors))


def lr_at(step, total, warmup, peak, floor_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_ratio + (1 - floor_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def windows(stream, seq_len):
    """Non-overlapping (input, target) windows of a stream, in order."""
    n = (len(stream) - 1) // seq_len
    x = stream[:n * seq_len].view(n, seq_len)
    y = stream[1:n * seq_len + 1].view(n, seq_len)
    return x, y


@torch.no_grad()
def evaluate(model, stream, seq_len, batch, device, autocast, max_windows=None):
    """Mean next-token loss (nats/token) over non-overlapping windows; (loss, tokens)."""
    was_training = model.training
    model.eval()
    x_all, y_all = windows(stream, seq_len)
    if max_windows is not None:
        x_all, y_all = x_all[:max_windows], y_all[:max_windows]
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for i in range(0, len(x_all), batch):
        x = x_all[i:i + batch].to(device).long()
        y = y_all[i:i + batch].to(device).long()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").double()
        count += y.numel()
    model.train(was_training)
    return float(total) / max(1, count), count


def load_fp32(model_cls, path, **kw):
    """The saved bf16 weights as float32 (transformers 5 would keep bf16 unless asked)."""
    model = model_cls.from_pretrained(path, dtype=torch.float32, **kw)
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise RuntimeError(f"reloaded model has dtypes {dtypes}, expected float32")
    return model


@torch.no_grad()
def greedy(model, ids, steps, stop_ids=()):
    """Greedy continuation with a KV cache; tokens and the top-2 logit margin at each step."""
    out, margins, past = [], [], None
    inp = torch.tensor([ids])
    for _ in range(steps):
        res = model(input_ids=inp, past_key_values=past, use_cache=True)
        past = res.past_key_values
        top2 = torch.topk(res.logits[0, -1].float(), 2)
        t = int(top2.indices[0])
        out.append(t)
        margins.append(float(top2.values[0] - top2.values[1]))
        if t in stop_ids:
            break
        inp = torch.tensor([[t]])
    return out, margins


# ---------------------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (flat; created)")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps (lowered to fit --max-minutes)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--text-dir", default=sysconfig.get_paths()["stdlib"],
                   help="directory of *.py training text (default: this Python's standard library)")
    p.add_argument("--max-minutes", type=float, default=6.5, help="wall-time cap for the whole script")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=150)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--chat-fraction", type=float, default=0.15,
                   help="conversations as a fraction of the raw training bytes")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--max-files", type=int, default=0, help="use only the first N files (smoke tests)")
    p.add_argument("--tokenizer-from", default="",
                   help="take tokenizer.json from this model directory instead of training one (a target model "
                        "for a draft model's vocabulary, e.g. models/pystdlib-6m)")
    p.add_argument("--max-weights-mb", type=float, default=MAX_WEIGHTS_BYTES / 1e6,
                   help="the weights' size limit in MB (the shipped model's: 16; a larger model is regenerated "
                        "by this script, not shipped)")
    p.add_argument("--title", default="The tiny trained model", help="TRAINING.md's heading")
    return p.parse_args()


def main():
    args = parse_args()
    check_shapes(args)
    deadline = T0 + args.max_minutes * 60 - 75  # leave time to save, evaluate and self-check
    device = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    autocast = args.device == "cuda"
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False

    import tokenizers
    import transformers
    from transformers import GenerationConfig, LlamaForCausalLM
    transformers.logging.set_verbosity_error()
    os.makedirs(args.out, exist_ok=True)

    # ---- text ----
    root = os.path.abspath(args.text_dir)
    rel_paths = list_sources(root, args.max_files)
    docs, skipped = read_sources(root, rel_paths)
    held = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY == HELD_OUT_EVERY // 2]
    train = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY != HELD_OUT_EVERY // 2]
    corpus_hash = hashlib.sha256()
    for rel, text in docs:
        corpus_hash.update(rel.replace(os.sep, "/").encode() + b"\0" + text.encode() + b"\0")
    train_bytes = sum(len(t.encode()) for _, t in train)
    held_bytes = sum(len(t.encode()) for _, t in held)
    log(f"text: {root}: {len(docs)} files used ({len(skipped)} skipped: not UTF-8 / NUL / special tokens), "
        f"train {len(train)} files {train_bytes / 1e6:.1f} MB, held out {len(held)} files {held_bytes / 1e6:.2f} MB")
    if not held:
        raise SystemExit(f"need at least {HELD_OUT_EVERY // 2 + 1} files to hold one out")
    if train_bytes < 5e6 and not args.max_files:
        log("WARNING: less than 5 MB of training text; is the standard library complete here?")

    # ---- conversations ----
    # ast over ~30 MB takes ~20 s on one core: use a process pool (before tokenizers or CUDA start threads).
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(max(1, min(16, os.cpu_count() or 1))) as pool:
        per_file = pool.map(function_chats, [t for _, t in docs], chunksize=4)
    is_held = [i % HELD_OUT_EVERY == HELD_OUT_EVERY // 2 for i in range(len(docs))]
    chats_train = [c for chats, h in zip(per_file, is_held) if not h for c in chats]
    chats_held = [c for chats, h in zip(per_file, is_held) if h for c in chats]
    random.Random(args.seed).shuffle(chats_train)
    budget, kept = args.chat_fraction * train_bytes, []
    for c in chats_train:
        budget -= len(c.encode())
        if budget < 0:
            break
        kept.append(c)
    log(f"conversations: {len(kept)} of {len(chats_train)} for training, {len(chats_held)} held out")

    # ---- tokenizer ----
    tok_path = os.path.join(args.out, "tokenizer.json")
    if args.tokenizer_from:
        import shutil
        shutil.copyfile(os.path.join(args.tokenizer_from, "tokenizer.json"), tok_path)
        tok = tokenizers.Tokenizer.from_file(tok_path)
        for i, sp in enumerate(SPECIALS):
            if tok.token_to_id(sp) != i:
                raise SystemExit(f"--tokenizer-from {args.tokenizer_from}: {sp} has id {tok.token_to_id(sp)}, expected {i}")
    else:
        tok = train_tokenizer([t for _, t in train], args.vocab_size)
        tok.save(tok_path)
    write_tokenizer_config(os.path.join(args.out, "tokenizer_config.json"), 2048)
    problems = check_tokenizer_json(tok_path)
    if problems:
        raise SystemExit("tokenizer.json would not load in runtime/tokenizer.cpp: " + "; ".join(problems))
    for _, text in held[:5]:
        if tok.decode(tok.encode(text).ids, skip_special_tokens=False) != text:
            raise SystemExit("tokenizer: decode(encode(text)) != text on held-out text")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    model_vocab = -(-vocab // 64) * 64
    log(f"tokenizer: {vocab} tokens (model rows {model_vocab})")

    train_docs = [t for _, t in train] + kept
    random.Random(args.seed + 1).shuffle(train_docs)
    train_stream = encode_stream(tok, train_docs)
    held_stream = encode_stream(tok, [t for _, t in held])
    held_chat_stream = encode_stream(tok, chats_held) if chats_held else None
    if train_stream.max() >= vocab or (train_stream == 1).sum() < len(kept):
        raise SystemExit("tokenizer: special tokens not encoded as expected")
    log(f"tokens: train {len(train_stream)}, held out {len(held_stream)} "
        f"({held_bytes / len(held_stream):.2f} bytes/token)")

    # ---- model ----
    torch.manual_seed(args.seed)
    cfg = make_config(args, model_vocab)
    model = LlamaForCausalLM(cfg).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    max_weights = int(args.max_weights_mb * 1e6)
    if 2 * n_params > max_weights - 100_000:
        raise SystemExit(f"{n_params} parameters do not fit {max_weights} bytes in bf16 (--max-weights-mb)")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if args.device == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kw)
    log(f"model: {n_params} parameters ({2 * n_params / 1e6:.2f} MB in bf16), hidden {args.hidden}, "
        f"{args.layers} layers, {args.heads} heads / {args.kv_heads} kv heads, head_dim {args.hidden // args.heads}, "
        f"intermediate {args.intermediate}, vocab {model_vocab}")

    # ---- training ----
    gen = torch.Generator().manual_seed(args.seed)
    data = train_stream.to(device)
    offsets = torch.arange(args.seq_len + 1, device=device)
    total = args.steps
    tokens_per_step = args.batch_size * args.seq_len
    log_every = max(1, min(100, total // 30))
    curve, evals = [], []
    running, running_n, last_log = torch.zeros((), device=device), 0, time.time()
    train_t0, calibrate_at, stop_reason = time.time(), min(30, total), None
    step = 0
    while step < total:
        if step == 5:
            if args.device == "cuda":
                torch.cuda.synchronize()
            t5 = time.time()
        if step == calibrate_at and step > 5:
            if args.device == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - t5) / (step - 5)
            fit = step + int((deadline - time.time()) / per_step * 0.95)
            log(f"{per_step * 1e3:.1f} ms/step; {total} steps need {per_step * total / 60:.1f} min")
            if fit < total:
                log(f"lowering steps from {total} to {fit} to fit --max-minutes {args.max_minutes}")
                total = fit
        if time.time() > deadline:
            stop_reason = f"stopped at step {step} of {total} by --max-minutes"
            log(stop_reason)
            break
        lr = lr_at(step, total, min(args.warmup, total // 10 + 1), args.lr, 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - args.seq_len - 1, (args.batch_size,), generator=gen).to(device)
        chunk = data[starts[:, None] + offsets].long()
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running += loss.detach()
        running_n += 1
        step += 1
        if step % log_every == 0 or step == total:
            avg = float(running) / running_n
            now = time.time()
            tps = running_n * tokens_per_step / (now - last_log)
            curve.append({"step": step, "loss": avg, "lr": lr})
            log(f"step {step}/{total} loss {avg:.4f} lr {lr:.2e} {tps / 1e3:.0f}k tok/s")
            running, running_n, last_log = torch.zeros((), device=device), 0, now
        if step % args.eval_every == 0 and step < total:
            h, _ = evaluate(model, held_stream, args.seq_len, args.batch_size, device, autocast, max_windows=64)
            evals.append({"step": step, "held_out_loss": h})
            log(f"step {step}: held-out loss {h:.4f} (first 64 windows, bf16 autocast)")
    train_seconds = time.time() - train_t0
    steps_run = step
    tokens_seen = steps_run * tokens_per_step
    final_train_loss = curve[-1]["loss"] if curve else float("nan")
    log(f"trained {steps_run} steps, {tokens_seen / 1e6:.1f}M tokens "
        f"({tokens_seen / len(train_stream):.1f} epochs) in {train_seconds:.0f}s")

    # ---- save (bf16) ----
    model.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=[2, 0], pad_token_id=0)
    model = model.to(torch.bfloat16).cpu()
    model.save_pretrained(args.out)  # safetensors (the only format in transformers 5, the default in 4)
    del model, opt, data
    if args.device == "cuda":
        torch.cuda.empty_cache()
    log(f"saved {sorted(os.listdir(args.out))}")

    # ---- reload in fp32: held-out loss of the shipped weights, then the self-check ----
    failures = []
    results = {}
    messages = [{"role": "user", "content": CHAT_PROMPT_USER}]
    chat_text = render_chat(messages, True)
    try:
        ref = load_fp32(LlamaForCausalLM, args.out).to(device).eval()
        torch.set_float32_matmul_precision("highest")  # the default: no TF32 in the fp32 evaluation
        ev_batch = max(1, args.batch_size // 2)
        results["held_out_loss"], results["held_out_tokens"] = evaluate(
            ref, held_stream, args.seq_len, ev_batch, device, False)
        n_windows = (len(held_stream) - 1) // args.seq_len
        results["train_eval_loss"], _ = evaluate(ref, train_stream, args.seq_len, ev_batch, device, False,
                                                 max_windows=n_windows)
        if held_chat_stream is not None and len(held_chat_stream) > args.seq_len + 1:
            results["held_out_chat_loss"], _ = evaluate(ref, held_chat_stream, args.seq_len, ev_batch, device, False)
        results["held_out_bits_per_byte"] = (results["held_out_loss"] * len(held_stream) / held_bytes / math.log(2))
        log(f"fp32 on the saved bf16 weights: held-out loss {results['held_out_loss']:.4f} nats/token "
            f"({results['held_out_bits_per_byte']:.3f} bits/byte), same number of training windows "
            f"{results['train_eval_loss']:.4f}, held-out conversations {results.get('held_out_chat_loss', float('nan')):.4f}")
        del ref
    except Exception as e:  # keep going: the files are written, report at the end
        failures.append(f"held-out evaluation: {type(e).__name__}: {e}")
        log(f"FAILED: {failures[-1]}")

    try:
        torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
        ref = load_fp32(LlamaForCausalLM, args.out, attn_implementation="eager").eval()
        prompt_ids = tok.encode(TEXT_PROMPT).ids
        toks, margins = greedy(ref, prompt_ids, 256)
        text = tok.decode(prompt_ids + toks[:64], skip_special_tokens=False)
        log("greedy text (64 tokens, transformers fp32 on the CPU):\n" + text + "\n" + "-" * 60)
        results["text_prompt"] = TEXT_PROMPT
        results["text_prompt_ids"] = prompt_ids
        results["greedy_256"] = toks
        results["greedy_256_top2_margins"] = margins
        results["greedy_256_text"] = tok.decode(toks, skip_special_tokens=False)

        chat_ids = tok.encode(chat_text).ids
        reply, _ = greedy(ref, chat_ids, 200, stop_ids=(2, 0))
        reply_text = tok.decode(reply, skip_special_tokens=True)
        log(f"chat: {CHAT_PROMPT_USER!r} ->\n{reply_text}\n" + "-" * 60)
        results["chat_prompt_ids"] = chat_ids
        results["chat_reply_ids"] = reply
        results["chat_reply_text"] = reply_text
        if 2 not in reply:
            log("note: the chat reply did not end with <|im_end|> within 200 tokens")
        del ref
    except Exception as e:
        failures.append(f"greedy self-check: {type(e).__name__}: {e}")
        log(f"FAILED: {failures[-1]}")

    try:  # transformers' own view of the tokenizer files and the chat template
        from transformers import AutoTokenizer
        hf_tok = AutoTokenizer.from_pretrained(args.out)
        problems = []
        rendered = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if rendered != chat_text:
            problems.append(f"AutoTokenizer: apply_chat_template gives {rendered!r}, expected {chat_text!r}")
        hf_ids = list(hf_tok(TEXT_PROMPT, add_special_tokens=True)["input_ids"])
        if hf_ids != tok.encode(TEXT_PROMPT).ids:
            problems.append(f"AutoTokenizer encodes the prompt as {hf_ids[:12]}..., tokenizers as "
                            f"{tok.encode(TEXT_PROMPT).ids[:12]}...")
        failures += problems
        log(f"AutoTokenizer ({type(hf_tok).__name__}): " + ("; ".join(problems) if problems else
                                                          "chat template and prompt ids agree"))
    except Exception as e:
        failures.append(f"AutoTokenizer check: {type(e).__name__}: {e}")
        log(f"FAILED: {failures[-1]}")

    # ---- notes ----
    wall = time.time() - T0
    info = {
        "seed": args.seed,
        "title": args.title,
        "tokenizer_from": args.tokenizer_from,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "steps_requested": args.steps,
        "steps": steps_run,
        "stop_reason": stop_reason,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "tokens_per_step": tokens_per_step,
        "tokens_seen": tokens_seen,
        "epochs": tokens_seen / len(train_stream),
        "optimizer": {"name": "AdamW", "lr": args.lr, "betas": [0.9, 0.95], "weight_decay": args.weight_decay,
                      "warmup": min(args.warmup, total // 10 + 1), "schedule": "cosine to 10% of peak",
                      "grad_clip": 1.0, "precision": "bf16 autocast" if autocast else "fp32"},
        "final_train_loss": final_train_loss,
        "loss_curve": curve,
        "held_out_evals": evals,
        "parameters": n_params,
        "model": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                                "num_attention_heads", "num_key_value_heads", "head_dim",
                                                "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings")},
        "tokenizer_vocab": vocab,
        "text": {"source": root, "license": "PSF License Agreement (the Python standard library's sources)",
                 "python_version": sys.version, "files": len(docs), "skipped_files": skipped[:50],
                 "train_files": len(train), "held_out_files": [r for r, _ in held],
                 "held_out_rule": f"file i (sorted by path) with i % {HELD_OUT_EVERY} == {HELD_OUT_EVERY // 2}",
                 "train_bytes": train_bytes, "held_out_bytes": held_bytes, "sha256": corpus_hash.hexdigest(),
                 "conversations_train": len(kept), "conversations_held_out": len(chats_held),
                 "train_tokens": len(train_stream), "held_out_tokens": len(held_stream)},
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "train_seconds": train_seconds,
        "wall_seconds": wall,
        "self_check": results,
        "failures": failures,
    }
    with open(os.path.join(args.out, "training.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(args.out, "TRAINING.md"), "w", encoding="utf-8") as f:
        f.write(training_md(info))

    # ---- file checks ----
    files = sorted(os.listdir(args.out))
    sizes = {n: os.path.getsize(os.path.join(args.out, n)) for n in files}
    log("files: " + ", ".join(f"{n} {s / 1e6:.2f} MB" for n, s in sizes.items()))
    if len(files) > MAX_FILES:
        failures.append(f"{len(files)} files in {args.out}, at most {MAX_FILES}")
    for n, s in sizes.items():
        if s > MAX_FILE_BYTES and n != "model.safetensors":
            failures.append(f"{n} is {s} bytes, more than 16 MiB")
    if sizes.get("model.safetensors", max_weights + 1) > max_weights:
        failures.append(f"model.safetensors is {sizes.get('model.safetensors')} bytes (at most {max_weights})")
    for n in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if n not in sizes:
            failures.append(f"{n} missing")
    log(f"wall time {wall / 60:.1f} min")
    if failures:
        log("FAILED:\n  " + "\n  ".join(failures))
        return 1
    log("PASS")
    return 0


def training_md(info):
    sc, t, v = info["self_check"], info["text"], info["versions"]
    m = info["model"]
    tokenizer_line = (
        f"- Tokenizer: {info['tokenizer_from']}'s tokenizer.json, byte for byte (the same vocabulary and special tokens)."
        if info["tokenizer_from"] else
        f"- Tokenizer: byte-level BPE (HF tokenizers {v['tokenizers']}, GPT-2 pre-tokenizer regex), trained on the "
        "training files only. Special tokens `<|endoftext|>` (0, put before every document), `<|im_start|>` (1), "
        "`<|im_end|>` (2, the EOS). ChatML chat template with a default system prompt.")
    lines = [
        f"# {info['title']}",
        "",
        f"A {info['parameters'] / 1e6:.2f}M-parameter `LlamaForCausalLM` (bf16, tied embeddings)"
        + (" trained from scratch" if info["tokenizer_from"] else " and its byte-level BPE tokenizer, both trained from scratch")
        + " by `scripts/train_tiny_model.py` on the Python standard library's sources.",
        "",
        f"- Command: `{info['command']}` (seed {info['seed']}).",
        f"- Shape: hidden {m['hidden_size']}, {m['num_hidden_layers']} layers, {m['num_attention_heads']} query heads / "
        f"{m['num_key_value_heads']} kv heads, head_dim {m['head_dim']}, intermediate {m['intermediate_size']}, "
        f"vocab {m['vocab_size']} ({info['tokenizer_vocab']} tokens), RoPE theta 10000, max positions "
        f"{m['max_position_embeddings']} (trained at {info['seq_len']}).",
        tokenizer_line,
        f"- Text: {t['source']} ({t['python_version'].split()[0]}), {t['files']} `*.py` files, sha256 {t['sha256'][:16]}..."
        f"; license: {t['license']}. Held out: {len(t['held_out_files'])} files ({t['held_out_rule']}), "
        f"{t['held_out_tokens']} tokens. Training: {t['train_files']} files, {t['train_tokens']} tokens including "
        f"{t['conversations_train']} ChatML conversations built from documented functions.",
        f"- Training: {info['steps']} steps (asked {info['steps_requested']}{'; ' + info['stop_reason'] if info['stop_reason'] else ''}) of "
        f"{info['batch_size']} x {info['seq_len']} tokens = {info['tokens_seen'] / 1e6:.1f}M tokens "
        f"({info['epochs']:.1f} epochs), AdamW lr {info['optimizer']['lr']} with warmup and cosine decay, "
        f"{info['optimizer']['precision']}, {info['train_seconds']:.0f} s on {info['device']}; whole script "
        f"{info['wall_seconds'] / 60:.1f} min.",
        f"- Versions: Python {v['python']}, torch {v['torch']} (CUDA {v['cuda']}), transformers {v['transformers']}, "
        f"tokenizers {v['tokenizers']}.",
        "",
        "## Losses (nats/token)",
        "",
        f"- Final training loss (mean of the last logged steps): {info['final_train_loss']:.4f}",
    ]
    if "held_out_loss" in sc:
        lines += [
            f"- Held-out loss: **{sc['held_out_loss']:.4f}** ({sc['held_out_bits_per_byte']:.3f} bits/byte) over "
            f"{sc['held_out_tokens']} tokens; the saved bf16 weights in fp32 math, windows of {info['seq_len']}.",
            f"- The same measure on as many training windows: {sc['train_eval_loss']:.4f}.",
        ]
        if "held_out_chat_loss" in sc:
            lines.append(f"- Held-out conversations (whole text): {sc['held_out_chat_loss']:.4f}.")
    if "greedy_256_text" in sc:
        lines += ["", "## Greedy text (transformers, fp32, CPU)", "", "```python",
                  (sc["text_prompt"] + sc["greedy_256_text"]).replace("<|endoftext|>", "\n# <|endoftext|>\n"), "```",
                  "", "Chat: " + CHAT_PROMPT_USER, "", "```python", sc.get("chat_reply_text", ""), "```"]
    if info["failures"]:
        lines += ["", "## Failed checks", ""] + [f"- {x}" for x in info["failures"]]
    lines += ["", "training.json has the loss curves, the prompt ids and the 256 greedy tokens with their top-2 margins.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
