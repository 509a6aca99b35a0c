#!/usr/bin/env python3
"""Held-out cross-entropy of the shipped model (models/pystdlib-6m) in bf16 and after each weight
quantization scheme the runtime offers, on the GPU machine (torch + transformers).

The held-out text and the evaluation are those of scripts/train_tiny_model.py (every 50th file of the
Python standard library it was trained on, windows of 1024, fp32 math). A scheme is applied to the
weights in torch exactly as the runtime applies it at load time (runtime/quantize.cpp), so the loss
measured here is the loss of the weights the runtime computes with:
  fp8:  per row and 128-column group, scale = amax / 448, values rounded to the nearest fp8 E4M3
        (torch's cast rounds to nearest even);
  int4: per row and 128-column group, scale = (max - min) / 15, zero point round(-min / scale) in 0..15,
        codes round(w / scale) + zero clamped to 0..15 (a constant group: scale |v| / 7 or 1, zero 8);
each with the embedding and LM head quantized too ("head quantized", --quantize-head yes) or kept as
stored ("head 16-bit", --quantize-head no).
The bf16 row should reproduce the held-out loss in the model's TRAINING.md (same files, same windows).

  python3 scripts/quantization_quality.py --out OUT [--model models/pystdlib-6m] [--text-dir DIR]
Writes OUT/quantization_quality.json and prints one line per scheme.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny_model as ttm  # noqa: E402  (the held-out split and the evaluation)

GROUP = 128
FP8_MAX = 448.0


def fp8_fake_quant(w):
    """The runtime's fp8 scheme on a [rows, cols] matrix: fp8 values times per-group scales, as fp32."""
    rows, cols = w.shape
    groups = (cols + GROUP - 1) // GROUP
    padded = torch.zeros(rows, groups * GROUP, dtype=torch.float32, device=w.device)
    padded[:, :cols] = w.float()
    g = padded.view(rows, groups, GROUP)
    amax = g.abs().amax(dim=2, keepdim=True)
    # Tensor / tensor: CUDA divides exactly there, while dividing by a Python number multiplies by its
    # reciprocal (scales one ulp off the runtime's).
    scale = torch.where(amax > 0, amax / torch.full_like(amax, FP8_MAX), torch.ones_like(amax))
    q = (g / scale).to(torch.float8_e4m3fn)
    deq = (q.float() * scale).view(rows, groups * GROUP)[:, :cols]
    return deq, q.view(rows, groups * GROUP)[:, :cols], scale.view(rows, groups)


def int4_fake_quant(w):
    """The runtime's int4 scheme on a [rows, cols] matrix: (code - zero) * scale per group, as fp32."""
    rows, cols = w.shape
    groups = (cols + GROUP - 1) // GROUP
    v = torch.zeros(rows, groups * GROUP, dtype=torch.float32, device=w.device)
    v[:, :cols] = w.float()
    valid = torch.zeros_like(v, dtype=torch.bool)
    valid[:, :cols] = True
    g, m = v.view(rows, groups, GROUP), valid.view(rows, groups, GROUP)
    lo = torch.where(m, g, torch.full_like(g, float("inf"))).amin(dim=2, keepdim=True)
    hi = torch.where(m, g, torch.full_like(g, float("-inf"))).amax(dim=2, keepdim=True)
    spread = hi > lo
    scale = torch.where(spread, (hi - lo) / torch.full_like(lo, 15.0),  # exact division, as in fp8_fake_quant
                        torch.where(lo != 0, lo.abs() / torch.full_like(lo, 7.0), torch.ones_like(lo)))
    zero = torch.where(spread, torch.clamp(torch.round(-lo / scale), 0, 15), torch.full_like(lo, 8.0))
    code = torch.clamp(torch.round(g / scale) + zero, 0, 15)
    deq = ((code - zero) * scale).view(rows, groups * GROUP)[:, :cols]
    return deq


def matrices(model):
    """The weight matrices the runtime quantizes: every Linear of the layers, the embedding, the LM head."""
    seen = {}
    for name, p in model.named_parameters():
        if p.dim() == 2 and id(p) not in seen:
            seen[id(p)] = (name, p)
    return list(seen.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "models", "pystdlib-6m"))
    ap.add_argument("--text-dir", default=None, help="the text the model was trained on (default: training.json's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=1024)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import tokenizers
    import transformers
    from transformers import LlamaForCausalLM
    transformers.logging.set_verbosity_error()
    device = torch.device("cuda")

    with open(os.path.join(args.model, "training.json")) as f:
        text = json.load(f)["text"]
    text_dir = args.text_dir or text["source"]
    held, skipped = ttm.read_sources(text_dir, text["held_out_files"])
    if skipped:
        raise SystemExit(f"held-out files missing or unreadable under {text_dir}: {skipped}")
    tok = tokenizers.Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    stream = ttm.encode_stream(tok, [t for _, t in held])

    results = {"model": os.path.abspath(args.model), "text_dir": text_dir, "held_out_files": [p for p, _ in held],
               "torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0), "schemes": {}}
    model = ttm.load_fp32(LlamaForCausalLM, args.model).to(device)
    t0 = time.time()
    base, tokens = ttm.evaluate(model, stream, args.seq_len, 8, device, False)
    results["schemes"]["bf16"] = {"held_out_loss": base, "tokens": tokens}
    print(f"bf16 (as stored, fp32 math): held-out loss {base:.4f} nats/token over {tokens} tokens")

    original = {name: p.data.clone() for name, p in matrices(model)}
    head_names = {"model.embed_tokens.weight", "lm_head.weight"}
    schemes = [("fp8", True), ("fp8", False), ("int4", True), ("int4", False)]
    for scheme, head in schemes:
        with torch.no_grad():
            for name, p in matrices(model):
                quantize = head or name not in head_names
                src = original[name]
                p.data.copy_((fp8_fake_quant(src)[0] if scheme == "fp8" else int4_fake_quant(src)) if quantize else src)
        loss, tokens = ttm.evaluate(model, stream, args.seq_len, 8, device, False)
        key = f"{scheme}" + ("" if head else "_head16")
        results["schemes"][key] = {"held_out_loss": loss, "tokens": tokens, "increase": loss - base,
                                   "relative_increase": (loss - base) / base, "head_quantized": head}
        print(f"{scheme} ({'head quantized' if head else 'head 16-bit'}): held-out loss {loss:.4f}, "
              f"+{loss - base:.4f} nats/token ({100 * (loss - base) / base:+.2f}%)")
    results["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "quantization_quality.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
