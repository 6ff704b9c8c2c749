"""The Python API, in one import:

    import gpt2block

    model = gpt2block.load("gpt2")                     # backend "auto": cuda where CuPy sees a GPU, else numpy
    r = model.generate("Hello", max_new_tokens=32, temperature=0.8, top_p=0.95, seed=0)
    r.text, r.token_ids, r.stop_reason, r.timing.prefill_ms, r.timing.decode_tokens_per_s, r.timing.wall_s
    model.generate(["Hello", "Bonjour"], n=3)          # a list per prompt, each of 3 samples
    for piece in model.generate("Hello", stream=True):  # text as it comes
        print(piece, end="")
    model.logits("Hello")                              # [T, V] float32 NumPy
    model.perplexity(text)                             # transformers' sliding-window perplexity
    model.tokenizer.encode("Hello")

The sampling defaults are sampler.SamplingParams's and generate.DEFAULT_MAX_NEW_TOKENS, the CLI's
too. The CUDA backend is imported only when a GPU is used.
"""

from __future__ import annotations

import warnings
from typing import Callable, Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np

from .backends import make_runner
from .backends.base import Runner, check_ids
from .checkpoint import CheckpointError, load_model
from .generate import DEFAULT_MAX_NEW_TOKENS, GenerationResult, GenerationWarning, check_text, generate_iter
from .perplexity import Perplexity, perplexity
from .sampler import SamplingParams
from .tokenizer import Tokenizer

_D = SamplingParams()  # the defaults' one owner


class StreamPiece(NamedTuple):
    prompt: int  # index of the prompt
    sample: int  # index among its n samples
    text: str


