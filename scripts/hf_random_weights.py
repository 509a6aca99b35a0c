"""Seeded random weights for Hugging Face models, shared by the fixture and real-shape check scripts.

Norm weights ~ 1 + 0.1 N(0,1), embeddings ~ N(0,1), biases ~ 0.3 N(0,1), matrices ~ N(0,1) * gain /
sqrt(fan_in): peaked enough that greedy decoding is not a string of near-ties.
"""
import torch


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
