"""The click CLI through CliRunner: generate (stream, --json, stdin), every bad option value,
model errors, pack round trip, info, validate (pass and fail), perplexity, export-cuda."""

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from gpt2block import checkpoint
from gpt2block import cli as cli_mod
from gpt2block.backends import cuda_status, make_runner
from gpt2block.checkpoint import load_model
from gpt2block.cli import main
import gpt2block
from gpt2block.generate import DEFAULT_MAX_NEW_TOKENS
from gpt2block.sampler import SamplingParams

from test_perplexity import TEXT, guide_perplexity


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)


def gen(tiny_ckpt, *args, input=None):
    return run("generate", "--model", tiny_ckpt.path, "--backend", "numpy", *args, input=input)


# ---------------------------------------------------------------- generate


class _BuildingRunner:
    """A runner that reports kernel builds as a first CUDA run does: one before its prefill, one at
    its first decode step (after the streamed text has begun)."""

    def __init__(self, inner):
        self._inner, self._decoded = inner, False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _report(self, what):
        from gpt2block.kernel_source import compile_progress

        compile_progress()(f"[gpt2block] compiling kernels/{what}.cu for this GPU (first run only; cached after) ...")

    def sample_prefill(self, *args, **kw):
        self._report("prefill")
        return self._inner.sample_prefill(*args, **kw)

    def _first_decode(self):
        if not self._decoded:
            self._decoded = True
            self._report("decode")

    def sample_step(self, *args, **kw):
        self._first_decode()
        return self._inner.sample_step(*args, **kw)

    def sample_steps(self, *args, **kw):  # the sampled stream generate() uses
        steps = self._inner.sample_steps(*args, **kw)
        try:
            for ids in steps:
                self._first_decode()
                yield ids
        finally:
            steps.close()


def test_generate_keeps_build_messages_out_of_the_streamed_line(tiny_ckpt, monkeypatch):
    """A first run's kernel builds (kernel_source.set_compile_progress, set by the CLI) go to stderr:
    those before the first token come before the streamed prompt, and one after it starts a line of its
    own; stdout is the same text as a run without them."""
    plain = gen(tiny_ckpt, "The engine keeps", "-n", 6, "--seed", 3)  # a seed whose first token is whole text
    real = cli_mod.load_runner

    def building(*args):
        loaded, runner = real(*args)
        return loaded, _BuildingRunner(runner)

    monkeypatch.setattr(cli_mod, "load_runner", building)
    r = gen(tiny_ckpt, "The engine keeps", "-n", 6, "--seed", 3)
    assert r.exit_code == 0, r.output
    assert r.stdout == plain.stdout
    assert "[gpt2block] compiling kernels/prefill.cu" in r.stderr and "\n[gpt2block] compiling kernels/prefill" not in r.stderr
    assert "\n\n[gpt2block] compiling kernels/decode.cu" in r.stderr  # a line break of its own first


def test_generate_streams_prompt_and_continuation(tiny_ckpt):
    r = gen(tiny_ckpt, "The engine keeps", "-n", 8, "--seed", 3)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("The engine keeps") and r.stdout.endswith("\n")
    assert "[gpt2block]" in r.stderr and "tokens/s" in r.stderr and "backend numpy (fp32)" in r.stderr
    assert "seed 3" in r.stderr
    assert "[gpt2block]" not in r.stdout


def test_generate_json_repeats_with_the_same_seed_and_matches_the_api(tiny_ckpt):
    args = ("Quick brown foxes", "-n", 10, "--seed", 42, "--temperature", 0.9, "--top-k", 30, "--top-p", 0.9,
            "--min-p", 0.01, "--repetition-penalty", 1.2, "--presence-penalty", 0.5, "--frequency-penalty", -0.3,
            "--json")
    a, b = gen(tiny_ckpt, *args), gen(tiny_ckpt, *args)
    assert a.exit_code == 0, a.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["samples"] == jb["samples"] and ja["seed"] == 42
    assert ja["sampling"] == {"temperature": 0.9, "top_k": 30, "top_p": 0.9, "min_p": 0.01, "repetition_penalty": 1.2,
                              "presence_penalty": 0.5, "frequency_penalty": -0.3}
    api = gpt2block.load(str(tiny_ckpt.path), backend="numpy").generate(
        "Quick brown foxes", 10, temperature=0.9, top_k=30, top_p=0.9, min_p=0.01, repetition_penalty=1.2,
        presence_penalty=0.5, frequency_penalty=-0.3, seed=42)
    assert ja["samples"][0]["token_ids"] == api.token_ids
    assert ja["samples"][0]["text"] == api.text
    assert ja["backend"] == "numpy" and ja["timing"]["new_tokens"] == len(api.token_ids)
    t = ja["timing"]
    assert t["wall_s"] >= t["prefill_s"] + t["decode_s"] > 0 and t["decode_tokens_per_s"] > 0


