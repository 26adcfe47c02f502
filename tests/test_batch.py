"""FrameBatch (softswitch.batch): frames back to back, growth, and the reference pipeline's
process_batch equal to frame-by-frame process."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.common.wire import (
    Endpoint,
    FrameTemplate,
    pack_frames,
    pack_payloads,
    slot_field,
)
from inaemu.controller.star import star_job_plan
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline
from tests.helpers import workers

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")


@given(st.lists(st.tuples(st.integers(0, 511), st.binary(min_size=0, max_size=2000)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_batch_round_trip(frames: list[tuple[int, bytes]]) -> None:
    batch = FrameBatch(capacity=2, buf_bytes=16)  # small: appends must grow it
    for port, frame in frames:
        batch.append(port, frame)
    assert len(batch) == len(frames)
    assert list(batch) == frames
    assert batch.used_bytes == sum(len(f) for _, f in frames)
    assert list(FrameBatch.of(frames)) == frames


def test_process_batch_equals_process() -> None:
    ws = workers(4)
    plan = star_job_plan(1, ws, base=0, pool_size=4, mgid=1)
    frames: list[tuple[int, bytes]] = []
    rng = np.random.default_rng(1)
    for chunk in range(6):
        for w in ws:
            payloads = pack_payloads(
                opcode=0,
                job_id=1,
                tree_id=0,
                slot=slot_field(chunk % 4, (chunk // 4) % 2),
                seq=chunk,
                values=rng.integers(-1000, 1000, (1, 64)).astype(np.int32),
            )
            raw = pack_frames(FrameTemplate(Endpoint(w.mac, w.ip), SWITCH), payloads)
            frames.append((w.port, raw.tobytes()))
    one, batched = Pipeline(), Pipeline()
    for p in (one, batched):
        apply_to_pipeline(p, plan)
    expected = [out for port, frame in frames for out in one.process(port, frame)]
    got = list(batched.process_batch(FrameBatch.of(frames)))
    assert got == expected
    assert len(got) == 6 * 4  # every chunk completes and is multicast to 4 ports
    assert one.ina_events.packets == batched.ina_events.packets
