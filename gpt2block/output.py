"""Files gpt2block writes (``pack``, ``export-cuda``): regular files only, never one of the inputs.

    check_output(out, inputs) -> refuse directories, FIFOs, devices, sockets and the input's own files
    write_atomic(out, write)  -> .NAME.gpt2block-tmp-PID in the same folder, fsync, rename onto NAME

The temporary file is removed on every exit Python sees (an exception, Ctrl-C, SIGTERM and SIGHUP,
which raise SystemExit while the write runs); one left by a killed run (SIGKILL, power loss) is
recognised by its name and swept by the next write into that folder, when it is older than the
running process and its writer is gone. Files are created with mode 0644 less the umask.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

TMP_TAG = ".gpt2block-tmp-"
TMP_RE = re.compile(r"^\..+\.gpt2block-tmp-(\d+)$")
MAX_NAME = 255  # bytes in one file name on Linux and macOS file systems
PROCESS_START = time.time()  # temporaries older than this belong to an earlier run


class OutputError(ValueError):
    """An output path that gpt2block will not or cannot write; the message names the path and why."""


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def check_name(path: Path, what: str) -> None:
    """A path's text: no NUL byte, no component over 255 bytes."""
    text = str(path)
    if "\0" in text:
        raise OutputError(f"{what} {text!r}: a file name cannot hold a NUL byte")
    for part in Path(text).parts:
        if len(os.fsencode(part)) > MAX_NAME:
            raise OutputError(f"{what} {text[:60]}...: the name {part[:40]}... is {len(os.fsencode(part))} bytes "
                              f"long; file names hold at most {MAX_NAME}")


def check_output(out: Path, inputs: Iterable[Path] = (), what: str = "output",
                 inputs_are: str = "the input model's own files") -> None:
    """Refuse ``out`` unless it is absent or a regular file that is none of ``inputs``."""
    check_name(out, what)
    try:
        st = os.stat(out)  # follows a symbolic link: what it points at is what matters
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{what} {out}: cannot inspect it ({e.strerror})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{what} {out} is a {file_kind(st.st_mode)}; gpt2block writes regular files only "
                          "(it was left untouched)")
    if st is not None:
        for p in inputs:
            try:
                same = os.path.samefile(out, p)
            except OSError:
                continue
            if same:
                raise OutputError(f"{what} {out} is one of {inputs_are} ({p}); "
                                  "writing it would destroy the input: choose another name")
    parent = out.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"{what} {out}: its folder {parent} is not a directory")


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would end the process there: count it as running
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep_stale(folder: Path) -> list[Path]:
    """Remove gpt2block temporaries in ``folder`` left by runs that are gone; returns what was removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = TMP_RE.match(entry.name)
        if not m:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        pid = int(m.group(1))
        if not stat.S_ISREG(st.st_mode) or st.st_mtime >= PROCESS_START:
            continue  # not ours, or possibly a run in progress now
        if pid != os.getpid() and _alive(pid):
            continue
        try:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def temp_path(out: Path) -> Path:
    """.NAME.gpt2block-tmp-PID next to ``out`` (NAME shortened to keep the whole under 255 bytes)."""
    suffix = f"{TMP_TAG}{os.getpid()}"
    name = out.name
    while len(os.fsencode(f".{name}{suffix}")) > MAX_NAME:
        name = name[:-1]
    return out.parent / f".{name}{suffix}"


class _Terminated(SystemExit):
    pass


@contextmanager
def terminate_as_exception():
    """Within the block, SIGTERM and SIGHUP raise SystemExit (so that cleanup runs); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated(128 + signum)

    old = {}
    for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if s is not None:
            old[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def write_atomic(out: str | Path, write: Callable[[BinaryIO], None], inputs: Iterable[Path] = (),
                 what: str = "output", verify: Callable[[Path], None] | None = None,
                 inputs_are: str = "the input model's own files") -> Path:
    """Write ``out`` through ``write(file)`` on a temporary file renamed into place; returns ``out``.

    ``verify(temp_path)``, when given, checks the written file before the rename (its exceptions
    propagate, and nothing is left behind)."""
    out = Path(out).expanduser()
    inputs = list(inputs)
    check_output(out, inputs, what, inputs_are)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{what} {out}: cannot create its folder ({e.strerror})") from None
    sweep_stale(out.parent)
    tmp = temp_path(out)
    with terminate_as_exception():
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise OutputError(f"{what} {out}: cannot write in {out.parent} ({e.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if verify is not None:
                verify(tmp)
            check_output(out, inputs, what, inputs_are)  # the target may have changed while the file was written
            os.replace(tmp, out)
        except BaseException as e:
            tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise OutputError(f"{what} {out}: cannot write ({e.strerror or e}); nothing was left behind") from None
            raise
    return out
