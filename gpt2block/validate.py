"""Validate a backend against Hugging Face transformers on the same checkpoint.

Three checks, each with its figure and its limit:
  logits      max |logit difference| over every position of the prompt;
  top-1       the argmax agrees at every position (a position whose HF top-2
              margin is below twice the logit limit is a near tie and is excused);
  greedy      a 32-token greedy continuation, token by token (a first difference
              at a near tie of HF's is excused, and reported).

transformers loads the checkpoint directory itself where the model came from one;
for a packed file the HF model is built from the packed weights in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .backends.base import Runner
from .layout import HF_SUFFIXES
from .weights import ModelWeights

DEFAULT_PROMPT = "Hello, I'm a language model,"
N_GREEDY = 32

# max |logit difference| allowed: atol + rtol * max |HF logit|. fp32 is the 1e-4;
# tf32 and bf16 are provisional limits for the CUDA modes, to be replaced by measured ones.
LOGIT_LIMITS = {"fp64": (1e-4, 0.0), "fp32": (1e-4, 0.0), "tf32": (1e-3, 1e-3), "bf16": (1e-2, 2e-2)}


class MissingDependency(RuntimeError):
    """torch / transformers are needed for validate and are not installed."""


class ValidateError(ValueError):
    """A comparison that cannot be made: non-finite logits, or no prompt."""


def require_finite(logits: np.ndarray, whose: str) -> None:
    """Refuse NaN or Inf logits (rows [T, V] or one row [V]): no check is passed on them."""
    bad = ~np.isfinite(logits)
    if bad.any():
        pos = int(np.unravel_index(int(np.argmax(bad)), logits.shape)[0]) if logits.ndim > 1 else 0
        kinds = " and ".join(k for k, m in (("NaN", np.isnan(logits)), ("Inf", np.isinf(logits))) if m.any())
        raise ValidateError(f"{whose} logits hold {kinds} ({int(bad.sum())} values, the first at position {pos}): "
                            "the weights are finite but the activations overflow float32; no check can pass")


@dataclass
class Check:
    name: str
    figure: str
    limit: str
    passed: bool


@dataclass
class Report:
    backend: str
    precision: str
    prompt_ids: list[int]
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def _torch():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingDependency(
            f"validate compares with Hugging Face transformers, which is not importable ({e}); "
            'install torch and transformers (pip install torch transformers, or pip install -e ".[test]")'
        ) from None
    return torch, transformers


def hf_config(config):
    _, tf = _torch()
    return tf.GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.n_positions, n_embd=config.n_embd,
        n_layer=config.n_layer, n_head=config.n_head, layer_norm_epsilon=config.layer_norm_epsilon,
        activation_function=config.activation_function,
    )


def hf_state_dict(weights: ModelWeights) -> dict:
    """Packed weights -> GPT2LMHeadModel's parameter names (float32 torch tensors)."""
    torch, _ = _torch()
    t = lambda a: torch.from_numpy(np.array(a, np.float32))  # noqa: E731
    sd = {"transformer.wte.weight": t(weights.wte), "transformer.wpe.weight": t(weights.wpe),
          "transformer.ln_f.weight": t(weights.ln_f_g), "transformer.ln_f.bias": t(weights.ln_f_b),
          "lm_head.weight": t(weights.wte)}
    for i in range(weights.config.n_layer):
        for name, arr in weights.block(i).items():
            sd[f"transformer.h.{i}.{HF_SUFFIXES[name]}"] = t(arr)
    return sd


def hf_model_from_weights(weights: ModelWeights):
    """A GPT2LMHeadModel holding the packed weights (for packed files, which HF cannot read)."""
    _, tf = _torch()
    model = tf.GPT2LMHeadModel(hf_config(weights.config))
    missing, unexpected = model.load_state_dict(hf_state_dict(weights), strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if missing or unexpected:
        raise RuntimeError(f"building the HF model: missing {missing}, unexpected {unexpected}")
    return model.float().eval()


def hf_model_for(source: str | Path, weights: ModelWeights):
    """The HF model of the same checkpoint: from_pretrained on a checkpoint directory, else built."""
    _, tf = _torch()
    path = Path(source)
    if path.is_dir() and (path / "config.json").is_file():
        model = tf.GPT2LMHeadModel.from_pretrained(str(path), attn_implementation="eager")
        return model.float().eval()
    return hf_model_from_weights(weights)


def hf_logits(model, ids) -> np.ndarray:  # ids [T] -> [T, V] float32
    torch, _ = _torch()
    with torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.long))
    return out.logits[0].float().numpy()


def margin(row) -> float:  # [V] -> top-1 minus top-2
    top2 = np.partition(row, -2)[-2:]
    return float(top2[1] - top2[0])