class TextStream:
    """What ``generate(..., stream=True)`` returns: iterate it for the text as it comes (str pieces for one
    prompt and n=1, else StreamPiece); afterwards ``result`` holds what generate would have returned."""

    def __init__(self, pieces, shape: Callable[[list], object], single: bool, n: int):
        self._pieces, self._shape, self._single, self._n = pieces, shape, single, n
        self._result = None

    def __iter__(self) -> Iterator[Union[str, StreamPiece]]:
        if self._result is not None:  # read to its end already: nothing more comes
            return
        while True:
            try:
                row, text = next(self._pieces)
            except StopIteration as done:
                self._result = self._shape(done.value)
                return
            yield text if self._single else StreamPiece(row // self._n, row % self._n, text)

    @property
    def result(self):
        if self._result is None:
            raise RuntimeError("the stream has not been read to its end yet")
        return self._result


class Model:
    """A loaded model: a Runner on its backend and the tokenizer. Made by ``gpt2block.load``."""

    def __init__(self, runner: Runner, tokenizer: Tokenizer, source: str = "",
                 log: Optional[Callable[[str], None]] = None):
        if tokenizer.vocab_size > runner.config.vocab_size:
            raise CheckpointError(f"{tokenizer.source}: the tokenizer has {tokenizer.vocab_size} tokens but the "
                                  f"model's vocab_size is {runner.config.vocab_size}")
        self.runner = runner
        self.tokenizer = tokenizer
        self.source = source
        self._log = log

    @property
    def config(self):
        return self.runner.config

    @property
    def backend(self) -> str:
        return self.runner.backend

    @property
    def precision(self) -> str:
        return self.runner.precision

    def __repr__(self) -> str:
        return f"Model({self.source!r}, backend {self.runner.describe()})"

    def _warn(self, message: str) -> None:
        if self._log is not None:
            self._log(message)
        else:
            warnings.warn(message, GenerationWarning, stacklevel=4)

    def generate(
        self,
        prompt: Union[str, Sequence[str]],
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        *,
        temperature: float = _D.temperature,
        top_k: int = _D.top_k,
        top_p: float = _D.top_p,
        min_p: float = _D.min_p,
        repetition_penalty: float = _D.repetition_penalty,
        presence_penalty: float = _D.presence_penalty,
        frequency_penalty: float = _D.frequency_penalty,
        seed: Optional[int] = None,
        n: int = 1,
        stop: Union[str, Sequence[str]] = (),
        stream: bool = False,
        logprobs: Optional[int] = None,
    ):
        """Continue ``prompt`` (a str, or a list of str).

        Returns a GenerationResult for one prompt and n=1; a list of n results for one prompt and n > 1;
        a list (one entry per prompt, each as above) for a list of prompts. stream=True returns a TextStream.
        temperature 0 is greedy; top_k 0, top_p 1, min_p 0 and the penalties' neutral values are off.
        seed: the Philox key (None: a fresh one, in each result's ``seed``). stop: text that ends a sample
        (cut before it). logprobs: None, or n in [0, 20] for each token's log-probability and the top n.
        """
        single = isinstance(prompt, str)
        prompts = [prompt] if single else prompt
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompt must be a str or a list of str; got {type(prompt).__name__}")
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise TypeError(f"prompt {i} must be a str; got {type(p).__name__}")
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, (list, tuple)):
            raise TypeError(f"stop must be a str or a list of str; got {type(stop).__name__}")
        if not isinstance(stream, bool):
            raise TypeError(f"stream must be True or False; got {stream!r}")
        params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                                frequency_penalty)
        pieces = generate_iter(self.runner, self.tokenizer, prompts, max_new_tokens, params, seed, stops, n,
                               logprobs, self._warn)
        k = n  # checked by generate_iter

        def shape(results: list[GenerationResult]):
            per_prompt = [results[i:i + k] for i in range(0, len(results), k)]
            per_prompt = [rs[0] if k == 1 else rs for rs in per_prompt]
            return per_prompt[0] if single else per_prompt

        if stream:
            return TextStream(pieces, shape, single and k == 1, k)
        while True:
            try:
                next(pieces)
            except StopIteration as done:
                return shape(done.value)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(check_text(text, "text"))

    def _ids(self, text_or_ids, what: str) -> np.ndarray:
        if isinstance(text_or_ids, str):
            ids = self.encode(text_or_ids)
            if not ids:
                raise ValueError(f"{what}: the text encodes to no tokens")
        else:
            arr = np.asarray(text_or_ids)
            if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
                raise TypeError(f"{what} takes a str or a 1-D sequence of token ids; got {arr.dtype} of shape "
                                f"{arr.shape}")
            ids = check_ids(arr, self.config.vocab_size)
        return np.asarray(ids, np.int64)

    def logits(self, text_or_ids) -> np.ndarray:
        """Logits of every position of a text (or of token ids), from position 0: [T, V] float32."""
        ids = self._ids(text_or_ids, "logits")
        if len(ids) > self.config.n_ctx:
            raise ValueError(f"logits: {len(ids)} tokens do not fit the context of {self.config.n_ctx}")
        return np.asarray(self.runner.forward(ids), np.float32)

    def perplexity(self, text_or_ids, max_length: Optional[int] = None, stride: Optional[int] = None) -> Perplexity:
        """Sliding-window perplexity (transformers' guide): windows of max_length tokens (default n_ctx) every
        ``stride`` tokens (default max_length // 2). Non-finite logits raise PerplexityError."""
        ids = self._ids(text_or_ids, "perplexity") if not isinstance(text_or_ids, str) else self.encode(text_or_ids)
        return perplexity(self.runner, list(map(int, ids)), max_length, stride)


def load(model: str = "gpt2", backend: str = "auto", precision: str = "fp32", tokenizer_dir=None,
         log: Optional[Callable[[str], None]] = None) -> Model:
    """A model by hub id or alias, local Hugging Face directory or packed file, on ``backend`` ("auto",
    "numpy" or "cuda") at ``precision`` ("fp32"; "tf32", "bf16" on cuda). tokenizer_dir: a folder with
    tokenizer.json (or vocab.json + merges.txt) to use instead of the checkpoint's. ``log`` receives the
    generation warnings (default: warnings.warn)."""
    for name, v in (("model", model), ("backend", backend), ("precision", precision)):
        if not isinstance(v, str) and not (name == "model" and hasattr(v, "__fspath__")):
            raise TypeError(f"{name} must be a str; got {type(v).__name__}")
    loaded = load_model(model)
    tokenizer = loaded.tokenizer if tokenizer_dir is None else Tokenizer.from_dir(tokenizer_dir)
    runner = make_runner(loaded.weights, backend, precision)
    return Model(runner, tokenizer, loaded.source, log)