def test_generate_defaults_are_the_apis():
    """One owner of the defaults: the CLI's options show SamplingParams's and DEFAULT_MAX_NEW_TOKENS."""
    import inspect

    defaults = SamplingParams()
    opts = {p.name: p.default for p in cli_mod.generate.params}
    sig = inspect.signature(gpt2block.Model.generate).parameters
    for name in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty"):
        assert opts[name] == getattr(defaults, name) == sig[name].default, name
    assert opts["max_new_tokens"] == DEFAULT_MAX_NEW_TOKENS == sig["max_new_tokens"].default
    assert (defaults.temperature, defaults.top_k, defaults.top_p) == (1.0, 50, 1.0)


def test_generate_reports_its_start_up(tiny_ckpt, monkeypatch):
    """The summary and --json give when the first token came (from the command's start), the checkpoint read
    and the runner's set-up: each measured around what it names, so a slow load shows where it is."""
    real_load = cli_mod.load_model

    def slow_load(*args):
        time.sleep(0.3)
        return real_load(*args)

    monkeypatch.setattr(cli_mod, "load_model", slow_load)
    r = gen(tiny_ckpt, "Start-up is", "-n", 3, "--seed", 1, "--json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["timing"]
    assert 0.3 <= t["load_s"] < 30 and 0 <= t["setup_s"] < 30
    assert t["load_s"] + t["setup_s"] <= t["first_token_s"] <= t["load_s"] + t["setup_s"] + t["prefill_s"] + 5
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("[gpt2block] 3 tokens")]
    assert len(line) == 1, r.stderr
    m = re.search(r"; first token ([0-9.]+) s after the command started \(checkpoint read ([0-9.]+) s, "
                  r"runner set up ([0-9.]+) s\)$", line[0])
    assert m, line[0]
    assert abs(float(m.group(1)) - t["first_token_s"]) < 0.01 and abs(float(m.group(2)) - t["load_s"]) < 0.01


def test_summary_without_start_up_times_says_nothing_of_them():
    from gpt2block.generate import GenerationResult, Timing

    class _R:
        def describe(self):
            return "numpy (fp32)"

    timing = Timing(prefill_s=0.5, decode_s=0.5, new_tokens=2)
    res = GenerationResult("p", 0, "ab", [1, 2], [3], "length", timing=timing)
    line = cli_mod.summary([res], _R(), 7)
    assert line == "[gpt2block] 2 tokens in 1.00 s (2.0 tokens/s), backend numpy (fp32), seed 7, stopped by length"
    line = cli_mod.summary([res], _R(), 7, {"first_token_s": 1.234})
    assert line.endswith("; first token 1.23 s after the command started")


def test_stream_and_no_stream_print_the_same(tiny_ckpt):
    a = gen(tiny_ckpt, "Sampling picks", "-n", 12, "--seed", 5)
    b = gen(tiny_ckpt, "Sampling picks", "-n", 12, "--seed", 5, "--no-stream")
    assert a.exit_code == b.exit_code == 0
    assert a.stdout == b.stdout


def test_several_samples_are_printed_one_after_the_other(tiny_ckpt):
    r = gen(tiny_ckpt, "Tokens become", "-n", 6, "--seed", 1, "--num-samples", 3)
    assert r.exit_code == 0, r.output
    for i in (1, 2, 3):
        assert f"=== sample {i}/3 ===" in r.stdout
    assert r.stdout.count("Tokens become") == 3
    j = json.loads(gen(tiny_ckpt, "Tokens become", "-n", 6, "--seed", 1, "--num-samples", 3, "--json").stdout)
    assert [s["text"] for s in j["samples"]] == [part.split("Tokens become", 1)[1].rstrip("\n")
                                                 for part in r.stdout.split("===")[2::2]]


