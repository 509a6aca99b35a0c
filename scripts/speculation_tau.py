#!/usr/bin/env python3
"""Acceptance of greedy speculative decoding on a target/draft pair, measured on held-out standard-library
code: the mean tokens a verification step yields (tau), for prompt lookup and for a draft model.

    python3 scripts/speculation_tau.py --target DIR --draft models/pystdlib-6m --out tau.json

Greedy speculation yields exactly the target's greedy tokens (runtime/speculation.h), so its acceptance
is a property of those tokens and the drafter alone: this script generates the target's greedy
continuation once (transformers, fp32) and replays the drafter over it.
- Lookup: runtime/speculation.h's rule (the latest earlier occurrence of the newest 3, 2 or 1 tokens in
  the history; its continuation, at most k tokens).
- Draft model: the draft's own greedy continuation of the history, k tokens.
A step verifies the newest token and its drafts: it keeps the drafts up to the first that differs from
the target's token and adds the target's next token, so it yields (kept drafts + 1) tokens. The first
reply token comes from the prompt's last step and is not counted. tau = tokens yielded / verification
steps.

Three tasks, from the files train_tiny_model.py holds out (file i, sorted by path, with i % 50 == 25):
- continue: each held-out file's first 384 tokens, continued for 192;
- rewrite: a held-out function (10 to 40 lines), then its first line again with the name changed to
  NAME_v2: the target writes the function again (up to 256 tokens);
- chat: a held-out conversation's question (\"Write a Python function NAME(ARGS). ...\") in the chat
  template, answered until <|im_end|> (up to 256 tokens).
"""
import argparse
import ast
import json
import os
import sys
import sysconfig
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny_model as ttm  # noqa: E402  (the corpus, its held-out rule and the chat rendering)


def lookup_drafts(history, k, lookup_min=1, lookup_max=3):
    """runtime/speculation.h's lookup_drafts."""
    length = len(history)
    for n in range(lookup_max, lookup_min - 1, -1):
        if n < 1 or n >= length:
            continue
        tail = history[length - n:]
        for p in range(length - n - 1, -1, -1):
            if history[p:p + n] == tail:
                drafts = []
                for i in range(k):
                    src = p + n + i
                    drafts.append(history[src] if src < length else drafts[src - length])
                return drafts
    return []


def replay(prompt, reply, k, drafter):
    """(steps, drafted, kept) of speculative steps that yield `reply` (the target's greedy tokens)."""
    steps = drafted = kept = 0
    t = 1  # reply[0] comes from the prompt's last step
    while t < len(reply):
        history = prompt + reply[:t]
        want = min(k, len(reply) - t - 1)
        drafts = drafter(history, want) if want > 0 else []
        a = 0
        while a < len(drafts) and drafts[a] == reply[t + a]:
            a += 1
        steps += 1
        drafted += len(drafts)
        kept += a
        t += a + 1
    return steps, drafted, kept


@torch.no_grad()
def greedy(model, ids, n, stop_id, device):
    out = model.generate(torch.tensor([ids], device=device), max_new_tokens=n, do_sample=False,
                         eos_token_id=stop_id, pad_token_id=0)
    return out[0, len(ids):].tolist()


def functions_of(text, lo=10, hi=40):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.col_offset == 0 and lo <= node.end_lineno - node.lineno + 1 <= hi:
            found.append((node.name, "".join(lines[node.lineno - 1:node.end_lineno])))
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--text-dir", default=sysconfig.get_paths()["stdlib"])
    p.add_argument("--k", type=int, default=4, help="drafts a step, at most")
    p.add_argument("--per-task", type=int, default=12, help="prompts of each task, at most")
    p.add_argument("--out", required=True, help="JSON of every prompt's numbers")
    args = p.parse_args()
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    draft_tok = Tokenizer.from_file(os.path.join(args.draft, "tokenizer.json"))
    if tok.get_vocab() != draft_tok.get_vocab():
        raise SystemExit("target and draft tokenizers differ")
    target = LlamaForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(device).eval()
    draft = LlamaForCausalLM.from_pretrained(args.draft, dtype=torch.float32).to(device).eval()
    eot, im_end = tok.token_to_id(ttm.ENDOFTEXT), tok.token_to_id(ttm.IM_END)

    root = os.path.abspath(args.text_dir)
    docs, _ = ttm.read_sources(root, ttm.list_sources(root, 0))
    held = [d for i, d in enumerate(docs) if i % ttm.HELD_OUT_EVERY == ttm.HELD_OUT_EVERY // 2]

    prompts = {"continue": [], "rewrite": [], "chat": []}
    for rel, text in held:
        ids = tok.encode(ttm.ENDOFTEXT + text).ids
        if len(ids) > 384 + 192:
            prompts["continue"].append((rel, ids[:384], 192, eot))
    fns = [(rel, name, src) for rel, text in held for name, src in functions_of(text)]
    step = max(1, len(fns) // args.per_task)
    for rel, name, src in fns[::step][:args.per_task]:
        first = src.splitlines(keepends=True)[0].replace(f"def {name}(", f"def {name}_v2(", 1)
        prompts["rewrite"].append((f"{rel}:{name}", tok.encode(ttm.ENDOFTEXT + src + "\n\n" + first).ids, 256, eot))
    chats = [c for _, text in held for c in ttm.function_chats(text)]
    step = max(1, len(chats) // args.per_task)
    for c in chats[::step][:args.per_task]:
        question = c.split(ttm.IM_START + "assistant\n")[0]
        user = question.split(ttm.IM_START + "user\n", 1)[1].split(ttm.IM_END)[0]
        ids = tok.encode(ttm.render_chat([{"role": "user", "content": user}], True)).ids
        prompts["chat"].append((user[:60], ids, 256, im_end))
    prompts["continue"] = prompts["continue"][:args.per_task]

    def draft_model(history, want):
        out = draft.generate(torch.tensor([history], device=device), max_new_tokens=want, do_sample=False, pad_token_id=0)
        return out[0, len(history):].tolist()

    results = {"target": args.target, "draft": args.draft, "k": args.k, "tasks": {}}
    t0 = time.time()
    for task, items in prompts.items():
        rows = []
        for name, ids, n, stop in items:
            reply = greedy(target, ids, n, stop, device)
            row = {"prompt": name, "prompt_tokens": len(ids), "reply_tokens": len(reply)}
            for label, drafter in (("lookup", lambda h, w: lookup_drafts(h, w)), ("draft", draft_model)):
                s, d, a = replay(ids, reply, args.k, drafter)
                row[label] = {"steps": s, "drafted": d, "kept": a}
            rows.append(row)
        summary = {}
        for label in ("lookup", "draft"):
            steps = sum(r[label]["steps"] for r in rows)
            yielded = sum(r["reply_tokens"] - 1 for r in rows if r["reply_tokens"] > 1)
            drafted = sum(r[label]["drafted"] for r in rows)
            kept = sum(r[label]["kept"] for r in rows)
            summary[label] = {"tau": yielded / steps if steps else float("nan"), "steps": steps, "tokens": yielded,
                              "drafted": drafted, "kept": kept, "kept_fraction": kept / drafted if drafted else 0.0}
        results["tasks"][task] = {"summary": summary, "prompts": rows}
        print(f"{task:9s} {len(rows):2d} prompts  lookup tau {summary['lookup']['tau']:.2f} "
              f"({summary['lookup']['kept']}/{summary['lookup']['drafted']} drafts kept)  draft tau "
              f"{summary['draft']['tau']:.2f} ({summary['draft']['kept']}/{summary['draft']['drafted']})  "
              f"[{time.time() - t0:.0f}s]", flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
