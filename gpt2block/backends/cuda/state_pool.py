"""StatePool: a bounded pool of per-call states shared by threads (plain Python, no CuPy).

    pool = StatePool(make, limit)    make(): a new state; limit: the most states the pool holds
    st = pool.take()                 a state no other caller holds (waits while ``limit`` are taken)
    pool.give(st)                    back to the pool (always, in a finally)
    pool.clear(reset)                reset(st) on every state: the free ones now, the taken ones when given back

A caller holds its state alone from take() to give(), so nothing in a state needs a lock of its own, and
the pool never holds more than ``limit`` states however many threads call (threads that come and go
leave nothing behind: the only per-thread entry is a weak reference to the state the thread used last).
take() prefers that state where it is free, so a thread that calls again finds what it cached there
(solve()'s CUDA graphs); otherwise any free state, else a new one while fewer than ``limit`` exist,
else it waits for one to be given back.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable, Generic, TypeVar

S = TypeVar("S")


class StatePool(Generic[S]):
    def __init__(self, make: Callable[[], S], limit: int):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int; got {limit!r}")
        self.limit = limit
        self._make = make
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # for callers waiting past the limit
        self._waiting = 0  # callers waiting in take()
        self._free: list = []  # states no caller holds, most recently given back last
        self._count = 0  # states made (or being made) and not lost to a failed make()
        self._all: list = []  # every state made (strong references: at most ``limit``)
        self._stale: set = set()  # ids of taken states to reset when given back (clear() came meanwhile)
        self._reset: Callable[[S], None] | None = None
        self._local = threading.local()  # .last: weakref to the state this thread took last

    @property
    def count(self) -> int:
        """States the pool holds (free or taken)."""
        return self._count

    def take(self) -> S:
        """A state for the calling thread alone until give(): the one it took last if free, else another
        free one, else a new one (fewer than ``limit`` held), else the first one given back."""
        ref = getattr(self._local, "last", None)
        with self._lock:
            free = self._free
            if free:
                last = ref() if ref is not None else None
                if last is not None and free[-1] is last:  # the common case: one thread, its own state
                    return free.pop()
                for i, st in enumerate(free):
                    if st is last:
                        return free.pop(i)
                st = free.pop()
                self._local.last = weakref.ref(st)
                return st
            if self._count >= self.limit:
                self._waiting += 1
                try:
                    while not free and self._count >= self.limit:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
                if free:
                    st = free.pop()
                    self._local.last = weakref.ref(st)
                    return st
            self._count += 1  # made outside the lock (a state may make CUDA streams)
        try:
            st = self._make()
        except BaseException:
            with self._lock:
                self._count -= 1
                if self._waiting:
                    self._cond.notify()
            raise
        with self._lock:
            self._all.append(st)
        self._local.last = weakref.ref(st)
        return st

    def give(self, st: S) -> None:
        """Back to the pool (reset first if clear() came while it was taken)."""
        with self._lock:
            if id(st) not in self._stale:  # the common case
                self._free.append(st)
                if self._waiting:
                    self._cond.notify()
                return
            self._stale.discard(id(st))
            reset = self._reset
        try:
            reset(st)
        finally:
            with self._lock:
                self._free.append(st)
                if self._waiting:
                    self._cond.notify()

    def clear(self, reset: Callable[[S], None]) -> None:
        """reset(st) for every state: the free ones now (in this thread), the taken ones as they are given
        back. The states themselves stay (at most ``limit``)."""
        with self._lock:
            free = list(self._free)
            self._free.clear()
            self._reset = reset
            free_ids = {id(st) for st in free}
            self._stale = {id(st) for st in self._all if id(st) not in free_ids}
        try:
            for st in free:
                reset(st)
        finally:
            with self._lock:
                self._free.extend(free)
                self._cond.notify_all()