def test_prompt_from_stdin(tiny_ckpt):
    a = gen(tiny_ckpt, "-", "-n", 5, "--temperature", 0, "--json", input="When the weather is cold")
    b = gen(tiny_ckpt, "When the weather is cold", "-n", 5, "--temperature", 0, "--json")
    assert json.loads(a.stdout)["samples"] == json.loads(b.stdout)["samples"]


def test_stop_string_with_escape(tiny_ckpt):
    free = json.loads(gen(tiny_ckpt, "Numbers", "-n", 20, "--temperature", 0, "--json").stdout)["samples"][0]
    stop = free["text"][3:6]
    r = json.loads(gen(tiny_ckpt, "Numbers", "-n", 20, "--temperature", 0, "--json", "--stop", stop).stdout)
    s = r["samples"][0]
    assert s["stop_reason"] == "stop" and s["text"] == free["text"][:free["text"].find(stop)]
    assert cli_mod.unescape("a\\nb\\t\\\\n") == "a\nb\t\\n"


def test_empty_prompt(tiny_ckpt):
    r = gen(tiny_ckpt, "", "-n", 3, "--temperature", 0, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["samples"][0]["prompt_ids"] == [511]


BAD_GENERATE_OPTIONS = [
    (("--max-new-tokens", "0"), "--max-new-tokens"),
    (("--max-new-tokens", "abc"), "--max-new-tokens"),
    (("--temperature", "-0.5"), "--temperature"),
    (("--temperature", "nan"), "temperature"),
    (("--temperature", "warm"), "--temperature"),
    (("--top-k", "-1"), "--top-k"),
    (("--top-k", "1.5"), "--top-k"),
    (("--top-p", "0"), "--top-p"),
    (("--top-p", "1.5"), "--top-p"),
    (("--repetition-penalty", "0"), "--repetition-penalty"),
    (("--repetition-penalty", "-2"), "--repetition-penalty"),
    (("--seed", "-1"), "--seed"),
    (("--seed", str(2**64)), "--seed"),
    (("--temperature", "inf"), "--temperature"),
    (("--top-p", "nan"), "--top-p"),
    (("--min-p", "-0.1"), "--min-p"),
    (("--min-p", "1.5"), "--min-p"),
    (("--min-p", "nan"), "--min-p"),
    (("--presence-penalty", "2.5"), "--presence-penalty"),
    (("--presence-penalty", "-inf"), "--presence-penalty"),
    (("--frequency-penalty", "-3"), "--frequency-penalty"),
    (("--frequency-penalty", "nan"), "--frequency-penalty"),
    (("--repetition-penalty", "inf"), "--repetition-penalty"),
    (("--num-samples", "x"), "--num-samples"),
    (("--num-samples", "0"), "--num-samples"),
    (("--backend", "tpu"), "--backend"),
    (("--precision", "fp16"), "--precision"),
    (("--stop", ""), "--stop"),
    (("--no-such-option",), "no-such-option"),
]


@pytest.mark.parametrize("args, name", BAD_GENERATE_OPTIONS)
def test_every_bad_generate_option_is_a_usage_error(tiny_ckpt, args, name):
    r = gen(tiny_ckpt, "hi", *args)
    assert r.exit_code == 2, r.output
    assert name in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("args, name, words", [
    (("-n", "64"), "--max-new-tokens", "at most 63"),
    (("-n", str(10**30)), "--max-new-tokens", "at most 63"),
    (("-n", "2", "--num-samples", str(10**30)), "--num-samples", "GiB of KV cache"),
    (("-n", "2", "--num-samples", str(10**9)), "--num-samples", "GiB of KV cache"),
])
def test_huge_counts_are_refused_at_once_naming_what_they_need(tiny_ckpt, args, name, words):
    t0 = time.perf_counter()
    r = gen(tiny_ckpt, "hi", *args)
    assert time.perf_counter() - t0 < 20
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("Usage") or "Error:" in r.stderr
    assert name in r.stderr and words in r.stderr and "Traceback" not in r.output


def test_a_temperature_that_underflows_is_greedy(tiny_ckpt):
    greedy = json.loads(gen(tiny_ckpt, "Numbers", "-n", 8, "-t", 0, "--json").stdout)["samples"]
    tiny_t = gen(tiny_ckpt, "Numbers", "-n", 8, "-t", "1e-320", "--json", "--seed", 1)
    assert tiny_t.exit_code == 0 and "Warning" not in tiny_t.stderr
    assert json.loads(tiny_t.stdout)["samples"] == greedy


def test_the_new_sampling_options_change_the_draw(tiny_ckpt):
    base = ("Sampling picks", "-n", 12, "--seed", 4, "--json")
    plain = json.loads(gen(tiny_ckpt, *base).stdout)["samples"][0]["token_ids"]
    for opt, value in (("--frequency-penalty", 2), ("--presence-penalty", 2), ("--min-p", 0.9)):
        other = json.loads(gen(tiny_ckpt, *base, opt, value).stdout)["samples"][0]["token_ids"]
        assert other != plain, opt


def test_a_prompt_too_long_for_n_keeps_its_last_tokens_and_n_is_honoured(tiny_ckpt):
    text = "Quick brown foxes jump over lazy dogs. " * 20
    r = gen(tiny_ckpt, text, "-n", 40, "-t", 0.8, "--seed", 1, "--top-k", 0, "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["samples"][0]
    assert "keeping its last 24 tokens" in r.stderr
    assert len(s["prompt_ids"]) == 24 and (s["stop_reason"] == "length") == (len(s["token_ids"]) == 40)


@pytest.mark.parametrize("how", ["argument", "stdin"])
def test_a_prompt_that_is_not_utf8_is_refused_with_its_byte_offset(tiny_ckpt, how):
    if how == "argument":  # the shell's bytes b"ab\xffc" reach Python as "ab\udcffc" (surrogateescape)
        r = gen(tiny_ckpt, "ab\udcffc", "-n", 2)
    else:
        r = gen(tiny_ckpt, "-", "-n", 2, input=b"h\xc3\xa9llo \xff")
    assert r.exit_code == 1, r.output
    assert "Error:" in r.stderr and "not UTF-8" in r.stderr and "Traceback" not in r.output
    assert "byte 0xff at byte offset " + ("2" if how == "argument" else "7") in r.stderr


def test_a_prompt_argument_of_raw_bytes_from_a_real_shell(tiny_ckpt):
    r = subprocess.run([sys.executable, "-m", "gpt2block", "generate", b"ab\xfe", "--model", str(tiny_ckpt.path),
                        "--backend", "numpy", "-n", "2"], capture_output=True)
    assert r.returncode == 1 and b"byte 0xfe at byte offset 2" in r.stderr and b"Traceback" not in r.stderr


def _overflowing(monkeypatch):
    """load_runner giving a runner whose final LayerNorm gain is 3e38: finite weights, non-finite logits."""
    real = cli_mod.load_runner

    def load(*args, **kw):
        loaded, runner = real(*args, **kw)
        runner.ln_f_g = np.full_like(runner.ln_f_g, 3e38)
        return loaded, runner

    monkeypatch.setattr(cli_mod, "load_runner", load)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("temperature", ["0", "1"])
def test_non_finite_logits_end_generate_with_an_error(tiny_ckpt, monkeypatch, temperature):
    _overflowing(monkeypatch)
    r = gen(tiny_ckpt, "hi", "-n", 3, "-t", temperature)
    assert r.exit_code == 1 and "Error:" in r.stderr and "logits" in r.stderr and "Traceback" not in r.output


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_finite_logits_end_perplexity_with_an_error(tiny_ckpt, monkeypatch, tmp_path):
    _overflowing(monkeypatch)
    f = tmp_path / "text.txt"
    f.write_text(TEXT)
    r = run("perplexity", f, "--model", tiny_ckpt.path, "--backend", "numpy")
    assert r.exit_code == 1 and "Error:" in r.stderr and "NaN" in r.stderr
    assert "perplexity nan" not in r.stdout


def test_generate_needs_a_prompt():
    r = run("generate")
    assert r.exit_code == 2 and "PROMPT" in r.stderr


def test_missing_model_path_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    r = run("generate", "hi", "--model", missing, "--backend", "numpy")
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: ") and str(missing) in r.stderr and "Traceback" not in r.output


def test_a_directory_without_weights_is_an_error(tmp_path, tiny_ckpt):
    (tmp_path / "config.json").write_text((tiny_ckpt.path / "config.json").read_text())
    r = run("generate", "hi", "--model", tmp_path, "--backend", "numpy")
    assert r.exit_code == 1 and "model.safetensors" in r.stderr and "missing file" in r.stderr


def test_offline_hub_is_an_error_that_suggests_a_local_path(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.utils import LocalEntryNotFoundError

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("cannot reach huggingface.co and the file is not cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.chdir(tmp_path)  # so that "gpt2" is not a local folder
    r = run("generate", "hi", "--model", "gpt2", "--backend", "numpy")
    assert r.exit_code == 1
    assert "openai-community/gpt2" in r.stderr and "local path" in r.stderr and "Traceback" not in r.output


def test_cuda_backend_without_a_gpu_is_an_error(tiny_ckpt):
    if cuda_status()[0]:
        pytest.skip("a GPU is usable here")
    r = gen(tiny_ckpt, "hi", "--backend", "cuda")  # the later --backend wins
    assert r.exit_code == 1 and "Error: --backend cuda needs a GPU" in r.stderr


def test_auto_backend_says_what_it_picked(tiny_ckpt):
    r = run("generate", "hi", "--model", tiny_ckpt.path, "-n", 2)
    assert r.exit_code == 0 and "backend auto -> " in r.stderr


def test_a_cuda_precision_on_numpy_is_an_error(tiny_ckpt):
    r = gen(tiny_ckpt, "hi", "--precision", "bf16")
    assert r.exit_code == 1 and "Error:" in r.stderr and "bf16" in r.stderr


# ---------------------------------------------------------------- pack, info, export-cuda


def test_pack_round_trip(tiny_ckpt, tmp_path):
    out = tmp_path / "tiny.safetensors"
    r = run("pack", tiny_ckpt.path, "-o", out)
    assert r.exit_code == 0 and out.is_file() and str(out) in r.stdout
    args = ("-n", 10, "--seed", 9, "--json")
    a = json.loads(gen(tiny_ckpt, "Every backend", *args).stdout)["samples"]
    b = json.loads(run("generate", "Every backend", "--model", out, "--backend", "numpy", *args).stdout)["samples"]
    assert a == b
    w0, w1 = load_model(tiny_ckpt.path).weights, load_model(out).weights
    for name in ("blocks", "wte", "wpe", "ln_f_g", "ln_f_b"):
        np.testing.assert_array_equal(getattr(w0, name), getattr(w1, name))


def test_pack_default_path(tiny_ckpt, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "DEFAULT_WEIGHTS_DIR", tmp_path / "weights")
    r = run("pack", tiny_ckpt.path)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "weights" / f"{tiny_ckpt.path.name}.safetensors").is_file()


def test_pack_missing_model(tmp_path):
    r = run("pack", tmp_path / "nothing", "-o", tmp_path / "x.safetensors")
    assert r.exit_code == 1 and "Error:" in r.stderr and "nothing" in r.stderr


def test_info():
    r = run("info")
    assert r.exit_code == 0
    for line in ("backends: numpy", "cuda: ", "numpy: ", "torch: ", "transformers: ", "cupy: ", "kernel sources: "):
        assert line in r.stdout


def test_export_cuda(tmp_path):
    out = tmp_path / "solution.cu"
    r = run("export-cuda", "-o", out)
    assert r.exit_code == 0, r.output
    assert 'extern "C"' in out.read_text() and "solve" in out.read_text()
    assert "#define SOLVE_TF32X3 1\n" in out.read_text()  # fp32 mode by default
    r = run("export-cuda", "-o", out, "--precision", "tf32")
    assert r.exit_code == 0, r.output
    assert "#define SOLVE_TF32X3 0\n" in out.read_text() and "tf32 mode" in out.read_text()
    r = run("export-cuda", "-o", out, "--precision", "bf16")
    assert r.exit_code != 0 and "bf16" in r.output and "Traceback" not in r.output
    r = run("export-cuda", "-o", tmp_path)
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_python_dash_m():
    r = subprocess.run([sys.executable, "-m", "gpt2block", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for cmd in ("generate", "validate", "perplexity", "pack", "info", "export-cuda"):
        assert cmd in r.stdout


# ---------------------------------------------------------------- validate


def test_validate_passes_on_tiny(tiny_ckpt):
    r = run("validate", "--model", tiny_ckpt.path, "--backend", "numpy")
    assert r.exit_code == 0, r.output
    assert r.stdout.count("PASS") == 3 and "limit: <= 1.0e-04" in r.stdout and "all checks passed" in r.stdout


def test_validate_passes_on_a_packed_file(tiny_ckpt, tmp_path):
    out = tmp_path / "tiny.safetensors"
    assert run("pack", tiny_ckpt.path, "-o", out).exit_code == 0
    r = run("validate", "--model", out, "--backend", "numpy", "--prompt", "Twelve blocks later")
    assert r.exit_code == 0, r.output
    assert r.stdout.count("PASS") == 3


def test_validate_fails_with_exit_1_on_corrupted_weights(tiny_ckpt, monkeypatch):
    def corrupted_runner(weights, backend, precision):
        runner = make_runner(weights, backend, precision)
        b = runner.blocks[0]["b_proj"]  # a small change (a constant shift would vanish in the next LayerNorm)
        runner.blocks[0]["b_proj"] = b + np.random.default_rng(0).normal(0, 0.01, b.shape).astype(np.float32)
        return runner

    monkeypatch.setattr(cli_mod, "make_runner", corrupted_runner)
    r = run("validate", "--model", tiny_ckpt.path, "--backend", "numpy")
    assert r.exit_code == 1
    assert "FAIL  max |logit difference|" in r.stdout and "FAILED" in r.stdout


def test_validate_without_transformers_is_a_clear_error(tiny_ckpt, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name in ("torch", "transformers"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    r = run("validate", "--model", tiny_ckpt.path, "--backend", "numpy")
    assert r.exit_code == 1 and "Error:" in r.stderr and "install torch and transformers" in r.stderr


# ---------------------------------------------------------------- perplexity


def test_perplexity_equals_the_guide(tiny_ckpt, tmp_path):
    f = tmp_path / "text.txt"
    f.write_text(TEXT)
    r = run("perplexity", f, "--model", tiny_ckpt.path, "--backend", "numpy", "--stride", 20)
    assert r.exit_code == 0, r.output
    ppl = float(r.stdout.split()[1])
    ids = load_model(tiny_ckpt.path).tokenizer.encode(TEXT)
    assert ppl == pytest.approx(guide_perplexity(tiny_ckpt.model, ids, 64, 20), rel=1e-4)
    assert "windows of 64 (stride 20)" in r.stderr


@pytest.mark.parametrize("args, code, words", [
    (("--stride", "0"), 2, "--stride"),
    (("--stride", "65"), 2, "--stride"),
    (("--max-length", "1"), 2, "--max-length"),
    (("--max-length", "100"), 2, "--max-length"),
    (("--max-length", "32", "--stride", "40"), 2, "--stride"),
])
def test_perplexity_bad_options(tiny_ckpt, tmp_path, args, code, words):
    f = tmp_path / "text.txt"
    f.write_text(TEXT)
    r = run("perplexity", f, "--model", tiny_ckpt.path, "--backend", "numpy", *args)
    assert r.exit_code == code, r.output
    assert words in r.stderr


def test_perplexity_missing_file_and_short_text(tiny_ckpt, tmp_path):
    r = run("perplexity", tmp_path / "absent.txt", "--model", tiny_ckpt.path)
    assert r.exit_code == 2 and "absent.txt" in r.stderr
    f = tmp_path / "short.txt"
    f.write_text("a")
    r = run("perplexity", f, "--model", tiny_ckpt.path, "--backend", "numpy")
    assert r.exit_code == 1 and "at least 2 tokens" in r.stderr
