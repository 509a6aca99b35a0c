"""Seeded random weights and configs for Hugging Face models, shared by the fixture and real-shape check
scripts.

Norm weights ~ 1 + 0.1 N(0,1), embeddings ~ N(0,1), biases ~ 0.3 N(0,1), matrices ~ N(0,1) * gain /
sqrt(fan_in): peaked enough that greedy decoding is not a string of near-ties. Gemma 3 then gets
gemma_weights().
"""
import torch
import transformers


def randomize(model, seed, gain=1.0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g).to(p.device)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            elif name.endswith(".bias"):
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise * (gain / p.shape[-1] ** 0.5))


def gemma_weights(model):
    """Gemma's norms scale by (1 + w), and its embeddings by sqrt(hidden): shift the norms to scales near 1
    and shrink the embeddings by sqrt(hidden), so that the residual stream is not the token's own (scaled)
    embedding, which a tied head would simply echo back."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.sub_(1.0)
            elif "embed_tokens" in name:
                p.mul_(model.config.hidden_size ** -0.5)


def gemma3_text_config(global_rope_theta, local_rope_theta, linear_rope_factor=None, **kw):
    """A Gemma3TextConfig with its per-layer-type RoPE in the form of the installed transformers: 5.x takes
    rope_parameters, 4.5x rope_theta / rope_local_base_freq / rope_scaling. linear_rope_factor: the global
    layers' linear scaling (None: none)."""
    full = {"rope_type": "default", "rope_theta": global_rope_theta}
    if linear_rope_factor is not None:
        full = {"rope_type": "linear", "rope_theta": global_rope_theta, "factor": linear_rope_factor}
    extra = {}
    if int(transformers.__version__.split(".")[0]) >= 5:
        extra["rope_parameters"] = {"full_attention": full,
                                    "sliding_attention": {"rope_type": "default", "rope_theta": local_rope_theta}}
    else:
        extra.update(rope_theta=global_rope_theta, rope_local_base_freq=local_rope_theta,
                     rope_scaling={k: v for k, v in full.items() if k != "rope_theta"} if linear_rope_factor else None)
    return transformers.Gemma3TextConfig(**kw, **extra)
