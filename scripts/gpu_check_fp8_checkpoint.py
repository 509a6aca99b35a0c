#!/usr/bin/env python3
"""An fp8 checkpoint written by transformers itself, run by our kernel as stored (issue 17).

1. A Llama-3.2-1B-shaped model with seeded random weights (as scripts/gpu_check_real_shapes.py makes it),
   saved in bf16.
2. transformers loads it with FineGrainedFP8Config (block-wise 128x128 fp8, weight_scale_inv) and saves
   the quantized model: the checkpoint under test, as transformers writes it.
3. Our kernel runs that directory (tests/gpu/gpu_logits_dump; the loader reads the fp8 tensors and scales
   as stored, and keeps the embedding / LM head that transformers left in bf16 as stored).
4. The reference: the same model in fp32 on the dequantized weights (fp8 x weight_scale_inv per block),
   the embedding / LM head as stored, i.e. exactly the weights our kernel computes with. Relative L2 error of the logits at several
   positions must stay below 2e-2 (as for bf16), and the argmax must agree.
5. Reported, not checked: the difference from transformers' own fp8 forward, which also quantizes the
   activations; where its kernels cannot run, from its FP8Linear's arithmetic emulated in torch
   (activations quantized per token and 128 columns, as its act_quant does).
    python3 scripts/gpu_check_fp8_checkpoint.py BUILD_BIN_DIR OUTDIR
"""
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_real_shapes import random_model  # noqa: E402

CASE = "llama-3.2-1b"
POSITIONS = [0, 1, 100, 511]


def dequantized_reference(model_cls, fp8_dir, bf16_dir):
    """fp32 model whose weights are the fp8 checkpoint's, dequantized; the bf16 ones as stored."""
    from safetensors.torch import load_file
    ref = model_cls.from_pretrained(bf16_dir, dtype=torch.float32, attn_implementation="eager")
    tensors = {}
    for f in sorted(os.listdir(fp8_dir)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(fp8_dir, f)))
    quantized = 0
    with torch.no_grad():
        params = dict(ref.named_parameters())
        for name, p in params.items():
            if p.dim() != 2:
                continue
            stored = tensors.get(name)
            scale = tensors.get(name + "_scale_inv")
            if stored is not None and stored.dtype == torch.float8_e4m3fn and scale is not None:
                rows, cols = stored.shape
                s = scale.float().repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
                p.copy_(stored.float() * s)
                quantized += 1
            # else: left in bf16 by transformers, and so by the runtime
    return ref, quantized


