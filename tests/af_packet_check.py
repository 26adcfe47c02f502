"""Run inside a network namespace with a veth pair a0 <-> a1 (see test_af_packet.py):
a softswitch on a0 (AF_PACKET), a worker's frames injected and read on a1. Exits 0 if the
switch answered with the right sum and counted a frame its port could not send."""

from __future__ import annotations

import socket
import sys
import time

import numpy as np

from inaemu.controller.star import Worker, star_job_plan
from inaemu.hostlib.wire import (
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
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.ports import AfPacketPort
from inaemu.softswitch.switch import SoftSwitch


def main() -> int:
    sw = SoftSwitch()
    worker = Worker(1, "02:00:00:00:00:01", "10.0.0.1")
    apply_to_pipeline(sw.pipeline, star_job_plan(1, [worker], base=0, pool_size=4, mgid=1))
    sw.add_port(1, AfPacketPort("a0"))
    sw.start()
    host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    host.bind(("a1", 0))
    host.settimeout(0.5)
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
            if addr[2] == 4 or len(data) < FRAME_BYTES or data[:6] != bytes.fromhex("020000000001"):
                continue  # our own frame, or IPv6 noise
            rec = parse_frames(data[:FRAME_BYTES])[0]
            ok = (
                int(rec["seq"]) == 42
                and int(rec["ver_flags"]) & Flag.RESULT
                and np.array_equal(rec["values"], values[0])
            )
            print("result received" if ok else f"wrong result: {data.hex()}")
            if not ok:
                return 1
            # a frame the interface refuses (over the veth's 1500-byte MTU) is dropped, counted
            port = sw.ports[1]
            port.send_batch(FrameBatch.of([(1, bytes(9000))]), np.zeros(1, np.int64))
            if (getattr(port, "tx_dropped", None), sw.tx_dropped) != (1, 1):
                print(f"refused frame not counted: tx_dropped {sw.tx_dropped}")
                return 1
            return 0
        print(f"no result: switch saw {sw.frames_in} frames")
        return 1
    finally:
        sw.stop()
        host.close()


if __name__ == "__main__":
    sys.exit(main())
