import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gpt2block import kernel_source
from gpt2block.backends import cuda_modules, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# decode attention's scores: one key's butterfly after another (the kernels of HEAD, scripts/_old_kernels) vs "
      "the eight side by side (attn_dots16, working tree); fresh modules and runners per variant, one process; tok/s")
new_dir = kernel_source.kernels_dir()
old_dir = ROOT / "scripts" / "_old_kernels" / "kernels"
w = {s: ModelWeights.random(SIZES[s], seed=0) for s in ("gpt2", "gpt2-xl")}
for rnd in range(3):
    for name, d in (("serial", old_dir), ("side by side", new_dir)):
        kernel_source.kernels_dir = lambda d=d: d
        cuda_modules._modules.clear()
        cuda_modules._kernels.clear()
        cuda_modules._static_smem_bytes.clear()
        todo = [("gpt2", (("bf16", 1), ("fp32", 1), ("fp32", 8)))] + ([("gpt2-xl", (("fp32", 1),))] if rnd == 0 else [])
        for size, cases in todo:
            for prec, b in cases:
                r = make_runner(w[size], "cuda", prec)
                print(f"round {rnd} {name:12s} {size} {prec} b{b}: {rate(r, b, 128 if size == 'gpt2' else 48):,.0f} tok/s", flush=True)
                del r
