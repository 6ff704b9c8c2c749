"""The command line: generate, validate, perplexity, pack, info, export-cuda, bench, serve.

Output goes to stdout (generated text, figures); everything about the run
(backend picked, warnings, the one-line summary) goes to stderr. Errors about
the model, the backend or the input print ``Error: ...`` and exit with status 1;
bad option values are click usage errors (status 2).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import platform
import secrets
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import click

from . import __version__
from .backends import BACKENDS, PRECISIONS, BackendError, cuda_status, make_runner, resolve_backend
from .checkpoint import HUB_IDS, CheckpointError, default_pack_path, load_model, pack
from .config import ConfigError
from .kernel_source import set_compile_progress
from .api import Model
from .engine import Limits
from .generate import DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens
from .output import OutputError
from .perplexity import PerplexityError
from .sampler import SEED_MAX, TEMPERATURE_FLOOR, SamplingError, SamplingParams
from .tokenizer import TokenizerError

USER_ERRORS = (CheckpointError, ConfigError, BackendError, TokenizerError, OutputError)


@contextmanager
def user_errors(*extra):
    """CheckpointError / ConfigError / BackendError / TokenizerError (and ``extra``) -> Error: ..., exit 1."""
    try:
        yield
    except USER_ERRORS + tuple(extra) as e:
        raise click.ClickException(str(e)) from None


def require_utf8(text: str, param_hint: str) -> str:
    """``text`` as given on the command line; bytes that are not UTF-8 (which Python keeps as lone
    surrogates) are a usage error naming the byte and its offset."""
    for i, ch in enumerate(text):
        if 0xD800 <= ord(ch) < 0xE000:
            offset = len(text[:i].encode("utf-8"))
            byte = f"byte 0x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"U+{ord(ch):04X}"
            raise click.BadParameter(f"not valid UTF-8: {byte} at byte offset {offset}", param_hint=param_hint)
    return text


def note(message: str) -> None:
    click.echo(message, err=True)


MODEL_HELP = (f"hub id or alias ({', '.join(HUB_IDS)}), a local Hugging Face directory, "
              "or a file made by `gpt2block pack`")


def model_option(default="gpt2"):
    return click.option("--model", "-m", default=default, show_default=True, help=MODEL_HELP)


backend_option = click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                              help="auto: cuda where CuPy sees a GPU, else numpy")
precision_option = click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
                                help="fp32 everywhere; tf32 and bf16 are CUDA modes")


def load_runner(model: str, backend: str, precision: str, times: dict | None = None):
    """(LoadedModel, Runner); says on stderr which backend 'auto' picked. ``times`` (a dict), when given,
    receives load_s (the checkpoint and tokenizer read) and setup_s (the runner made: the weights on the
    device and prepared)."""
    with user_errors():
        t0 = time.perf_counter()
        loaded = load_model(model)
        t1 = time.perf_counter()
        name = resolve_backend(backend)
        if backend == "auto":
            why = cuda_status()[1]
            note(f"backend auto -> {name} ({why})")
        set_compile_progress(note)  # a machine's first CUDA run compiles the kernels: say so, module by module
        runner = make_runner(loaded.weights, name, precision)
        if times is not None:
            times.update(load_s=t1 - t0, setup_s=time.perf_counter() - t1)
        return loaded, runner


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpt2block")
def main():
    """gpt2block: GPT-2 inference on our own CUDA kernels, with a NumPy reference."""


# ---------------------------------------------------------------- generate


def unescape(s: str) -> str:
    """The escapes a shell does not make easy in --stop: \\n, \\t, \\r and \\\\."""
    out, i = [], 0
    table = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in table:
            out.append(table[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def stop_strings(ctx, param, values):
    out = [unescape(require_utf8(v, "--stop")) for v in values]
    if any(v == "" for v in out):
        raise click.BadParameter("a stop string must not be empty")
    return out


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


def read_prompt(prompt: str) -> str:
    """The PROMPT argument, or stdin for '-': UTF-8 text, else Error: naming the byte offset."""
    if prompt == "-":
        stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        if stream is None:
            return sys.stdin.read()
        data = stream.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise click.ClickException(f"the prompt on stdin is not UTF-8 text: byte 0x{data[e.start]:02x} at "
                                       f"byte offset {e.start}") from None
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # the shell's bytes that are not UTF-8 arrive as lone surrogates
        try:
            offset = f"byte offset {len(prompt[:e.start].encode('utf-8', 'surrogateescape'))}"
            byte = f"byte 0x{prompt[e.start].encode('utf-8', 'surrogateescape')[0]:02x}"
        except UnicodeEncodeError:
            offset, byte = f"character {e.start}", f"{prompt[e.start]!r}"
        raise click.ClickException(f"the prompt (PROMPT) is not UTF-8 text: {byte} at {offset}") from None
    return prompt


_D = SamplingParams()  # the defaults (shared with the Python API)


@main.command()
@click.argument("prompt")
@model_option()
@backend_option
@precision_option
@click.option("--max-new-tokens", "-n", type=click.IntRange(min=1), default=DEFAULT_MAX_NEW_TOKENS,
              show_default=True, help="at most n_ctx - 1; a longer prompt keeps its last n_ctx - n tokens")
@click.option("--temperature", "-t", type=FiniteFloatRange(min=0), default=_D.temperature, show_default=True,
              help=f"0 (or below {TEMPERATURE_FLOOR:g}) = greedy")
@click.option("--top-k", type=click.IntRange(min=0), default=_D.top_k, show_default=True, help="0 = off")
@click.option("--top-p", type=FiniteFloatRange(min=0, max=1, min_open=True), default=_D.top_p, show_default=True,
              help="nucleus sampling; 1 = off")
@click.option("--min-p", type=FiniteFloatRange(min=0, max=1), default=_D.min_p, show_default=True,
              help="keep tokens at least min-p times as likely as the most likely one; 0 = off")
@click.option("--repetition-penalty", type=FiniteFloatRange(min=0, min_open=True), default=_D.repetition_penalty,
              show_default=True, help="CTRL-style, over the prompt and the generated tokens; 1 = off")
@click.option("--presence-penalty", type=FiniteFloatRange(min=-2, max=2), default=_D.presence_penalty,
              show_default=True, help="OpenAI's, over the generated tokens; 0 = off")
@click.option("--frequency-penalty", type=FiniteFloatRange(min=-2, max=2), default=_D.frequency_penalty,
              show_default=True, help="OpenAI's, per occurrence in the generated tokens; 0 = off")
@click.option("--seed", type=click.IntRange(min=0, max=SEED_MAX), default=None,
              help="seed of the sampler's random numbers [default: a fresh one, printed in the summary]")
@click.option("--stop", multiple=True, callback=stop_strings,
              help="stop at this text (repeatable; \\n, \\t understood); the output is cut before it")
@click.option("--num-samples", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="print tokens as they come (with --num-samples > 1 the first sample streams, the others follow it)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object with every sample (no streaming)")
def generate(prompt, model, backend, precision, max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
             presence_penalty, frequency_penalty, seed, stop, num_samples, stream, as_json):
    """Continue PROMPT (- reads it from stdin)."""
    started_at = time.perf_counter()  # the start-up times of the summary are counted from here

    prompt = read_prompt(prompt)
    try:
        params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                                frequency_penalty)
    except SamplingError as e:
        raise click.UsageError(str(e)) from None
    seed = secrets.randbits(64) if seed is None else seed
    times: dict = {}
    loaded, runner = load_runner(model, backend, precision, times)
    for name, check in (("--max-new-tokens", lambda: check_max_new_tokens(max_new_tokens, runner.config.n_ctx)),
                        ("--num-samples", lambda: runner.check_batch(num_samples))):
        try:
            check()
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=name) from None
    with user_errors():
        api_model = Model(runner, loaded.tokenizer, loaded.source, log=note)
    out = sys.stdout
    stream = stream and not as_json

    def header(i):  # before each sample when there are several
        return f"{chr(10) if i else ''}=== sample {i + 1}/{num_samples} ===\n" if num_samples > 1 else ""

    # Streaming: the prompt goes out with the first token, after the start-up messages of a first run
    # (its kernel builds, on stderr); a build message that comes later (the decode kernels) starts a line
    # of its own on stderr, so that it does not land inside the text on a terminal.
    started, line_open = [], [False]

    def write(text):
        if text:
            out.write(text)
            line_open[0] = not text.endswith("\n")

    def start():
        if stream and not started:
            write(header(0) + prompt)
            started.append(True)

    def build_note(message):
        if line_open[0]:
            message, line_open[0] = "\n" + message, False
        note(message)

    set_compile_progress(build_note)

    with user_errors(SamplingError):
        pieces = api_model.generate(prompt, max_new_tokens, temperature=params.temperature, top_k=params.top_k,
                                    top_p=params.top_p, min_p=params.min_p,
                                    repetition_penalty=params.repetition_penalty,
                                    presence_penalty=params.presence_penalty,
                                    frequency_penalty=params.frequency_penalty, seed=seed, n=num_samples,
                                    stop=stop, stream=True)
        for piece in pieces:  # the first sample streams live; the others are printed after it
            text = piece if isinstance(piece, str) else piece.text if piece.sample == 0 else ""
            if stream and text:
                start()
                write(text)
                out.flush()
    results = pieces.result if num_samples > 1 else [pieces.result]
    first = results[0].timing.first_token_at if results else None
    if first is not None:
        times["first_token_s"] = first - started_at
    if as_json:
        click.echo(json.dumps(json_report(loaded, runner, seed, params, results, times), indent=2))
    else:
        for i, r in enumerate(results):
            if stream and i == 0:
                start()
                out.write("\n")
            else:
                out.write(header(i) + prompt + r.text + "\n")
        out.flush()
    note(summary(results, runner, seed, times))


def summary(results, runner, seed, times: dict | None = None) -> str:
    """The run's line on stderr; ``times`` (load_runner's, and first_token_s from the command's start) adds
    the start-up: when the first token came, the checkpoint read and the runner's set-up."""
    n = sum(r.new_tokens for r in results)
    secs = sum(t.total_s for t in {id(r.timing): r.timing for r in results}.values())
    rate = n / secs if secs > 0 else 0.0
    reasons = ", ".join(sorted({r.stop_reason for r in results}))
    line = (f"[gpt2block] {n} tokens in {secs:.2f} s ({rate:.1f} tokens/s), backend {runner.describe()}, "
            f"seed {seed}, stopped by {reasons}")
    times = times or {}
    labels = (("load_s", "checkpoint read"), ("setup_s", "runner set up"))
    parts = [f"{label} {times[key]:.2f} s" for key, label in labels if key in times]
    if "first_token_s" in times:
        line += f"; first token {times['first_token_s']:.2f} s after the command started"
        if parts:
            line += f" ({', '.join(parts)})"
    return line


