"""The client takes a batch of results in numpy when every record is a first result of a
chunk in flight: exactly the changes its record-by-record loop makes, for any batch."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.common.wire import INA_DTYPE, INA_VERSION, Flag, K, pack_payloads
from inaemu.hostlib.client import InaClient, _Exchange

WINDOW = 16


class Nowhere:
    """A transport that takes every send and never receives."""

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        pass

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        return np.empty(0, dtype=INA_DTYPE)

    def close(self) -> None:
        pass


def exchange(n_chunks: int, sent_at: list[float], n_trees: int, lost: list[int]) -> _Exchange:
    """An operation with its first window sent, chunk i at sent_at[i % len], chunks `lost`
    presumed lost."""
    clock = [0.0]
    client = InaClient(
        Nowhere(),
        job_id=3,
        run=0,
        window=WINDOW,
        n_trees=n_trees,
        initial_cwnd=WINDOW,
        clock=lambda: clock[0],
    )
    payloads = pack_payloads(
        opcode=0,
        job_id=3,
        tree_id=np.arange(n_chunks) % WINDOW % n_trees,
        slot=np.arange(n_chunks) % WINDOW,
        seq=np.arange(n_chunks),
        values=np.zeros((n_chunks, K), np.int32),
    )
    ex = _Exchange(
        client, payloads, 0, np.zeros((n_chunks, K), np.int32), np.zeros(n_chunks, np.bool_)
    )
    ex.fill()
    ex.sent_at[: ex.next_new] = [sent_at[i % len(sent_at)] for i in range(ex.next_new)]
    for i in lost:
        ex.deadline[i] = np.inf
        ex.lost[i] = True
        ex.in_flight -= 1
        ex.n_lost += 1
    return ex


def results(ex: _Exchange, picks: list[int], overflow: list[bool]) -> npt.NDArray[np.void]:
    """Result records for chunks `picks` (-1: a record of another job)."""
    recs = ex.payloads[[max(p, 0) for p in picks]].copy()
    flags = [int(Flag.RESULT) | (int(Flag.OVERFLOW) if o else 0) for o in overflow]
    recs["ver_flags"] = (INA_VERSION << 4) | np.array(flags, np.uint8)
    recs["job_id"] = [3 if p >= 0 else 4 for p in picks]
    recs["values"] = np.arange(len(picks))[:, None] + 7
    return recs


def state(ex: _Exchange) -> dict[str, Any]:
    c = ex.c
    arrays = {
        name: getattr(ex, name).tolist()
        for name in ("done", "lost", "deadline", "answered_once", "result", "overflow")
    }
    scalars = {name: getattr(ex, name) for name in ("base", "in_flight", "remaining", "n_lost")}
    scalars["last_result_at"] = ex.last_result_at
    return {
        **arrays,
        **scalars,
        "rtt": dataclasses.asdict(c.rtt),
        "cc": dataclasses.asdict(c.cc),
        "stats": dataclasses.asdict(c.stats),
    }


CHUNK = st.integers(-1, WINDOW - 1)  # -1: a record of another job


@given(
    st.integers(WINDOW, 3 * WINDOW),
    st.lists(st.floats(0.0, 0.5), min_size=1, max_size=5),
    st.sampled_from([1, 2, 4]),
    st.one_of(
        st.lists(CHUNK, min_size=9, max_size=WINDOW + 1, unique=True),  # often the numpy path
        st.lists(CHUNK, min_size=9, max_size=40),
    ),
    st.lists(st.booleans(), min_size=40, max_size=40),
    st.one_of(st.just([]), st.lists(st.integers(0, WINDOW - 1), max_size=3, unique=True)),
    st.floats(0.5, 2.0),
)
@settings(max_examples=300, deadline=None)
def test_a_batch_in_numpy_changes_what_the_loop_changes(
    n_chunks: int,
    sent_at: list[float],
    n_trees: int,
    picks: list[int],
    overflow: list[bool],
    lost: list[int],
    now: float,
) -> None:
    fast = exchange(n_chunks, sent_at, n_trees, lost)
    loop = exchange(n_chunks, sent_at, n_trees, lost)
    got = results(fast, picks, overflow[: len(picks)])
    loop.take_first_results = lambda *_: False  # type: ignore[method-assign]
    fast.take(got, now)
    loop.take(got, now)
    assert state(fast) == state(loop)


def test_the_numpy_path_is_taken_for_first_results() -> None:
    ex = exchange(2 * WINDOW, [0.1], 1, [])
    got = results(ex, list(range(WINDOW)), [False] * WINDOW)
    assert ex.take_first_results(got, ex.match_many(got), 1.0)
    assert ex.done[:WINDOW].all() and ex.c.rtt.samples == WINDOW
    again = results(ex, [0] * (WINDOW // 2), [False] * (WINDOW // 2))
    assert not ex.take_first_results(again, ex.match_many(again), 1.0)  # duplicates: the loop
