"""backends/cuda/state_pool.StatePool (solve()'s per-call states under threads), on the CPU."""

import threading
import time

import pytest

from gpt2block.backends.cuda.state_pool import StatePool


class _State:
    made = 0

    def __init__(self):
        _State.made += 1
        self.n = _State.made
        self.holder = None  # the thread holding it (a second holder is a bug)
        self.resets = 0


def _pool(limit):
    return StatePool(_State, limit)


def _use(pool, hold_s=0.0, log=None):
    st = pool.take()
    try:
        me = threading.get_ident()
        assert st.holder is None, "a state was handed to two callers at once"
        st.holder = me
        if log is not None:
            log.append(st)
        time.sleep(hold_s)
        assert st.holder == me
        st.holder = None
    finally:
        pool.give(st)
    return st


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
def test_limit_must_be_a_positive_int(limit):
    with pytest.raises(ValueError, match="limit must be a positive int"):
        StatePool(_State, limit)


def test_one_thread_gets_its_state_back():
    pool = _pool(4)
    first = _use(pool)
    for _ in range(20):
        assert _use(pool) is first
    assert pool.count == 1


def test_concurrent_callers_never_share_and_stay_within_the_limit():
    pool = _pool(3)
    errors, log = [], []

    def work():
        try:
            for _ in range(20):
                _use(pool, 0.001, log)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert pool.count == 3
    assert len({id(s) for s in log}) == 3 and len(log) == 200


def test_threads_keep_their_own_state_when_it_is_free():
    """Two threads make a state each (both held at once), then take turns: each time both states are
    free and the other thread's was given back last, yet each thread gets its own."""
    pool = _pool(4)
    both = threading.Barrier(2)
    turn = [threading.Event() for _ in range(2)]
    mine, errors = {}, []

    def work(i):
        try:
            st = pool.take()
            mine[i] = st
            both.wait(5)
            pool.give(st)
            both.wait(5)
            for _ in range(10):
                assert turn[i].wait(5)
                turn[i].clear()
                assert _use(pool) is mine[i], "a thread was handed the other's state while its own was free"
                turn[1 - i].set()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
            turn[1 - i].set()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    turn[0].set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert mine[0] is not mine[1] and pool.count == 2


def test_a_caller_past_the_limit_waits_for_a_state():
    pool = _pool(1)
    st = pool.take()
    got = []
    t = threading.Thread(target=lambda: got.append(_use(pool)))
    t.start()
    time.sleep(0.2)
    assert not got, "took a second state past the limit of 1"
    pool.give(st)
    t.join(5)
    assert got == [st] and pool.count == 1


def test_a_failed_make_frees_its_place():
    calls = []

    def make():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("no stream")
        return _State()

    pool = StatePool(make, 1)
    with pytest.raises(RuntimeError, match="no stream"):
        pool.take()
    assert pool.count == 0
    st = pool.take()  # the place is free again (it would wait forever otherwise)
    pool.give(st)
    assert pool.count == 1


def test_threads_that_come_and_go_leave_nothing():
    pool = _pool(2)
    for _ in range(50):
        ts = [threading.Thread(target=_use, args=(pool, 0.0005)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert pool.count <= 2


def test_clear_resets_free_states_now_and_taken_ones_when_given_back():
    pool = _pool(3)
    a, b = pool.take(), pool.take()
    pool.give(b)

    def reset(st):
        st.resets += 1

    pool.clear(reset)
    assert (a.resets, b.resets) == (0, 1)
    pool.give(a)
    assert a.resets == 1
    pool.give(pool.take())  # given back again: not reset twice
    assert (a.resets, b.resets) == (1, 1)
    assert pool.count == 2