def json_report(loaded, runner, seed, params, results, times: dict | None = None) -> dict:
    """The --json object; ``times``: the start-up (load_runner's load_s and setup_s, first_token_s from the
    command's start), each null where not known."""
    timings = list({id(r.timing): r.timing for r in results}.values())
    times = times or {}
    return {
        "model": loaded.source,
        "backend": runner.backend,
        "precision": runner.precision,
        "seed": seed,
        "sampling": dataclasses.asdict(params),
        "samples": [
            {"prompt": r.prompt, "text": r.text, "token_ids": r.token_ids, "prompt_ids": r.prompt_ids,
             "stop_reason": r.stop_reason, "stop_string": r.stop_string, "new_tokens": r.new_tokens}
            for r in results
        ],
        "timing": {
            "prefill_s": sum(t.prefill_s for t in timings),
            "decode_s": sum(t.decode_s for t in timings),
            "new_tokens": sum(t.new_tokens for t in timings),
            "tokens_per_s": (sum(t.new_tokens for t in timings) / s) if (s := sum(t.total_s for t in timings)) else 0.0,
            "decode_tokens_per_s": (sum(t.decode_tokens for t in timings) / d)
            if (d := sum(t.decode_s for t in timings)) else 0.0,
            "wall_s": sum(t.wall_s for t in timings),
            "load_s": times.get("load_s"),
            "setup_s": times.get("setup_s"),
            "first_token_s": times.get("first_token_s"),
        },
    }


