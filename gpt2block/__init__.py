"""gpt2block: a GPT-2 inference engine whose arithmetic is its own CUDA.

Data flow: tokenizer -> checkpoint (weights/layout) -> backends (numpy | cuda:
embed, blocks, ln_f, LM head) -> sampler -> generate -> api -> cli.

    import gpt2block
    model = gpt2block.load("gpt2")
    print(model.generate("Hello", max_new_tokens=32, seed=0).text)
"""

__version__ = "0.1.0"

from .config import SIZES, ConfigError, GPT2Config  # noqa: E402
from .layout import block_layout, block_numel  # noqa: E402
from .solve import solve  # noqa: E402
from .sampler import SamplingParams  # noqa: E402
from .generate import GenerationResult  # noqa: E402
from .api import Model, TextStream, load  # noqa: E402

__all__ = ["GPT2Config", "SIZES", "ConfigError", "GenerationResult", "Model", "SamplingParams", "TextStream",
           "block_layout", "block_numel", "load", "solve", "__version__"]
