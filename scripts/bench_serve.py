"""Load benchmark of `gpt2block serve`: a fleet of streaming clients on 127.0.0.1, then the same requests through
the offline Python API.

    python scripts/bench_serve.py --model gpt2 --backend cuda                  # concurrency 1, 16, 64, 256
    python scripts/bench_serve.py --model /tmp/tiny --backend numpy --quick    # a CPU check: small and short

For each concurrency C, C clients send requests back to back until the level's requests are done (default
max(32, 2 C)), shared among --client-procs processes (one Python process parses only some 10^4 chunks a second); each request is a text prompt of 32-512 tokens and 32-256 new tokens (drawn from --seed;
--quick: 8-32 and 4-16), temperature 0.8, top-p 0.95, one seed. Reported per level: aggregate generated
tokens/s (completion tokens over the level's wall time), time to first token p50 / p99, inter-token latency
p50 / p99 (gaps between a stream's successive chunks; a stream that falls behind the engine gets several tokens
in one chunk, tokens_per_chunk in the JSON), errors (429s counted apart), and the offline API on the
same requests: Model.generate on batches of min(C, --max-batch) requests in the same order, each batch run to
its longest request's max_tokens, its rate given two ways: every token it generates ("all") and only the tokens
the requests asked for ("requested": each request's max_tokens, or fewer where it stopped; the server's own
count), and how many server answers equal the offline text cut to their max_tokens. Every request carries the seed --seed (the offline API takes one seed per
call); the prompts differ. Every level is bounded by --level-timeout; the script starts the server
itself (unless --url), stops it, and writes the table and a JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gpt2block  # noqa: E402


def make_requests(tokenizer, count: int, quick: bool, seed: int) -> list[dict]:
    """count requests: text prompts of about 32-512 tokens (random ids decoded), 32-256 new tokens."""
    rng = np.random.default_rng(seed)
    (p_lo, p_hi), (n_lo, n_hi) = ((8, 32), (4, 16)) if quick else ((32, 512), (32, 256))
    out = []
    for i in range(count):
        ids = rng.integers(0, tokenizer.eot_id, int(rng.integers(p_lo, p_hi + 1))).tolist()
        out.append({"prompt": tokenizer.decode(ids), "max_tokens": int(rng.integers(n_lo, n_hi + 1)),
                    "temperature": 0.8, "top_p": 0.95, "seed": seed})
    return out


def percentile(xs, q) -> float:
    return float(np.percentile(xs, q)) * 1e3 if xs else float("nan")


async def one(client: httpx.AsyncClient, url: str, model: str, i: int, req: dict, stats: dict) -> None:
    body = {"model": model, **req, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            if r.status_code == 429:
                stats["rejected"] += 1
                return
            if r.status_code != 200:
                stats["errors"].append(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
                return
            last, text, usage, done = None, "", None, False
            async for line in r.aiter_lines():
                if not line:
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    stats["errors"].append(chunk["error"]["message"])
                    return
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if not chunk["choices"]:
                    continue
                now = time.perf_counter()
                stats["chunks"] += 1
                if last is None:
                    stats["ttft"].append(now - t0)
                else:
                    stats["itl"].append(now - last)
                last = now
                text += "".join(c["text"] for c in chunk["choices"])
            if not done or usage is None:
                stats["errors"].append("the stream ended without its usage and [DONE]")
                return
            stats["tokens"] += usage["completion_tokens"]
            stats["texts"][i] = text
    except httpx.HTTPError as e:
        stats["errors"].append(f"{type(e).__name__}: {e}")


def level(url: str, model: str, reqs: list[dict], concurrency: int, timeout: float, procs: int) -> dict:
    """One concurrency level from ``procs`` client processes (one Python process parses some 10^4 chunks/s: a
    single one would measure itself at 64 streams), each with its share of the streams and of the requests."""
    procs = max(1, min(procs, concurrency))
    if procs == 1:
        stats = asyncio.run(_fleet(url, model, list(enumerate(reqs)), concurrency, timeout))
    else:
        import multiprocessing as mp

        shares = [(url, model, [(i, r) for i, r in enumerate(reqs) if i % procs == k],
                   concurrency // procs + (k < concurrency % procs), timeout) for k in range(procs)]
        with mp.get_context("spawn").Pool(procs) as pool:
            parts = pool.map(_fleet_in_process, shares)
        stats = {"ttft": [], "itl": [], "tokens": 0, "chunks": 0, "errors": [], "rejected": 0, "texts": {},
                 "wall": max(p["wall"] for p in parts), "pending": any(p["pending"] for p in parts)}
        for p in parts:
            for k in ("ttft", "itl", "errors"):
                stats[k] += p[k]
            for k in ("tokens", "chunks", "rejected"):
                stats[k] += p[k]
            stats["texts"].update(p["texts"])
    wall = stats["wall"]
    if stats["pending"]:
        stats["errors"].append(f"the level ran past --level-timeout {timeout:g} s")
    return {"concurrency": concurrency, "requests": len(reqs), "client_procs": procs, "wall_s": wall,
            "tokens": stats["tokens"],
            "tok_s": stats["tokens"] / wall, "ttft_p50_ms": percentile(stats["ttft"], 50),
            "ttft_p99_ms": percentile(stats["ttft"], 99), "itl_p50_ms": percentile(stats["itl"], 50),
            "itl_p99_ms": percentile(stats["itl"], 99), "tokens_per_chunk": stats["tokens"] / max(stats["chunks"], 1),
            "errors": len(stats["errors"]),
            "error_samples": stats["errors"][:5], "rejected_429": stats["rejected"], "_texts": stats["texts"]}


def _fleet_in_process(args) -> dict:
    return asyncio.run(_fleet(*args))


async def _fleet(url: str, model: str, reqs: list[tuple[int, dict]], concurrency: int, timeout: float) -> dict:
    """``concurrency`` streaming clients sending ``reqs`` ((index, request) pairs) back to back."""
    stats = {"ttft": [], "itl": [], "tokens": 0, "chunks": 0, "errors": [], "rejected": 0, "texts": {}}
    todo = iter(reqs)

    async def worker(client):
        for i, req in todo:
            await one(client, url, model, i, req, stats)

    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits) as client:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(worker(client)) for _ in range(concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for t in pending:
            t.cancel()
        stats["wall"] = time.perf_counter() - t0
    stats["pending"] = bool(pending)
    return stats


def offline(m, reqs: list[dict], batch: int) -> tuple[float, int, dict]:
    """The requests through Model.generate, ``batch`` prompts per call (they share one seed), each call run to
    its longest request's max_tokens: (tokens/s, tokens generated, {request: text cut to its max_tokens})."""
    texts, tokens, useful, t0 = {}, 0, 0, time.perf_counter()
    for i in range(0, len(reqs), batch):
        group = reqs[i:i + batch]
        results = m.generate([r["prompt"] for r in group], max(r["max_tokens"] for r in group),
                             temperature=group[0]["temperature"], top_p=group[0]["top_p"], seed=group[0]["seed"])
        for j, (r, res) in enumerate(zip(group, results)):
            tokens += len(res.token_ids)
            useful += min(len(res.token_ids), r["max_tokens"])
            texts[i + j] = m.tokenizer.decode(res.token_ids[:r["max_tokens"]])
    wall = time.perf_counter() - t0
    return tokens / wall, tokens, texts, useful / wall


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "gpt2block", "serve", "--model", args.model, "--backend", args.backend,
           "--precision", args.precision, "--port", str(port), "--served-model-name", "bench",
           "--max-batch", str(args.max_batch), "--max-queue", str(args.max_queue), "--log-level", "warning"]
    if args.prefill_chunk is not None:
        cmd += ["--prefill-chunk", str(args.prefill_chunk)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server was not ready within {args.start_timeout:g} s")


def table(rows: list[dict]) -> str:
    out = ["| concurrency | requests | server tok/s | offline tok/s: all / requested | ratio: all / requested "
           "| TTFT p50 / p99 ms | inter-token p50 / p99 ms "
           "| errors | 429 | equal to offline |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['concurrency']} | {r['requests']} | {r['tok_s']:,.0f} | {r['offline_tok_s']:,.0f} / "
                   f"{r['offline_requested_tok_s']:,.0f} | {r['tok_s'] / r['offline_tok_s']:.2f} / "
                   f"{r['tok_s'] / r['offline_requested_tok_s']:.2f} | {r['ttft_p50_ms']:.2f} / {r['ttft_p99_ms']:.2f} | "
                   f"{r['itl_p50_ms']:.3f} / {r['itl_p99_ms']:.3f} | {r['errors']} | {r['rejected_429']} | "
                   f"{r['equal']} / {r['answered']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "cuda"])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--url", default=None, help="a running server (served as 'bench', same model); default: start one")
    ap.add_argument("--concurrency", default=None, help="comma-separated levels [1,16,64,256; --quick: 1,4]")
    ap.add_argument("--requests", default=None,
                    help="requests per level, one count or one per level, comma-separated [max(32, 2 C); --quick: 6]")
    ap.add_argument("--max-batch", type=int, default=64, help="the server's --max-batch and the offline batch cap")
    ap.add_argument("--max-queue", type=int, default=256, help="the server's --max-queue")
    ap.add_argument("--prefill-chunk", type=int, default=None, help="the server's --prefill-chunk [its default]")
    ap.add_argument("--seed", type=int, default=0, help="draws the prompts and lengths; also every request's seed")
    ap.add_argument("--level-timeout", type=float, default=300.0, help="seconds a level may take")
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds the server may take to be ready")
    ap.add_argument("--quick", action="store_true", help="short prompts and outputs, levels 1 and 4 (a CPU check)")
    ap.add_argument("--no-offline", action="store_true", help="skip the offline API comparison")
    ap.add_argument("--client-procs", type=int, default=None,
                    help="client processes per level, the streams shared among them [min(8, max(1, C / 16))]")
    ap.add_argument("-o", "--out", default="bench-serve.json", help="the JSON results")
    args = ap.parse_args(argv)
    levels = [int(c) for c in (args.concurrency or ("1,4" if args.quick else "1,16,64,256")).split(",")]
    if min(levels) < 1:
        ap.error("--concurrency levels must be positive")
    counts = [None] * len(levels)
    if args.requests is not None:
        counts = [int(x) for x in args.requests.split(",")]
        counts = counts * len(levels) if len(counts) == 1 else counts
        if len(counts) != len(levels) or min(counts) < 1:
            ap.error("--requests takes one positive count, or one per --concurrency level")
    m = None if args.no_offline else gpt2block.load(args.model, args.backend, args.precision)
    tokenizer = m.tokenizer if m is not None else gpt2block.load(args.model, "numpy").tokenizer
    proc, url = (None, args.url) if args.url else start_server(args)
    rows = []
    try:
        for c, count in zip(levels, counts):
            count = count or (6 if args.quick else max(32, 2 * c))
            reqs = make_requests(tokenizer, count, args.quick, args.seed)
            procs = args.client_procs if args.client_procs is not None else min(8, max(1, c // 16))
            r = level(url, "bench", reqs, c, args.level_timeout, procs)
            texts = r.pop("_texts")
            r["offline_tok_s"], r["offline_tokens"], r["equal"], r["answered"] = float("nan"), 0, 0, len(texts)
            r["offline_requested_tok_s"] = float("nan")
            if m is not None:
                r["offline_tok_s"], r["offline_tokens"], want, r["offline_requested_tok_s"] = offline(
                    m, reqs, min(c, args.max_batch))
                r["equal"] = sum(texts.get(i) == want[i] for i in range(len(reqs)) if i in texts)
            rows.append(r)
            print(f"concurrency {c}: {r['tok_s']:,.0f} tok/s, offline {r['offline_tok_s']:,.0f}, errors {r['errors']}, "
                  f"429 {r['rejected_429']}", file=sys.stderr, flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    print(table(rows))
    Path(args.out).write_text(json.dumps({"model": args.model, "backend": args.backend, "precision": args.precision,
                                          "levels": rows}, indent=1))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
