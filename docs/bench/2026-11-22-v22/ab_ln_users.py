import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
import torch
import gpt2block
from gpt2block import bench
from gpt2block.backends import cuda, cuda_ops, make_runner
from gpt2block.config import SIZES
from gpt2block.layout import block_layout
from gpt2block.weights import ModelWeights

gen = torch.Generator(device="cuda").manual_seed(1)
x = torch.rand(1024, 768, device="cuda", generator=gen) * 2 - 1
w = bench._challenge_weights(torch, block_layout(768), gen)
o = torch.empty_like(x)
runner = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "fp32")
ids = np.random.default_rng(0).integers(0, 50257, 1024)
print("# the LayerNorm's cache hints in its users: solve() 1024 (bench's timing) and prefill all logits (forward_device), ms")
outs = {}
for rnd in range(3):
    for name, defs in (("plain", (("LN_LOAD_HINT", 0), ("LN_STORE_HINT", 0))), ("hints", ())):
        cuda_ops.LN_DEFINES = defs
        cuda._solve_graphs.clear()
        runner._fwd = None
        row = []
        for prec in ("fp32", "tf32"):
            gpt2block.solve(x, o, w, 1024, precision=prec)
            torch.cuda.synchronize()
            outs.setdefault((prec, name), o.clone())
            assert torch.equal(outs[(prec, name)], o)
            row.append(f"solve {prec} {bench._torch_median(torch, lambda p=prec: gpt2block.solve(x, o, w, 1024, precision=p), 40):.4f}")
        row.append(f"prefill {bench._torch_median(torch, lambda: runner.forward_device(ids), 20):.4f}")
        print(f"round {rnd} {name}: " + ", ".join(row), flush=True)
for prec in ("fp32", "tf32"):
    print(prec, "bits equal plain vs hints:", torch.equal(outs[(prec, "plain")], outs[(prec, "hints")]))