def emulated_w8a8_logits(model, ids):
    """transformers' fp8 forward where its triton kernels cannot run: every FP8Linear computes in torch
    what its kernels compute, activations quantized per token and block_size[1] columns to e4m3 with scale
    amax / 448 (as its act_quant), times the block-scaled fp8 weights, in fp32. Returns the logits and a
    note naming what was emulated (and act_quant's own source, for the record)."""
    import inspect
    import transformers.integrations.finegrained_fp8 as f8
    source = ""
    for name in ("act_quant", "fp8_act_quant"):
        if hasattr(f8, name):
            try:
                source = inspect.getsource(getattr(f8, name))
            except (OSError, TypeError):
                pass
    linear_cls = getattr(f8, "FP8Linear")

    def forward(self, x):
        rows, cols = self.weight.shape
        br, bc = tuple(getattr(self, "block_size", None) or (128, 128))
        scale = self.weight_scale_inv.float().repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
        w = self.weight.float() * scale
        x2 = x.reshape(-1, cols).float()
        g = x2.view(x2.shape[0], cols // bc, bc)
        amax = g.abs().amax(dim=2, keepdim=True).clamp(min=1e-10)
        sx = amax / torch.full_like(amax, 448.0)
        xq = ((g / sx).to(torch.float8_e4m3fn).float() * sx).view(x2.shape[0], cols)
        y = xq @ w.t()
        if getattr(self, "bias", None) is not None:
            y = y + self.bias.float()
        return y.to(x.dtype).view(*x.shape[:-1], rows)

    original = linear_cls.forward
    linear_cls.forward = forward
    try:
        with torch.no_grad():
            logits = model(ids).logits[0].float()
    finally:
        linear_cls.forward = original
    note = ("transformers' FP8Linear arithmetic emulated in torch (its kernels unavailable): activations per token "
            "and 128 columns to e4m3, scale amax / 448; transformers' act_quant source: " + (source or "not found"))
    return logits, note


def main(bindir, outdir):
    os.makedirs(outdir, exist_ok=True)
    from transformers import FineGrainedFP8Config
    cfg, model_cls, model = random_model(CASE, 1)
    bf16_dir, fp8_dir = "/tmp/mk_fp8_src_" + CASE, "/tmp/mk_fp8_hf_" + CASE
    model.save_pretrained(bf16_dir, safe_serialization=True)
    del model
    hf_fp8 = model_cls.from_pretrained(bf16_dir, quantization_config=FineGrainedFP8Config(weight_block_size=[128, 128]),
                                       device_map="cuda")
    hf_fp8.save_pretrained(fp8_dir, safe_serialization=True)
    with open(os.path.join(fp8_dir, "config.json")) as f:
        qconfig = json.load(f).get("quantization_config")
    print("transformers wrote quantization_config:", json.dumps(qconfig), flush=True)

    g = torch.Generator().manual_seed(101)
    tokens = torch.randint(3, cfg.vocab_size, (POSITIONS[-1] + 1,), generator=g).tolist()
    req = os.path.join("/tmp", "fp8_req.json")
    with open(req, "w") as f:
        json.dump({"tokens": tokens, "positions": POSITIONS, "greedy_steps": 8}, f)
    ours_path = os.path.join(outdir, "fp8_ours.json")
    subprocess.run([os.path.join(bindir, "gpu_logits_dump"), fp8_dir, req, ours_path], check=True)
    ours = json.load(open(ours_path))

    ids = torch.tensor([tokens], device="cuda")
    hf_logits, hf_error = None, None
    try:  # transformers' fp8 kernels (triton) may be missing; the check does not depend on them
        with torch.no_grad():
            hf_logits = hf_fp8(ids).logits[0].float()
    except Exception as e:  # noqa: BLE001
        hf_error = f"{type(e).__name__}: {e}"
        print("transformers' own fp8 forward failed:", hf_error, flush=True)
    emulated_logits, emulated_note = None, None
    if hf_logits is None:  # its FP8Linear's arithmetic in torch: activations quantized as its act_quant does
        emulated_logits, emulated_note = emulated_w8a8_logits(hf_fp8, ids)
        print(emulated_note, flush=True)
    del hf_fp8
    ref, quantized = dequantized_reference(model_cls, fp8_dir, bf16_dir)
    ref = ref.cuda().eval()
    with torch.no_grad():
        ref_logits = ref(ids).logits[0].float()
    ok, rows = quantized > 0, []
    for p, ol in zip(ours["positions"], ours["logits"]):
        o, r = torch.tensor(ol, device="cuda"), ref_logits[p]
        rel = float((o - r).norm() / r.norm())
        row = {"position": p, "rel_err_vs_dequantized_reference": rel, "argmax_same": int(o.argmax()) == int(r.argmax())}
        if emulated_logits is not None:
            h = emulated_logits[p]
            row["rel_err_vs_w8a8_emulated"] = float((o - h).norm() / h.norm())
            row["w8a8_emulated_vs_reference"] = float((h - r).norm() / r.norm())
        if hf_logits is not None:
            h = hf_logits[p]
            row["rel_err_vs_transformers_fp8"] = float((o - h).norm() / h.norm())
            row["transformers_fp8_vs_reference"] = float((h - r).norm() / r.norm())
        rows.append(row)
        ok &= rel < 2e-2 and int(o.argmax()) == int(r.argmax())
    result = {"case": CASE, "quantization_config": qconfig, "fp8_matrices_in_checkpoint": quantized, "logits": rows,
              "transformers_fp8_forward_error": hf_error, "w8a8_emulation": emulated_note,
              "device": ours["device"], "pass": bool(ok)}
    with open(os.path.join(outdir, "fp8_checkpoint.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(rows, indent=1))
    print(f"{quantized} fp8 matrices as transformers stored them;", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
