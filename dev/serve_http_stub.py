"""Where the server's host time goes over HTTP: `gpt2block serve` over serve_host_profile.py's stub runner (a decode
step of --step-ms asleep, a prefill of --prefill-us a token asleep: the GIL free meanwhile, as in a GPU wait),
driven by scripts/bench_serve.py's client fleet (in processes of its own); for each level, the server process's CPU
time per generated token split by thread (the event loop, the engine, the others), the client processes' CPU time,
and the client's figures (tok/s, TTFT, ITL).

    python dev/serve_http_stub.py --model M [--step-ms 1.7] [--prefill-us 2] [--levels 16:64,64:256,256:512]
                                  [--repeat 3] [--client-procs N] [--py-spy DIR]

M: a checkpoint folder with GPT-2's tokenizer.json (only the tokenizer is read). Each level C:R runs R requests
from C streams; --repeat runs every level that many times against one server and prints each run (a shared
machine's noise: the spread is the point). --py-spy DIR: a py-spy sampling profile (speedscope JSON, every thread,
GIL holders marked) of the server during the last run of each level, when py-spy is on PATH (a dev tool, not a
dependency). The thread times come from /proc/PID/task/TID/schedstat (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_serve  # noqa: E402
from gpt2block.tokenizer import Tokenizer  # noqa: E402


async def _lean_one(host: str, port: int, body: bytes, stats: dict) -> None:
    """One streaming request over a raw connection: HTTP/1.1 chunked framing parsed by hand, SSE events counted,
    the JSON of the last event (the usage) parsed, nothing else (a client far cheaper than httpx + json per event,
    so that a 2-core machine measures the server)."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
        head = await reader.readuntil(b"\r\n\r\n")
        stats["head"].append(time.perf_counter() - t0)
        status = int(head.split(b" ", 2)[1])
        if status == 429:
            stats["rejected"] += 1
            return
        if status != 200:
            stats["errors"].append(f"HTTP {status}")
            return
        last, tail, done = None, b"", False
        while not done:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                break
            data = (await reader.readexactly(size + 2))[:-2]
            now = time.perf_counter()
            n = data.count(b"data: ")
            if data.endswith(b"data: [DONE]\n\n"):
                done, n = True, n - 1
            if b'"usage"' in data:
                tail = data
                n -= 1
            if n > 0:
                stats["chunks"] += n
                if last is None:
                    stats["ttft"].append(now - t0)
                else:
                    stats["itl"].append(now - last)
                last = now
        if not done or not tail:
            stats["errors"].append("the stream ended without its usage and [DONE]")
            return
        for part in tail.split(b"\n\n"):
            if b'"usage"' in part:
                stats["tokens"] += json.loads(part[6:])["usage"]["completion_tokens"]
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        stats["errors"].append(f"{type(e).__name__}: {e}")
    finally:
        writer.close()


async def _lean_fleet(url: str, reqs: list[dict], concurrency: int, timeout: float) -> dict:
    host, port = url.split("//")[1].split(":")
    stats = {"ttft": [], "head": [], "itl": [], "tokens": 0, "chunks": 0, "errors": [], "rejected": 0}
    bodies = iter([json.dumps({"model": "bench", **r, "stream": True, "stream_options": {"include_usage": True}})
                   .encode() for r in reqs])

    async def worker():
        for body in bodies:
            await _lean_one(host, int(port), body, stats)

    t0 = time.perf_counter()
    done, pending = await asyncio.wait([asyncio.create_task(worker()) for _ in range(concurrency)], timeout=timeout)
    for t in pending:
        t.cancel()
    stats["wall"] = time.perf_counter() - t0
    if pending:
        stats["errors"].append(f"the level ran past {timeout:g} s")
    return stats


def lean_level(url: str, reqs: list[dict], concurrency: int, timeout: float) -> dict:
    s = asyncio.run(_lean_fleet(url, reqs, concurrency, timeout))
    pct = bench_serve.percentile
    return {"tokens": s["tokens"], "tok_s": s["tokens"] / s["wall"], "head_p50_ms": pct(s["head"], 50),
            "head_p99_ms": pct(s["head"], 99), "ttft_p50_ms": pct(s["ttft"], 50),
            "ttft_p99_ms": pct(s["ttft"], 99), "itl_p50_ms": pct(s["itl"], 50), "itl_p99_ms": pct(s["itl"], 99),
            "tokens_per_chunk": s["tokens"] / max(s["chunks"], 1), "errors": len(s["errors"]),
            "error_samples": s["errors"][:5]}


def engine_figures(url: str) -> dict:
    """The server's own counters: the sums and counts of its TTFT and inter-token histograms (engine side: from a
    request's submission, at the engine's step), and the tokens generated."""
    out = {}
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        for key in ("gpt2block_time_to_first_token_seconds_sum", "gpt2block_time_to_first_token_seconds_count",
                    "gpt2block_inter_token_latency_seconds_sum", "gpt2block_inter_token_latency_seconds_count"):
            if line.startswith(key + " "):
                out[key.split("_seconds_")[0].split("gpt2block_")[1] + "_" + key.rsplit("_", 1)[1]] = \
                    float(line.split()[1])
    return out