# ---------------------------------------------------------------- validate


@main.command()
@model_option()
@backend_option
@precision_option
@click.option("--prompt", default=None, help="text whose logits are compared [default: \"Hello, I'm a language model,\"]")
def validate(model, backend, precision, prompt):
    """Compare logits and a greedy continuation with Hugging Face transformers on the same checkpoint."""
    from . import validate as v

    if prompt is not None:
        require_utf8(prompt, "--prompt")
    with user_errors(v.MissingDependency):
        v._torch()  # a clear error before loading anything when torch/transformers are absent
    loaded, runner = load_runner(model, backend, precision)
    with user_errors(v.MissingDependency, v.ValidateError):
        ids = loaded.tokenizer.encode(v.DEFAULT_PROMPT if prompt is None else prompt)
        if not ids:
            raise click.BadParameter("the prompt encodes to no tokens", param_hint="--prompt")
        hf = v.hf_model_for(loaded.source, loaded.weights)
        report = v.validate(runner, hf, ids)
    click.echo(f"validate {loaded.source}: backend {runner.describe()} against transformers "
               f"{metadata.version('transformers')}, {len(report.prompt_ids)} prompt tokens")
    for c in report.checks:
        click.echo(f"  {'PASS' if c.passed else 'FAIL'}  {c.name}: {c.figure}  (limit: {c.limit})")
    click.echo("all checks passed" if report.passed else "FAILED")
    if not report.passed:
        sys.exit(1)


