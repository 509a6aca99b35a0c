#!/usr/bin/env python3
"""Makes tiny random Hugging Face models of each supported architecture and records what transformers
computes for them: the outside oracle for the CPU reference and the emulator (tests/test_hf_fixtures.cpp).

Needs torch + transformers (run it where they are installed, e.g. the GPU machine; it runs on the CPU).
Writes OUTDIR/<name>/{config.json, generation_config.json, model*.safetensors, expected.json} and a
tarball OUTDIR/hf_fixtures.tar. The weights are rounded to the stored dtype first and the forward pass
runs in float32 on the reloaded files, so our fp32-math reference should agree to float rounding.

    python3 scripts/make_hf_fixtures.py OUTDIR
"""
import json
import os
import sys
import tarfile

import torch
import transformers
from hf_random_weights import gemma3_text_config, gemma_weights, randomize
from transformers import (Gemma3ForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=512,
              rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2)

MODELS = {
    # Llama 3.x with llama3 rope scaling (small original context so that scaling changes frequencies).
    "llama3": (LlamaConfig, LlamaForCausalLM, torch.bfloat16,
               dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0, tie_word_embeddings=False,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Mistral, fp16 weights, 4:1 grouped-query attention, head_dim 8.
    "mistral": (MistralConfig, MistralForCausalLM, torch.float16,
                dict(num_attention_heads=8, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
                     sliding_window=None, tie_word_embeddings=False)),
    # Qwen2: q/k/v biases, tied embeddings, a single kv head.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, torch.bfloat16,
              dict(num_attention_heads=4, num_key_value_heads=1, rope_theta=1000000.0, tie_word_embeddings=True,
                   use_sliding_window=False)),
    # Qwen3: per-head q/k RMSNorm, head_dim (32) != hidden/heads (16), fp32 weights.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, torch.float32,
              dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0,
                   tie_word_embeddings=False, attention_bias=False)),
}


def gemma3_config(**common):
    """Gemma 3 (text): (1 + w) norms, four a layer; GELU-tanh MLP; scaled embeddings; q/k norms with
    query_pre_attn_scalar; sliding layers (window 5, their own RoPE base) and a global layer with linear
    RoPE scaling; tied head. The window is shorter than the prompt, so the sliding layers drop positions."""
    common = {k: v for k, v in common.items() if k not in ("hidden_act", "num_hidden_layers")}
    return gemma3_text_config(
        1000000.0, 10000.0, 8.0, **common, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], tie_word_embeddings=True,
        attention_bias=False, final_logit_softcapping=None, attn_logit_softcapping=None, pad_token_id=0)


MODELS["gemma3"] = (gemma3_config, Gemma3ForCausalLM, torch.bfloat16, {})

PROMPT = [1, 17, 33, 200, 5, 99, 142, 7, 64, 250, 3, 128]
GREEDY_STEPS = 16


def main(outdir):
    torch.manual_seed(0)
    os.makedirs(outdir, exist_ok=True)
    for seed, (name, (cfg_cls, model_cls, dtype, extra)) in enumerate(MODELS.items(), start=1):
        cfg = cfg_cls(**COMMON, **extra)
        cfg._attn_implementation = "eager"
        model = model_cls(cfg).eval()
        randomize(model, seed)
        if name == "gemma3":
            gemma_weights(model)
        model = model.to(dtype)            # the stored weights
        d = os.path.join(outdir, name)
        model.save_pretrained(d, safe_serialization=True)
        # Reload what was saved, in float32: float32 math on exactly the stored values. (Converting the
        # in-memory model back with .to(float32) would keep RoPE's inv_freq buffer rounded to bf16.)
        model = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT])).logits[0]  # [len, vocab]
            seq = list(PROMPT)
            greedy, margins = [], []
            for _ in range(GREEDY_STEPS):
                last = model(torch.tensor([seq])).logits[0, -1]
                top2 = torch.topk(last, 2)
                greedy.append(int(top2.indices[0]))
                margins.append(float(top2.values[0] - top2.values[1]))
                seq.append(greedy[-1])
        expected = {
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "stored_dtype": str(dtype).replace("torch.", ""),
            "prompt": PROMPT,
            "logits": [[float(v) for v in row] for row in logits],
            "greedy_tokens": greedy,
            "greedy_top2_margins": margins,
        }
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, greedy {greedy[:6]}...")
    with tarfile.open(os.path.join(outdir, "hf_fixtures.tar"), "w") as tar:
        for name in MODELS:
            tar.add(os.path.join(outdir, name), arcname=name)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "hf_fixtures")
