import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent)); sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt2block.backends import cuda_linear
import timeline_decode as T
MB = 1 << 20
for name, d in (("base", ()), ("pin 24 MB", (("GEMV_W_POLICY", 1), ("GEMV_LM_PIN_BYTES", 24 * MB)))):
    cuda_linear.NT_DEFINES = d
    print("=====", name, flush=True)
    sys.argv = ["timeline_decode.py", "gpt2", "--steps", "64", "--cases", "bf16:1", "--fused", "off"]
    T.main()
