#!/usr/bin/env python3
"""The PyTorch peer for mk-bench: a gpt-fast-style batch-1 decode (fused QKV, static KV cache,
torch.compile(mode="reduce-overhead") so that each token replays one CUDA graph), random bf16 weights at
a real Llama shape. Prints ms/token at a given context depth, as JSON on the last line.

    python3 bench/pytorch_peer.py --preset llama-3.2-1b --depth 1024 --tokens 128 --reps 3

Like gpt-fast, attention runs over the whole static cache with a mask (max_seq = depth + tokens).

With --prompts L1,L2,... it times prefill instead (issue 14's peer): the same model's bf16 forward over a
prompt of L tokens from position 0, attention by SDPA with is_causal (flash attention), the K/V written
to the cache, logits only at the last position. Eager by default; --compile compiles it per length
(torch.compile mode="reduce-overhead": fused kernels replayed as a CUDA graph, so short prompts do not pay
eager launches). Prints the time to the first token per length.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # hidden, intermediate, layers, heads, kv heads, head_dim, vocab, tied
    "llama-3.2-1b": (2048, 8192, 16, 32, 8, 64, 128256, True),
    "llama-3.2-3b": (3072, 8192, 28, 24, 8, 128, 128256, True),
    "llama-3.1-8b": (4096, 14336, 32, 32, 8, 128, 128256, False),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):  # x [B, H, 1, D]; rotate_half convention
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, h, inter, nh, nkv, hd, max_seq):
        super().__init__()
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.wqkv = nn.Linear(h, (nh + 2 * nkv) * hd, bias=False)
        self.wo = nn.Linear(nh * hd, h, bias=False)
        self.w13 = nn.Linear(h, 2 * inter, bias=False)
        self.w2 = nn.Linear(inter, h, bias=False)
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.register_buffer("k_cache", torch.zeros(1, nkv, max_seq, hd, dtype=torch.bfloat16))
        self.register_buffer("v_cache", torch.zeros(1, nkv, max_seq, hd, dtype=torch.bfloat16))

    def forward(self, x, pos, cos, sin, mask):
        n = x.shape[1]  # 1 when decoding; the prompt's length in a prefill (mask None: causal over it)
        q, k, v = self.wqkv(self.n1(x)).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = rope(q.view(1, n, self.nh, self.hd).transpose(1, 2), cos, sin)
        k = rope(k.view(1, n, self.nkv, self.hd).transpose(1, 2), cos, sin)
        v = v.view(1, n, self.nkv, self.hd).transpose(1, 2)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(1, n, -1))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self, preset, max_seq):
        super().__init__()
        h, inter, layers, nh, nkv, hd, vocab, tied = PRESETS[preset]
        self.embed = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, inter, nh, nkv, hd, max_seq) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.out = nn.Linear(h, vocab, bias=False)
        if tied:
            self.out.weight = self.embed.weight
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(max_seq).float()[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().to(torch.bfloat16))
        self.register_buffer("sin", ang.sin().to(torch.bfloat16))
        self.register_buffer("causal", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)))

    def forward(self, token, pos):
        x = self.embed(token).view(1, 1, -1)
        cos, sin, mask = self.cos[pos], self.sin[pos], self.causal[pos].view(1, 1, 1, -1)
        for b in self.blocks:
            x = b(x, pos, cos, sin, mask)
        return self.out(self.norm(x)).argmax(-1).view(1)

    def prefill(self, tokens):
        """The prompt `tokens` [n] from position 0: fills the caches, returns the first generated token."""
        n = tokens.shape[0]
        pos = torch.arange(n, device=tokens.device)
        x = self.embed(tokens).view(1, n, -1)
        cos, sin = self.cos[:n], self.sin[:n]
        for b in self.blocks:
            x = b(x, pos, cos, sin, None)
        return self.out(self.norm(x[:, -1:])).argmax(-1).view(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", default="", help="prompt lengths, comma-separated: time prefill instead")
    ap.add_argument("--compile", action="store_true", help="with --prompts: torch.compile the prefill per length")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.prompts:
        return time_prefill(args, [int(n) for n in args.prompts.split(",")])
    max_seq = args.depth + args.tokens + 1
    with torch.device("cuda"):
        model = Model(args.preset, max_seq).to(torch.bfloat16).eval()
    with torch.no_grad():
        for p in model.parameters():  # random weights, not zeros (zeros can run faster than real data)
            p.uniform_(-0.02, 0.02)
        for b in model.blocks:  # a cache of `depth` random positions, as mk-bench does
            b.k_cache.uniform_(-1, 1)
            b.v_cache.uniform_(-1, 1)
    step = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    token = torch.tensor([1], device="cuda")
    t0 = time.time()
    with torch.no_grad():
        for i in range(5):  # compile and capture the graphs
            token = step(token, torch.tensor([args.depth + i], device="cuda")).clone()
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    positions = [torch.tensor([args.depth + i], device="cuda") for i in range(args.tokens)]
    results = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        for _ in range(args.reps):
            start.record()
            for p in positions:
                token = step(token, p).clone()
            stop.record()
            torch.cuda.synchronize()
            results.append(start.elapsed_time(stop) / args.tokens)
    results.sort()
    print(json.dumps({"peer": "pytorch gpt-fast-style (torch.compile reduce-overhead, static KV cache)",
                      "torch": torch.__version__, "device": torch.cuda.get_device_name(), "preset": args.preset,
                      "depth": args.depth, "tokens": args.tokens, "ms_per_token": results,
                      "median_ms": results[len(results) // 2], "compile_seconds": compile_s}))


def time_prefill(args, lengths):
    with torch.device("cuda"):
        model = Model(args.preset, max(lengths) + 1).to(torch.bfloat16).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.02, 0.02)
    vocab = PRESETS[args.preset][6]
    prefill = torch.compile(model.prefill, mode="reduce-overhead", dynamic=False) if args.compile else model.prefill
    rows = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        for n in lengths:
            tokens = torch.randint(3, vocab, (n,), device="cuda")
            for _ in range(3 if args.compile else 1):  # warm-up: compiled / graphs captured, memory allocated
                prefill(tokens)
            times = []
            for _ in range(args.reps):
                start.record()
                prefill(tokens)
                stop.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(stop))
            times.sort()
            ttft = times[len(times) // 2]
            rows.append({"length": n, "ttft_ms": ttft, "ttft_all_ms": times, "prompt_tok_per_s": n / ttft * 1e3})
    kind = "torch.compile reduce-overhead" if args.compile else "eager"
    print(json.dumps({"peer": f"pytorch {kind} bf16 prefill (SDPA is_causal)", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(), "preset": args.preset, "prompts": rows}))


if __name__ == "__main__":
    main()
