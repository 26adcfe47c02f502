"""Run inside a network namespace with a veth pair a0 <-> a1 (see test_af_packet.py).

1. The port alone: a burst sent on a1 is read from the port's ring in one or two reads, no
   system call, in order; a batch sent from the port arrives on a1 in order from a few
   `sendmmsg` calls, a frame the interface refuses (over its MTU) dropped and counted, the
   rest sent; the port does not read back its own transmissions.
2. A softswitch on a0 answers a worker's frame injected on a1 with the right sum.

Exits 0 if all holds; prints what did not."""

from __future__ import annotations

import select
import socket
import sys
import time

import numpy as np

from inaemu.common.wire import (
    FRAME_BYTES,
    Endpoint,
    Flag,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
)
from inaemu.controller.star import Worker, star_job_plan
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.ports import AfPacketPort
from inaemu.softswitch.switch import SoftSwitch

MARK = bytes.fromhex("02000000aa0102000000bb0188b5")  # dst, src, local experimental type
PACKET_OUTGOING = 4


def marked(i: int, size: int) -> bytes:
    return (MARK + i.to_bytes(4, "big") + bytes(size)).ljust(size, b"\x5a")[:size]


def host_socket() -> socket.socket:
    host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    host.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    host.bind(("a1", 0))
    host.settimeout(0.5)
    return host


def host_frames(host: socket.socket, count: int, timeout: float = 5.0) -> list[bytes]:
    """Marked frames arriving on a1 (not its own, not IPv6 noise) until `count` or timeout."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            data, addr = host.recvfrom(16384)
        except TimeoutError:
            continue
        if addr[2] != PACKET_OUTGOING and data.startswith(MARK):
            got.append(data)
    return got


def check_port(host: socket.socket) -> str | None:
    port = AfPacketPort("a0")
    try:
        burst = [marked(i, 300 if i < 400 else 64 + 7 * i % 1400) for i in range(500)]
        for frame in burst:
            host.send(frame)
        time.sleep(0.2)
        batch = FrameBatch()
        reads = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            select.select([port], [], [], 0.1)
            if port.recv_into(batch, 1):
                reads += 1
            if sum(1 for _, f in batch if f.startswith(MARK)) >= len(burst):
                break
        got = [f for _, f in batch if f.startswith(MARK)]
        if got != burst:
            return f"ring: {len(got)} of {len(burst)} burst frames, or out of order"
        if reads > 2 or port.counts.rx_calls != 0:
            return f"ring: {reads} reads, {port.counts.rx_calls} system calls for the burst"
        out = [marked(1000 + i, 200 + i) for i in range(500)]
        out[250] = marked(1250, 9000)  # over the veth's MTU: refused
        port.send_batch(FrameBatch.of([(1, f) for f in out]), np.arange(len(out)))
        arrived = host_frames(host, len(out) - 1)
        if arrived != out[:250] + out[251:]:
            return f"send: {len(arrived)} of {len(out) - 1} frames arrived, or out of order"
        if port.tx_dropped != 1 or port.counts.tx_frames != 499 or port.counts.tx_calls > 4:
            return f"send: dropped {port.tx_dropped}, counts {port.counts}"
        echo = FrameBatch()
        port.recv_into(echo, 1)
        if any(f.startswith(MARK) for _, f in echo):
            return "the port read back its own transmissions"
        return None
    finally:
        port.close()


def check_switch(host: socket.socket) -> str | None:
    sw = SoftSwitch()
    worker = Worker(1, "02:00:00:00:00:01", "10.0.0.1")
    apply_to_pipeline(sw.pipeline, star_job_plan(1, [worker], base=0, pool_size=4, mgid=1))
    sw.add_port(1, AfPacketPort("a0"))
    sw.start()
    values = np.arange(K, dtype=np.int32)[None, :] * 3
    frame = pack_frames(
        FrameTemplate(Endpoint(worker.mac, worker.ip), Endpoint("02:00:00:00:00:fe", "10.0.0.254")),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=0,
            seq=42,
            values=values,
        ),
    ).tobytes()
    try:
        host.send(frame)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data, addr = host.recvfrom(4096)
            except TimeoutError:
                continue
            if addr[2] == PACKET_OUTGOING or len(data) < FRAME_BYTES:
                continue  # our own frame, or IPv6 noise
            if data[:6] != bytes.fromhex("020000000001"):
                continue
            rec = parse_frames(data[:FRAME_BYTES])[0]
            ok = (
                int(rec["seq"]) == 42
                and int(rec["ver_flags"]) & Flag.RESULT
                and np.array_equal(rec["values"], values[0])
            )
            return None if ok else f"wrong result: {data.hex()}"
        return f"no result: switch saw {sw.frames_in} frames"
    finally:
        sw.stop()


def main() -> int:
    host = host_socket()
    try:
        for check in (check_port, check_switch):
            failure = check(host)
            if failure is not None:
                print(f"{check.__name__}: {failure}")
                return 1
        print("batches in order; refused frame counted; result received")
        return 0
    finally:
        host.close()


if __name__ == "__main__":
    sys.exit(main())