def hf_greedy(model, ids, n):
    """HF greedy continuation with its KV cache: -> (ids [n], each step's top-2 margin [n])."""
    torch, _ = _torch()
    out_ids, margins = [], []
    with torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.long), use_cache=True)
        for _ in range(n):
            row = out.logits[0, -1].float().numpy()
            require_finite(row, "transformers'")
            tok = int(np.argmax(row))
            out_ids.append(tok)
            margins.append(margin(row))
            if len(out_ids) == n:
                break
            out = model(torch.tensor([[tok]], dtype=torch.long), past_key_values=out.past_key_values, use_cache=True)
    return out_ids, margins


def runner_greedy(runner: Runner, ids, n) -> list[int]:
    cache = runner.new_cache(1)
    first = runner.prefill(cache, 0, ids)
    require_finite(np.asarray(first), f"{runner.backend}'s")
    tok = int(np.argmax(first))
    out = [tok]
    while len(out) < n:
        tok = int(runner.decode_greedy(cache, np.array([tok], np.int64))[0])
        out.append(tok)
    return out


def logit_limit(precision: str, ref: np.ndarray) -> float:
    atol, rtol = LOGIT_LIMITS[precision]
    return atol + rtol * float(np.abs(ref).max())


def check_logits(ours, ref, limit) -> Check:
    if not (np.isfinite(ours).all() and np.isfinite(ref).all()):
        return Check("max |logit difference|", "non-finite logits", f"<= {limit:.1e}", False)
    diff = float(np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max())
    pos = int(np.unravel_index(np.argmax(np.abs(ours - ref)), ours.shape)[0])
    return Check("max |logit difference|", f"{diff:.3e} (at position {pos})", f"<= {limit:.1e}", diff <= limit)


def check_top1(ours, ref, limit) -> Check:
    if not (np.isfinite(ours).all() and np.isfinite(ref).all()):
        return Check("top-1 agreement", "non-finite logits", "every position", False)
    agree = np.argmax(ours, -1) == np.argmax(ref, -1)  # [T]
    ties = np.array([margin(r) < 2 * limit for r in ref])  # [T]
    bad = np.flatnonzero(~agree & ~ties)
    fig = f"{int(agree.sum())}/{len(agree)} positions agree"
    if (~agree & ties).any():
        fig += f" ({int((~agree & ties).sum())} disagreement(s) at near ties excused)"
    if bad.size:
        fig += f"; first disagreement at position {int(bad[0])}"
    return Check("top-1 agreement", fig, "every position", bad.size == 0)


def check_greedy(ours, ref, margins, limit) -> Check:
    n = len(ref)
    diff = [i for i in range(n) if ours[i] != ref[i]]
    if not diff:
        return Check(f"greedy {n}-token continuation", f"{n}/{n} tokens equal", "all equal", True)
    i = diff[0]
    tie = margins[i] < 2 * limit
    fig = (f"{i}/{n} tokens equal before the first difference, at token {i} "
           f"(ours {ours[i]}, HF {ref[i]}, HF top-2 margin {margins[i]:.2e})")
    if tie:
        fig += ": a near tie, excused"
    return Check(f"greedy {n}-token continuation", fig, "all equal", tie)


def validate(runner: Runner, hf_model, prompt_ids: list[int], n_greedy: int = N_GREEDY) -> Report:
    """Run the three checks of ``runner`` against ``hf_model`` on ``prompt_ids``. The continuation is
    shortened to fit a context under n_greedy + 1 (the prompt keeps at least one token); non-finite
    logits, ours or transformers', raise ValidateError."""
    n_ctx = runner.config.n_ctx
    if isinstance(n_greedy, bool) or not isinstance(n_greedy, int) or n_greedy < 1:
        raise ValidateError(f"n_greedy must be a positive int; got {n_greedy!r}")
    if not prompt_ids:
        raise ValidateError("validate needs a prompt of at least one token")
    n_greedy = min(n_greedy, n_ctx - 1)
    prompt_ids = list(prompt_ids)[-(n_ctx - n_greedy):]
    report = Report(runner.backend, runner.precision, prompt_ids)
    ours = runner.forward(prompt_ids)  # [T, V]
    require_finite(ours, f"{runner.backend}'s")
    ref = hf_logits(hf_model, prompt_ids)  # [T, V]
    require_finite(ref, "transformers'")
    limit = logit_limit(runner.precision, ref)
    report.checks.append(check_logits(ours, ref, limit))
    report.checks.append(check_top1(ours, ref, limit))
    ref_ids, margins = hf_greedy(hf_model, prompt_ids, n_greedy)
    report.checks.append(check_greedy(runner_greedy(runner, prompt_ids, n_greedy), ref_ids, margins, limit))
    return report
