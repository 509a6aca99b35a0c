#!/usr/bin/env python3
"""int4 at a real shape on the GPU (issue 17): our kernel against an fp32 reference on the same weights.

A Llama-3.2-1B-shaped model with seeded random weights (as scripts/gpu_check_real_shapes.py makes it),
saved in bf16, then run by our kernel (tests/gpu/gpu_logits_dump) in these forms:
  - "quantize_int4":        --quantize int4 at load, the embedding and LM head too;
  - "quantize_int4_head16": --quantize int4 with --quantize-head no (embedding and LM head bf16);
  - "gptq" / "awq":         checkpoints in GPTQ's and AWQ's packed forms, written here from the same int4
                            codes with f16 scales (the packers below follow the formats' documented
                            layouts); the loader reads them as stored, the bf16 embedding / LM head too.
The reference is the model in fp32 on exactly the weights our kernel computes with: the runtime's int4
scheme applied in torch (quantization_quality.int4_fake_quant), or the checkpoint's codes dequantized.
Relative L2 error of the logits at several positions must stay below 2e-2 (as for bf16), and the argmax
must agree. The first 64 rows of one matrix, as the runtime holds them (TensorView::at), must equal the
reference's weights bit for bit: the runtime's quantizer against this independent implementation, and
the loader's unpacking against the packers here.
    python3 scripts/gpu_check_int4.py BUILD_BIN_DIR OUTDIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_real_shapes import random_model  # noqa: E402
from quantization_quality import GROUP, int4_fake_quant  # noqa: E402

CASE = "llama-3.2-1b"
POSITIONS = [0, 1, 100, 511]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AWQ's GEMM packing: column 8k + AWQ_ORDER[j] in nibble j


def int4_codes(w):
    """The runtime's int4 scheme with f16 scales (as AWQ / GPTQ store them): codes [out, in], zeros and
    scales [out, in / 128]."""
    rows, cols = w.shape
    g = w.float().view(rows, cols // GROUP, GROUP)
    lo, hi = g.amin(dim=2), g.amax(dim=2)
    scale = ((hi - lo) / torch.full_like(lo, 15.0)).clamp(min=1e-8).half()
    s = scale.float()
    zero = torch.clamp(torch.round(-lo / s), 0, 15)
    code = torch.clamp(torch.round(g / s.unsqueeze(2)) + zero.unsqueeze(2), 0, 15)
    return code.view(rows, cols).to(torch.int32), zero.to(torch.int32), scale


def pack_nibbles(q, order=None):
    """int32 [..., n] codes -> int32 [..., n / 8]: value j of each 8 (after `order`) in bits 4j."""
    q = q.view(*q.shape[:-1], q.shape[-1] // 8, 8)
    if order is not None:
        q = q[..., order]
    out = torch.zeros(q.shape[:-1], dtype=torch.int64, device=q.device)
    for j in range(8):
        out |= (q[..., j].to(torch.int64) & 0xF) << (4 * j)
    return (out - ((out >> 31) << 32)).to(torch.int32)  # the same 32 bits as a signed int32


def write_checkpoint(form, bf16_dir, out_dir, codes):
    """GPTQ (v1: qweight [in / 8, out] packed along in; qzeros stored minus 1) or AWQ GEMM (qweight
    [in, out / 8] packed along out in AWQ_ORDER; qzeros likewise), scales f16 [in / 128, out]."""
    from safetensors.torch import load_file, save_file
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    tensors = {}
    for f in sorted(os.listdir(bf16_dir)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(bf16_dir, f)))
        elif not f.endswith(".json") or f == "config.json" or f == "model.safetensors.index.json":
            continue
        else:
            shutil.copy(os.path.join(bf16_dir, f), out_dir)
    out = {}
    for name, t in tensors.items():
        module = name[: -len(".weight")]
        if name.endswith(".weight") and module.split(".")[-1] in LINEARS:
            code, zero, scale = codes[name]
            if form == "gptq":
                rows, cols = code.shape  # input column 8i + j of output row o: bits 4j of qweight[i][o]
                out[module + ".qweight"] = pack_nibbles(code.t().reshape(cols // 8, 8, rows).permute(0, 2, 1).reshape(cols // 8, rows * 8))
                out[module + ".qzeros"] = pack_nibbles((zero - 1).t().contiguous())
                out[module + ".g_idx"] = (torch.arange(code.shape[1]) // GROUP).to(torch.int32)
            else:
                out[module + ".qweight"] = pack_nibbles(code.t().contiguous(), AWQ_ORDER)
                out[module + ".qzeros"] = pack_nibbles(zero.t().contiguous(), AWQ_ORDER)
            out[module + ".scales"] = scale.t().contiguous()
        else:
            out[name] = t
    save_file({k: v.contiguous().cpu() for k, v in out.items()}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(bf16_dir, "config.json")) as f:
        config = json.load(f)
    if form == "gptq":
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
                                         "sym": False, "checkpoint_format": "gptq"}
    else:
        config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True,
                                         "version": "gemm"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def run_ours(bindir, model_dir, tokens, out_path, **request):
    req = out_path + ".request.json"
    with open(req, "w") as f:
        json.dump({"tokens": tokens, "positions": POSITIONS, "greedy_steps": 8, **request}, f)
    subprocess.run([os.path.join(bindir, "gpu_logits_dump"), model_dir, req, out_path], check=True)
    return json.load(open(out_path))


def reference_logits(model_cls, bf16_dir, ids, weight_of, dump):
    """fp32 logits of the model whose 2-D weights are weight_of(name, stored), and matrix `dump`."""
    ref = model_cls.from_pretrained(bf16_dir, dtype=torch.float32, attn_implementation="eager").cuda().eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if p.dim() == 2:
                p.copy_(weight_of(name, p.data))
        logits = ref(ids).logits[0].float()
        matrix = dict(ref.named_parameters())[dump].data.clone()
    del ref
    return {"logits": logits, "dump": matrix}


def main(bindir, outdir):
    os.makedirs(outdir, exist_ok=True)
    cfg, model_cls, model = random_model(CASE, 1)
    bf16_dir = "/tmp/mk_int4_src_" + CASE
    model.save_pretrained(bf16_dir, safe_serialization=True)
    codes = {}
    for name, p in model.named_parameters():
        if name.endswith(".weight") and name.split(".")[-2] in LINEARS:
            codes[name] = int4_codes(p.data.cuda())
    del model
    g = torch.Generator().manual_seed(101)
    tokens = torch.randint(3, cfg.vocab_size, (POSITIONS[-1] + 1,), generator=g).tolist()
    ids = torch.tensor([tokens], device="cuda")
    head_names = {"model.embed_tokens.weight", "lm_head.weight"}

    def checkpoint_weight(name, w):
        if name not in codes:
            return w
        code, zero, scale = codes[name]
        return ((code.float() - zero.float().repeat_interleave(GROUP, 1)) * scale.float().repeat_interleave(GROUP, 1))

    forms = {
        "quantize_int4": (dict(quantize="int4"), lambda n, w: int4_fake_quant(w)),
        "quantize_int4_head16": (dict(quantize="int4", quantize_head=False),
                                 lambda n, w: w if n in head_names else int4_fake_quant(w)),
        "gptq": ({}, checkpoint_weight),
        "awq": ({}, checkpoint_weight),
    }
    results, ok = {"case": CASE}, True
    only = os.environ.get("FORMS")
    for form, (request, weight_of) in forms.items():
        if only and form not in only.split(","):
            continue
        model_dir = bf16_dir
        if form in ("gptq", "awq"):
            model_dir = f"/tmp/mk_int4_{form}_{CASE}"
            write_checkpoint(form, bf16_dir, model_dir, codes)
        dump = "model.layers.3.mlp.down_proj.weight"
        ours = run_ours(bindir, model_dir, tokens, os.path.join(outdir, f"{form}_ours.json"), dump={"matrix": dump, "rows": 64},
                        **request)
        ref = reference_logits(model_cls, bf16_dir, ids, weight_of, dump)
        if "dump" in ours:  # the weights themselves: ours (TensorView::at) against the reference's
            o, r = torch.tensor(ours["dump"], device="cuda"), ref["dump"][:64].flatten()
            differ = int((o != r).sum())
            print(f"{form}: {dump} rows 0..63: {differ} of {o.numel()} weights differ from the reference's, "
                  f"max |diff| {float((o - r).abs().max()):.3g}", flush=True)
            results.setdefault("weights_differing", {})[form] = differ
            ok &= differ == 0  # the same scheme, computed independently: equal to the bit
        ref = ref["logits"]
        rows = []
        for p, ol in zip(ours["positions"], ours["logits"]):
            o, r = torch.tensor(ol, device="cuda"), ref[p]
            rel = float((o - r).norm() / r.norm())
            same = int(o.argmax()) == int(r.argmax())
            rows.append({"position": p, "rel_err": rel, "argmax_same": same})
            ok &= rel < 2e-2 and same
        results[form] = {"request": request, "logits": rows, "device": ours["device"]}
        print(form, json.dumps(rows), flush=True)
    results["pass"] = bool(ok)
    with open(os.path.join(outdir, "int4_check.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
