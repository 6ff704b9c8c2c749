"""gpt2block: a GPT-2 inference engine whose arithmetic is its own CUDA.

Data flow: tokenizer -> checkpoint (weights/layout) -> backends (numpy | cuda:
embed, blocks, ln_f, LM head) -> sampler -> generate -> cli.
"""

__version__ = "0.1.0"

from .config import SIZES, ConfigError, GPT2Config  # noqa: E402
from .layout import block_layout, block_numel  # noqa: E402
from .solve import solve  # noqa: E402

__all__ = ["GPT2Config", "SIZES", "ConfigError", "block_layout", "block_numel", "solve", "__version__"]
