"""The challenge's reference GPT-2 block written with torch ops, for the GPU tests.

Runs in whatever dtype its inputs have: float32 on the GPU (TF32 off) is the peer whose
error sets our limit; float64 is the judge.
"""

import math

from gpt2block.layout import block_layout


def torch_block(x, flat, causal=False, eps=1e-5):
    """x [S, D], flat [block_numel(D)] (same dtype, same device) -> [S, D]."""
    import torch
    import torch.nn.functional as F

    s, d = x.shape
    w = block_layout(d).views(flat)
    h = F.layer_norm(x, (d,), w["ln1_g"], w["ln1_b"], eps)
    qkv = h @ w["w_qkv"] + w["b_qkv"]
    nh = d // 64
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(s, nh, 64).transpose(0, 1) for i in range(3))  # [H, S, 64]
    att = (q @ k.transpose(1, 2)) / math.sqrt(64)
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
    a = (torch.softmax(att, dim=-1) @ v).transpose(0, 1).reshape(s, d)
    x1 = x + a @ w["w_attn"] + w["b_attn"]
    h2 = F.layer_norm(x1, (d,), w["ln2_g"], w["ln2_b"], eps)
    f = F.gelu(h2 @ w["w_fc"] + w["b_fc"], approximate="tanh")
    return x1 + f @ w["w_proj"] + w["b_proj"]


def challenge_weights(torch, d=768, biases=False, gen=None, device="cuda"):
    """One block as the challenge draws it: LayerNorm gains in [0.8, 1.2], matrices N(0, 0.02),
    biases zero (or N(0, 0.02) with ``biases``), LayerNorm biases zero (or small)."""
    lay = block_layout(d)
    flat = torch.zeros(lay.numel, dtype=torch.float32)
    for slot in lay.slots:
        view = flat[slot.offset:slot.end]
        if slot.name in ("ln1_g", "ln2_g"):
            view.uniform_(0.8, 1.2, generator=gen)
        elif len(slot.shape) == 2:
            view.normal_(0.0, 0.02, generator=gen)
        elif biases:
            view.normal_(0.0, 0.02, generator=gen)
    return flat.to(device)