# ---------------------------------------------------------------- perplexity


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@model_option()
@backend_option
@precision_option
@click.option("--max-length", type=click.IntRange(min=2), default=None,
              help="window length in tokens [default: the model's n_ctx]")
@click.option("--stride", type=click.IntRange(min=1), default=None,
              help="tokens between window starts [default: max-length // 2]")
def perplexity(file, model, backend, precision, max_length, stride):
    """Sliding-window perplexity of the text in FILE (transformers' perplexity guide)."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise click.ClickException(f"{file}: not UTF-8 text ({e})") from None
    loaded, runner = load_runner(model, backend, precision)
    n_ctx = runner.config.n_ctx
    if max_length is not None and max_length > n_ctx:
        raise click.BadParameter(f"{max_length} is longer than the model's context ({n_ctx})",
                                 param_hint="--max-length")
    L = max_length or n_ctx
    if stride is not None and stride > L:
        raise click.BadParameter(f"{stride} is larger than the window length ({L})", param_hint="--stride")
    with user_errors(PerplexityError):
        res = Model(runner, loaded.tokenizer, loaded.source).perplexity(text, max_length, stride)
    click.echo(f"perplexity {res.ppl:.6f}")
    note(f"[gpt2block] {res.n_tokens} tokens, {res.n_windows} windows of {res.max_length} (stride {res.stride}), "
         f"mean nll {res.avg_nll:.6f}, backend {runner.describe()}")


# ---------------------------------------------------------------- pack, info, export-cuda


@main.command("pack")
@click.argument("model")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="packed file to write [default: weights/<name>.safetensors]")
def pack_cmd(model, output):
    """Write MODEL as one packed safetensors file (see weights/README.md)."""
    with user_errors():
        out = pack(model, output if output is not None else default_pack_path(model))
    click.echo(str(out))


def _version(*dists) -> str:
    for d in dists:
        try:
            return f"{metadata.version(d)}" + ("" if len(dists) == 1 else f" ({d})")
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


@main.command()
def info():
    """Backends available here, the GPU, versions, where the kernel sources are."""
    from .kernel_source import kernels_dir

    ok, why = cuda_status()
    click.echo(f"gpt2block {__version__} (python {platform.python_version()}, {platform.machine()})")
    click.echo("backends: numpy" + (", cuda" if ok else ""))
    click.echo(f"cuda: {'available' if ok else 'unavailable'}: {why}")
    if ok:
        click.echo(f"gpu: {gpu_name()}")
    for name, dists in (("numpy", ("numpy",)), ("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy")),
                        ("torch", ("torch",)), ("transformers", ("transformers",)),
                        ("tokenizers", ("tokenizers",)), ("safetensors", ("safetensors",)),
                        ("huggingface_hub", ("huggingface_hub",)), ("click", ("click",))):
        click.echo(f"{name}: {_version(*dists)}")
    try:
        click.echo(f"kernel sources: {kernels_dir()}")
    except FileNotFoundError as e:
        click.echo(f"kernel sources: missing ({e})")


def gpu_name() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@main.command("export-cuda")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="the .cu file to write (e.g. solution.cu)")
@click.option("--precision", type=click.Choice(["fp32", "tf32"]), default="fp32", show_default=True,
              help="fp32: fp32-level accuracy (three fp16 tensor-core products on scaled fp16 planes; FFMA on "
                   "sm_75); tf32: TF32-level accuracy, one fp16 product (faster; errors up to about 1e-3)")
def export_cuda_cmd(output, precision):
    """Write the one-file CUDA solution of the LeetGPU GPT-2 block challenge (every GPU: the code path is
    chosen when nvcc compiles it; the file's header names the flags it was tested with)."""
    from .export import export_cuda

    try:
        out = export_cuda(output, precision)
    except OutputError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"{output}: cannot write ({e.strerror or e})") from None
    click.echo(str(out))


