"""Helpers for tests that run `gpt2block serve` as a real process on a free 127.0.0.1 port."""

import os
import socket
import subprocess
import sys
import time

import httpx

from hf_checkpoints import REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m gpt2block serve --backend numpy --port P ARGS...`, its output in ``log_path``."""

    def __init__(self, model, log_path, *args: str, wait_s: float = 60.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "gpt2block", "serve", "--model", str(model), "--backend",
                                      "numpy", "--port", str(self.port), *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server was not ready within {wait_s} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return open(self.log_path).read()

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics", timeout=5).text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