def _cpu(pid: int, engine_pid: int) -> dict:
    """thread_cpu of the server process, and of the engine's process where it has one of its own (its threads
    under their ids too: thread ids are unique across processes)."""
    out = {(pid, t): v for t, v in thread_cpu(pid).items()}
    if engine_pid != pid:
        out.update({(engine_pid, t): v for t, v in thread_cpu(engine_pid).items()})
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """{tid: seconds on a CPU} of every thread of process pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--step-ms", type=float, default=1.7)
    ap.add_argument("--prefill-us", type=float, default=2.0)
    ap.add_argument("--levels", default="16:64,64:256,256:512", help="C:R,... (streams:requests)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client", choices=["lean", "bench"], default="lean",
                    help="lean: one process of raw-socket clients (this script's own CPU time is the clients'); "
                    "bench: scripts/bench_serve.py's fleet of httpx clients")
    ap.add_argument("--client-procs", type=int, default=None, help="bench: [bench_serve's: min(8, max(1, C / 16))]")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--level-timeout", type=float, default=120.0)
    ap.add_argument("--py-spy", default=None, metavar="DIR")
    ap.add_argument("--server-args", default="", help="more arguments of serve_host_profile.py (e.g. "
                    "'--profile-loop F --profile G': cProfiles of the event loop and the engine thread)")
    args = ap.parse_args()
    tok_path = Path(args.model) / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(tok_path))
    port = bench_serve.free_port()
    tmp = Path(tempfile.mkdtemp())
    tid_file = tmp / "engine.tid"
    cmd = [sys.executable, str(ROOT / "dev" / "serve_host_profile.py"), "--tokenizer", str(tok_path), "--port",
           str(port), "--step-ms", str(args.step_ms), "--prefill-us", str(args.prefill_us), "--max-batch",
           str(args.max_batch), "--tid-file", str(tid_file), *args.server_args.split()]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / "server.log", "w"))
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while True:
        if server.poll() is not None or time.monotonic() > end:
            print(open(tmp / "server.log").read())
            raise SystemExit("the stub server did not start")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    engine_pid, engine_tid = (int(x) for x in tid_file.read_text().split())
    spy = shutil.which("py-spy") if args.py_spy else None
    print(f"stub server pid {server.pid}, step {args.step_ms} ms, prefill {args.prefill_us} us/token, "
          f"max_batch {args.max_batch}; {os.cpu_count()} CPUs")
    print("| streams | run | tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | tok/chunk | errors | server CPU us/token: "
          "all = loop + engine + other | clients CPU us/token | server CPU % of wall | engine-side TTFT / ITL means ms "
          "| engine process CPU us/token (in the columns before) |")
    status = 0
    try:
        for spec in args.levels.split(","):
            c, r = (int(x) for x in spec.split(":"))
            reqs = bench_serve.make_requests(tokenizer, r, False, 0)
            procs = args.client_procs or min(8, max(1, c // 16))
            for k in range(args.repeat):
                profiler = None
                if spy and k == args.repeat - 1:
                    Path(args.py_spy).mkdir(parents=True, exist_ok=True)
                    profiler = subprocess.Popen([spy, "record", "-p", str(server.pid), "-r", "200", "--threads",
                                                 "--gil", "-f", "speedscope", "-o",
                                                 str(Path(args.py_spy) / f"server_c{c}.json")],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                m0 = engine_figures(url)
                before, t_before, w0 = _cpu(server.pid, engine_pid), os.times(), time.perf_counter()
                if args.client == "lean":
                    res = lean_level(url, reqs, c, args.level_timeout)
                else:
                    res = bench_serve.level(url, "bench", reqs, c, args.level_timeout, procs)
                after, t_after, wall = _cpu(server.pid, engine_pid), os.times(), time.perf_counter() - w0
                m1 = engine_figures(url)
                dm = {k: m1[k] - m0.get(k, 0.0) for k in m1}
                ttft_e = 1e3 * dm["time_to_first_token_sum"] / max(dm["time_to_first_token_count"], 1)
                itl_e = 1e3 * dm["inter_token_latency_sum"] / max(dm["inter_token_latency_count"], 1)
                if profiler is not None:
                    profiler.terminate()
                    profiler.wait(30)
                d = {t: after[t] - before.get(t, 0.0) for t in after}
                loop, engine = d.get((server.pid, server.pid), 0.0), d.get((engine_pid, engine_tid), 0.0)
                other = sum(d.values()) - loop - engine
                in_engine_process = sum(v for (p, _), v in d.items() if p == engine_pid != server.pid)
                clients = (t_after.children_user + t_after.children_system - t_before.children_user -
                           t_before.children_system) + (t_after.user + t_after.system - t_before.user -
                                                        t_before.system) * (args.client == "lean")
                n = max(res["tokens"], 1)
                status |= bool(res["errors"])
                print(f"| {c} | {k} | {res['tok_s']:,.0f} | {res['ttft_p50_ms']:.1f} / {res['ttft_p99_ms']:.1f} | "
                      f"{res['itl_p50_ms']:.2f} / {res['itl_p99_ms']:.2f} | {res['tokens_per_chunk']:.2f} | "
                      f"{res['errors']} | {1e6 * sum(d.values()) / n:.1f} = {1e6 * loop / n:.1f} + "
                      f"{1e6 * engine / n:.1f} + {1e6 * other / n:.1f} | {1e6 * clients / n:.1f} | "
                      f"{100 * sum(d.values()) / wall:.0f} | {ttft_e:.1f} / {itl_e:.2f} | {1e6 * in_engine_process / n:.1f} |",
                      flush=True)
                if res["errors"]:
                    print("  errors:", res["error_samples"])
                if "head_p50_ms" in res:
                    print(f"  response head p50 / p99 {res['head_p50_ms']:.1f} / {res['head_p99_ms']:.1f} ms (the "
                          "request checked and queued)")
    finally:
        server.terminate()
        try:
            rc = server.wait(40)
        except subprocess.TimeoutExpired:
            server.kill()
            rc = "killed after 40 s"
        print(f"server exit status after SIGTERM: {rc}")
    return status


if __name__ == "__main__":
    sys.exit(main())