from .bench import SECTIONS as BENCH_SECTIONS  # noqa: E402 - the sections' one owner


@main.command()
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="bench-out", show_default=True,
              help="folder for bench.json, bench.md and bench.png")
@click.option("--reps", type=click.IntRange(min=20), default=20, show_default=True,
              help="timed runs per figure (the median is reported)")
@click.option("--quick", is_flag=True, help="fewer sequence lengths and decode steps; no torch.compile peer")
@click.option("--section", "sections", type=click.Choice(BENCH_SECTIONS), multiple=True,
              help="run only these sections (repeatable; default: all)")
def bench(out_dir, reps, quick, sections):
    """Benchmark gpt2block against torch and transformers on this GPU (see docs/PERFORMANCE.md)."""
    from .bench import run_bench

    ok, why = cuda_status()
    if not ok:
        raise click.ClickException(f"the benchmark needs a GPU: {why}")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise click.ClickException(f"the benchmark's peers need torch and transformers ({e}); "
                                   "pip install gpt2block[test]") from None
    chosen = tuple(sections) or BENCH_SECTIONS
    if "ceilings" not in chosen:
        chosen = ("ceilings",) + chosen
    with user_errors(RuntimeError):
        run_bench(out_dir, reps, quick, chosen, log=note)
    click.echo((Path(out_dir) / "bench.md").read_text())


# ---------------------------------------------------------------- serve

_L = Limits()  # the server's limits (their defaults' one owner)


@main.command()
@model_option()
@backend_option
@precision_option
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (0.0.0.0: every interface)")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--served-model-name", default=None, help="the model's name in the API [default: the --model argument]")
@click.option("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 (also $GPT2BLOCK_API_KEY)",
              envvar="GPT2BLOCK_API_KEY")
@click.option("--max-batch", type=click.IntRange(min=1), default=_L.max_batch, show_default=True,
              help="KV slots: rows decoded together, made once at start-up; also the most rows (prompts x n) "
                   "of one request")
@click.option("--max-queue", type=click.IntRange(min=0), default=_L.max_queue, show_default=True,
              help="requests waiting for a slot; past it, 429 with Retry-After")
@click.option("--request-timeout", type=FiniteFloatRange(min=0, min_open=True), default=_L.request_timeout,
              show_default=True,
              help="seconds from a request's arrival to its last token")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=_L.max_body_bytes, show_default=True,
              help="largest request body; past it, 413")
@click.option("--drain-timeout", type=FiniteFloatRange(min=0), default=_L.drain_timeout, show_default=True,
              help="seconds running requests get to finish after SIGTERM")
@click.option("--prefill-chunk", type=click.IntRange(min=1), default=_L.prefill_chunk, show_default=True,
              help="prompt tokens prefilled per step (a longer prompt takes several steps)")
@click.option("--device", type=click.IntRange(min=0), default=None, help="the GPU of the cuda backend [default: 0]")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, help="uvicorn's log level (access lines at info)")
def serve(model, backend, precision, host, port, served_model_name, api_key, max_batch, max_queue, request_timeout,
          max_body_bytes, drain_timeout, prefill_chunk, device, log_level):
    """An OpenAI-compatible HTTP server (POST /v1/completions) with continuous batching."""
    try:
        from .server import serve as run_server
    except ImportError as e:
        raise click.ClickException(f"gpt2block serve needs the serve extra ({e}): "
                                   "pip install gpt2block[serve]") from None
    with user_errors():
        name = resolve_backend(backend)
    if backend == "auto":
        note(f"backend auto -> {name} ({cuda_status()[1]})")
    if device is not None and name != "cuda":
        raise click.BadParameter("selects a GPU of the cuda backend; this run uses numpy", param_hint="--device")
    limits = Limits(max_batch, max_queue, request_timeout, max_body_bytes, drain_timeout, prefill_chunk)
    status = run_server(functools.partial(_serve_load, model, name, precision, device), served_model_name or str(model),
                        host, port, limits, api_key, note, log_level)
    sys.exit(status)


def _serve_load(model: str, backend: str, precision: str, device):
    """serve's model, loaded in the engine's process (a picklable callable: functools.partial of this)."""
    from .api import load

    set_compile_progress(note)
    if backend == "cuda":
        import cupy

        cupy.cuda.Device(device or 0).use()
    return load(model, backend, precision, log=note)
