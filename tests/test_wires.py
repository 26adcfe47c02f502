"""Loopback wires: private, collision-free ends; only a wire's own peer gets frames in."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.common.batch_io import IoCounts
from inaemu.common.loopback import (
    ENDED,
    OUT_QUEUE_BYTES,
    SOCKET_BUFFER,
    WireDir,
    WireError,
    WireStream,
    encode_frames,
    encode_records,
    split_records,
)
from inaemu.common.wire import Endpoint, Flag, FrameTemplate, K, Opcode, pack_frames, pack_payloads
from inaemu.common.wire import slot_field as slot_of
from inaemu.hostlib.client import InaClient
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.ports import LoopbackWire
from inaemu.softswitch.switch import SoftSwitch
from tests.helpers import accounted, install_star, run_threads, running_switch, workers
from tests.test_tree import build as build_tree

ROOT = Path(__file__).resolve().parents[1]
SWITCH = Endpoint("02:00:00:00:00:fe", "10.0.0.254")
# the UDP ports the old wires used: one that collided with an ephemeral port in a test run,
# and the old default base's wires 0..10
OLD_UDP_PORTS = [37411, *range(40000, 40021)]


def frames(host: int, chunks: range, window: int, *, value: int, flags: int = 0) -> list[bytes]:
    """INA frames of job 1 as worker `host` would send them (or as the switch would answer,
    with flags=RESULT), every lane `value`."""
    ids = np.arange(chunks.start, chunks.stop)
    recs = pack_frames(
        FrameTemplate(Endpoint(f"02:00:00:00:00:{host:02x}", f"10.0.0.{host}"), SWITCH),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=[slot_of(int(i) % window, (int(i) // window) % 2) for i in ids],
            seq=ids,
            values=np.full((len(ids), K), value, dtype=np.int32),
            flags=flags,
        ),
    )
    return [r.tobytes() for r in recs]


def hold_udp_ports(ports: list[int]) -> list[socket.socket]:
    held = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:  # someone else holds it: held either way
            s.close()
            continue
        held.append(s)
    return held


def records(frames: list[bytes]) -> bytes:
    """Frames as a wire's stream carries them (`common.loopback`: length, then frame)."""
    data, _ = encode_frames(frames)
    return data


def frames_at(
    buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> list[bytes]:
    return [
        buf[o : o + k].tobytes() for o, k in zip(offsets.tolist(), lengths.tolist(), strict=True)
    ]


def forger_sockets(where: str | Path, tag: str = "") -> list[socket.socket]:
    """Three stream sockets that are not a wire's peer: unbound, bound to a path of their own
    in `where` (the wire dir itself, say), and autobound in the abstract namespace."""
    unbound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named.bind(os.path.join(where, f"s1.1.hostile{tag}"))
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("")
    return [unbound, named, abstract]


def refused(path: str) -> bool:
    """Whether the kernel refuses both a connection and a datagram from a stranger at `path`."""
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        try:
            stream.connect(path)
            return False
        except ConnectionRefusedError:
            pass
        try:
            datagram.sendto(b"x" * 400, path)
            return False
        except OSError:  # EPROTOTYPE: a stream end takes no datagrams
            return True
    finally:
        stream.close()
        datagram.close()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `cond` until true or `timeout` (the caller asserts what it needs afterwards)."""
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_forged_frames_are_dropped_and_counted_while_old_udp_ports_are_held(
    tmp_path: Path,
) -> None:
    """Someone holds the old wires' UDP ports and, from other sockets, forges contributions
    and RESULTs aimed at both ends of every wire during an allreduce: the sums stay exact;
    the switch ports read, drop and count every forged frame (`rx_foreign`); the hosts'
    ends refuse every connection and datagram, so nothing reaches them."""
    held = hold_udp_ports(OLD_UDP_PORTS)
    n, window, n_chunks = 4, 8, 120
    ws = workers(n)
    xs = [np.random.default_rng(r).integers(-1000, 1000, n_chunks * K, np.int32) for r in range(n)]
    forgers: list[socket.socket] = []
    try:
        with running_switch([w.port for w in ws]) as (sw, wire_dir):
            install_star(sw, 1, ws, pool=window)
            transports = [LoopbackWireTransport(w.port, wire_dir) for w in ws]
            clients = [
                InaClient(
                    t,
                    job_id=1,
                    run=1,
                    rank=r,
                    n_workers=n,
                    window=window,
                    initial_rto=0.05,
                    give_up_after=30,
                )
                for r, t in enumerate(transports)
            ]
            forged = {
                p: frames(p, range(n_chunks), window, value=1 << 20)
                + frames(p, range(n_chunks), window, value=-7, flags=int(Flag.RESULT))
                for p in range(1, n + 1)
            }
            # every kind of stranger connects to every switch port (12 connections)
            streams: list[tuple[int, socket.socket]] = []
            for p in range(1, n + 1):
                for sock in forger_sockets(wire_dir, str(p)):
                    forgers.append(sock)
                    sock.connect(os.path.join(wire_dir, f"s1.{p}"))
                    streams.append((p, sock))
            stop = threading.Event()
            into_switch = [0]  # forged frames written into a switch port's connection
            refused_by_host = [0]  # strangers refused at a host end
            surprises: list[str] = []

            def forge() -> None:
                i = 0
                while not stop.is_set():
                    p, sock = streams[i % len(streams)]
                    first = 16 * i % (len(forged[p]) - 16)
                    sock.sendall(records(forged[p][first : first + 16]))
                    into_switch[0] += 16
                    if refused(os.path.join(wire_dir, f"s1.{p}.host")):
                        refused_by_host[0] += 1
                    else:
                        surprises.append(f"host end s1.{p}.host let a stranger in")
                    i += 1
                    time.sleep(0.001)

            forger = threading.Thread(target=forge, daemon=True)
            forger.start()
            wait_for(lambda: into_switch[0] >= 50)  # forging is under way before any chunk
            before = into_switch[0]
            try:
                results = run_threads(
                    [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
                )
                during = into_switch[0] - before
            finally:
                stop.set()
                forger.join(10)
            wait_for(lambda: sw.rx_foreign >= into_switch[0])
            rx_foreign = sw.rx_foreign
            host_foreign = [t.rx_foreign for t in transports]
            for t in transports:
                t.close()
        expected = np.sum(np.stack(xs).astype(np.int64), axis=0)
        for res, over in results:
            assert np.array_equal(res, expected) and not over.any()
        assert surprises == []
        assert before >= 50 and during > 0 and refused_by_host[0] >= 3
        assert rx_foreign == into_switch[0]  # every forged frame counted, none processed
        assert host_foreign == [0] * n
        packets_in, packets_accounted = accounted(sw.pipeline)
        assert packets_in == packets_accounted == sum(c.stats.packets_sent for c in clients)
    finally:
        for s in held + forgers:
            s.close()


def test_a_rebound_host_end_cannot_take_over_a_live_wire() -> None:
    """Issue 14, item 5: a process of the same user unlinks a live host end's path
    (`s1.1.host`), binds a socket of its own there and talks to switch port 1 from it. It
    receives none of worker 1's results, nothing it sends is taken (read, dropped, counted in
    `rx_foreign`), and worker 1's allreduce completes. (With datagram wires the thief got
    worker 1's results and its frames were summed, while worker 1 stalled.)"""
    ws = workers(2)
    xs = [np.full(8 * K, r + 1, np.int32) for r in range(2)]
    with running_switch([1, 2]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=4)
        transports = [LoopbackWireTransport(w.port, wire_dir) for w in ws]
        path = os.path.join(wire_dir, "s1.1.host")
        kind = transports[0].sock.type
        os.unlink(path)
        thief = socket.socket(socket.AF_UNIX, kind)
        thief.bind(path)
        forged = frames(1, range(8), 4, value=1 << 20)
        port_path = os.path.join(wire_dir, "s1.1")
        if kind == socket.SOCK_STREAM:
            thief.connect(port_path)
            thief.sendall(records(forged))
        else:  # the datagram wires this replaced
            for f in forged:
                thief.sendto(f, port_path)
        clients = [
            InaClient(
                t,
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(transports),
                window=4,
                initial_rto=0.05,
                give_up_after=3,
            )
            for r, t in enumerate(transports)
        ]
        results = run_threads(
            [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
        )
        thief.setblocking(False)
        try:
            stolen = thief.recv(65536)
        except BlockingIOError:
            stolen = b""
        wait_for(lambda: sw.rx_foreign >= len(forged))
        rx_foreign = sw.rx_foreign
        thief.close()
        for t in transports:
            t.close()
    assert stolen == b""
    assert rx_foreign == len(forged)
    for res, over in results:
        assert np.array_equal(res, np.full(8 * K, 3)) and not over.any()


def test_a_killed_host_is_replaced_at_once_and_a_restarted_switch_retaken(
    tmp_path: Path,
) -> None:
    """A worker process killed while connected leaves a stale path and a closed connection:
    a new worker on its port binds the path and is taken at once. A switch restarted on the
    same wire dir is taken by the hosts' ends on their next send."""
    wire_dir = str(tmp_path / "w")
    ws = workers(2)
    xs = [np.arange(6 * K, dtype=np.int32) * (r + 1) for r in range(2)]
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from inaemu.hostlib.transport import LoopbackWireTransport\n"
            "t = LoopbackWireTransport(1, sys.argv[1])\n"
            "t.sock.sendall(bytes([60, 0]) + bytes(60))  # one frame no job knows\n"
            "print(t.connected, flush=True)\n"
            "time.sleep(60)\n",
            wire_dir,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        with running_switch([1, 2], wire_dir=wire_dir) as (sw, _):
            install_star(sw, 1, ws, pool=4)
            assert child.stdout is not None
            # the child connected (a switch port must be there: retry until it is)
            assert child.stdout.readline().strip() in ("True", "False")
            child.kill()
            child.wait(10)
            start = time.monotonic()
            transports = [LoopbackWireTransport(w.port, wire_dir) for w in ws]
            clients = [
                InaClient(
                    t,
                    job_id=1,
                    run=1,
                    rank=r,
                    n_workers=len(transports),
                    window=4,
                    initial_rto=0.05,
                )
                for r, t in enumerate(transports)
            ]
            results = run_threads(
                [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
            )
            took = time.monotonic() - start
            assert sw.rx_foreign == 0
        for res, _ in results:
            assert np.array_equal(res, xs[0].astype(np.int64) * 3)
        assert took < 2.0
        assert all(c.stats.retransmissions == 0 for c in clients)
        with running_switch([1, 2], wire_dir=wire_dir) as (sw, _):  # the switch restarted
            install_star(sw, 1, ws, pool=4)
            results = run_threads(
                [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
            )
        for res, _ in results:
            assert np.array_equal(res, xs[0].astype(np.int64) * 3)
        for t in transports:
            t.close()
    finally:
        child.kill()
        child.wait(10)


def test_a_wire_between_two_switch_ports_carries_frames_both_ways(tmp_path: Path) -> None:
    """A wire is a pair of ends: two switch ports naming each other (s2.3 connects to s1.5,
    which listens). A stranger's connection to s1.5 has its frames read, dropped and counted;
    s2.3 listens to nobody. Thousands of frames fit in each direction (datagram wires held
    ten), in order, in a few system calls."""
    wires = WireDir(tmp_path / "w")
    a = LoopbackWire(wires, "s1.5", "s2.3")
    b = LoopbackWire(wires, "s2.3", "s1.5")
    forgers = forger_sockets(tmp_path)
    try:
        assert not a.active and b.active and b.connected
        assert a.recv_batch() == [] and a.connected  # took b's connection
        for forger in forgers:
            forger.connect(a.path)
            forger.sendall(records([b"forged"] * 5))
        assert refused(b.path)
        sizes = [60 + (i * 37) % 700 for i in range(2000)]  # 0.8 MB: all fits
        out = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
        uniform = [i.to_bytes(4, "big") * 78 for i in range(2000)]  # 312 bytes each
        a.send_batch(FrameBatch.of([(3, f) for f in out]), np.arange(len(out)))
        b.send_batch(FrameBatch.of([(5, f) for f in uniform]), np.arange(len(uniform)))
        got_a: list[bytes] = []
        got_b: list[bytes] = []
        for _ in range(100):
            got_a += a.recv_batch()
            got_b += b.recv_batch()
            if len(got_a) >= len(uniform) and len(got_b) >= len(out) and a.rx_foreign >= 15:
                break
        assert got_a == uniform and got_b == out
        assert (a.rx_foreign, b.rx_foreign, a.tx_dropped, b.tx_dropped) == (15, 0, 0, 0)
        for end, frames_in in ((a, len(uniform)), (b, len(out))):
            c = end.counts
            assert c.rx_frames == frames_in and c.tx_frames == 2000
            assert c.tx_calls <= 10 and c.rx_frames / c.rx_calls >= 100, c
    finally:
        a.close()
        b.close()
        for forger in forgers:
            forger.close()
    assert sorted(os.listdir(wires.path)) == [".lock"]  # each end removed its own path


def test_a_peer_that_does_not_read_fills_a_bounded_queue_then_frames_drop(
    tmp_path: Path,
) -> None:
    """A switch port's output to a peer that stops reading: the kernel's buffer and the
    port's own queue fill, then frames are dropped and counted (`tx_dropped`); the peer,
    reading again, gets the frames that were queued, in order, nothing else."""
    wires = WireDir(tmp_path / "w")
    port = LoopbackWire(wires, "s1.1", "s1.1.host")
    host = LoopbackWireTransport(1, wires)
    try:
        port.recv_batch()  # takes the host's connection
        frames_out = [i.to_bytes(4, "big") * 78 for i in range(20_000)]  # 312 bytes each
        batch = FrameBatch.of([(1, f) for f in frames_out])
        for start in range(0, len(frames_out), 500):
            port.send_batch(batch, np.arange(start, start + 500))
        dropped = port.tx_dropped
        queued = len(frames_out) - dropped
        assert 0 < queued * 314 <= 4 * SOCKET_BUFFER + OUT_QUEUE_BYTES and dropped > 0
        got: list[bytes] = []
        host_view = host.sock
        deadline = time.monotonic() + 10
        while len(got) < queued and time.monotonic() < deadline:
            port.recv_batch()  # sends what it queued as room appears
            host.wait(0.05)
            offsets, lengths, _, _ = host.read(host._rx, 0, len(host._rx))
            got += frames_at(host._rx, offsets, lengths)
        assert got == frames_out[:queued]
        assert port.tx_dropped == dropped and host_view.fileno() >= 0
    finally:
        host.close()
        port.close()


def test_a_send_to_an_absent_peer_is_a_lost_frame(tmp_path: Path) -> None:
    wires = WireDir(tmp_path / "w")
    a = LoopbackWire(wires, "s1.1", "s1.1.host")
    try:
        a.send(b"nobody")
        assert a.tx_dropped == 1
    finally:
        a.close()


def test_host_end_is_unreachable_for_strangers_and_connects_to_its_switch_port(
    tmp_path: Path,
) -> None:
    wires = WireDir(tmp_path / "w")
    host = LoopbackWireTransport(1, wires.path)  # no switch yet: not connected
    port: LoopbackWire | None = None
    try:
        assert not host.connected
        assert refused(host.path)  # it listens to nobody, connected or not
        assert len(host.recv(0.05)) == 0 and host.rx_foreign == 0
        payloads = pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=0,
            seq=[0, 1],
            values=np.ones((2, K), np.int32),
        )
        host.send(payloads)
        assert host.tx_dropped == 2  # nobody on the wire
        port = LoopbackWire(wires, "s1.1", "s1.1.host")
        host.send(payloads)  # connects now
        assert host.connected
        got = port.recv_batch()  # takes the connection and what came on it
        assert len(got) == 2 and port.rx_foreign == 0
        port.send(got[0])  # back to the host, from its peer: accepted
        assert host.recv(2.0)["seq"].tolist() == [0]
        assert refused(host.path)
    finally:
        host.close()
        if port is not None:
            port.close()


def test_switch_wire_dir_is_private_made_race_free_and_removed() -> None:
    a, b = SoftSwitch(), SoftSwitch()
    a.add_loopback_wires([1, 2])
    b.add_loopback_wires([1, 2])  # same names, own dir: no collision
    dirs = [a.wire_dir, b.wire_dir]
    try:
        assert dirs[0] != dirs[1]
        for d in dirs:
            st = os.stat(d)
            assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
            assert sorted(os.listdir(d)) == [".lock", ".owner", "s1.1", "s1.2"]
    finally:
        a.stop()
        b.stop()
    assert not any(os.path.exists(d) for d in dirs)


def test_wire_dir_must_be_private(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(WireError, match=r"is not private \(mode 755.*chmod 700"):
        WireDir(shared)
    made = WireDir(tmp_path / "new")  # missing: made private
    assert stat.S_IMODE(os.stat(made.path).st_mode) == 0o700 and not made.owned
    with pytest.raises(WireError, match="does not exist: start the softswitch first"):
        LoopbackWireTransport(1, tmp_path / "missing")
    with pytest.raises(WireError, match="too long"):
        WireDir(tmp_path / ("x" * 120))


def test_held_end_is_refused_and_stale_end_is_reused(tmp_path: Path) -> None:
    wires = str(tmp_path / "w")
    first = SoftSwitch(wire_dir=wires)
    first.add_loopback_wires([1, 2])
    second = SoftSwitch(wire_dir=wires)
    try:
        with pytest.raises(WireError, match=r"wire end s1\.2 in .* is held by another process"):
            second.add_loopback_wires([3, 2])
        assert list(second.ports) == []  # all or none: port 3 was released again
        assert sorted(os.listdir(wires)) == [".lock", "s1.1", "s1.2"]
    finally:
        first.stop()
        second.stop()
    assert os.path.isdir(wires)  # a named dir is the user's: kept
    # a killed switch leaves its paths behind; the next one takes them over
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(os.path.join(wires, "s1.1"))
    dead.close()
    third = SoftSwitch(wire_dir=wires)
    try:
        third.add_loopback_wires([1])
    finally:
        third.stop()


def test_bad_names_are_refused() -> None:
    sw = SoftSwitch(name="a.b")
    try:
        with pytest.raises(WireError, match=r"switch name 'a\.b' cannot name wire ends"):
            sw.add_loopback_wires([1])
    finally:
        sw.stop()
    sw = SoftSwitch()
    try:
        with pytest.raises(WireError, match=r"bad wire end name '\.\./x'"):
            sw.add_link(1, "../x")
        with pytest.raises(WireError, match="port 600 out of range"):
            sw.add_loopback_wires([600])
    finally:
        sw.stop()


def test_three_softswitches_linked_port_to_port_sum_exactly() -> None:
    """leaf1 (h1, h2) and leaf2 (h3, h4), each port 3 linked to root ports 1 and 2 (the
    tables of tests/test_tree.py): four clients over host wires, every hop a loopback wire."""
    fab = build_tree()
    wires = WireDir()
    switches = {
        name: SoftSwitch(fab.switches[name], name=name, wire_dir=wires)
        for name in ("leaf1", "leaf2", "root")
    }
    try:
        for i, leaf in enumerate(("leaf1", "leaf2")):
            switches[leaf].add_loopback_wires([1, 2])
            switches[leaf].add_link(3, f"root.{i + 1}")
            switches["root"].add_link(i + 1, f"{leaf}.3")
        for sw in switches.values():
            sw.start()
        clients = [
            InaClient(
                LoopbackWireTransport(port, wires, switch_name=leaf),
                job_id=1,
                run=1,
                rank=2 * i + port - 1,
                n_workers=4,
                window=4,
                initial_rto=0.05,
            )
            for i, leaf in enumerate(("leaf1", "leaf2"))
            for port in (1, 2)
        ]
        xs = [np.random.default_rng(r).integers(-1000, 1000, 30 * K, np.int32) for r in range(4)]
        results = run_threads(
            [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
        )
        for c in clients:
            c.transport.close()
        expected = np.sum(np.stack(xs).astype(np.int64), axis=0)
        for res, over in results:
            assert np.array_equal(res, expected) and not over.any()
        root_rx = switches["root"].pipeline.port_rx.packets
        assert root_rx[1] >= 30 and root_rx[2] >= 30  # partial sums came up both links
        assert all(sw.rx_foreign == 0 for sw in switches.values())
    finally:
        for sw in switches.values():
            sw.stop()
        wires.cleanup()


def softswitch(*args: str, tmpdir: Path | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
    return subprocess.Popen(
        [sys.executable, "-m", "inaemu.softswitch", "--grpc", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def ready_fields(proc: subprocess.Popen[str]) -> dict[str, str]:
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == "READY", line
    return dict(kv.split("=", 1) for kv in line[1:])


def test_wire_dir_of_a_killed_softswitch_is_removed_by_the_next(tmp_path: Path) -> None:
    """SIGKILL leaves a softswitch's own wire dir behind; the next softswitch (or any new
    private wire dir) removes it, and never the dir of one that is alive."""
    other_user_like = tmp_path / "inaemu-wires-unmarked"  # not made by WireDir(): left alone
    other_user_like.mkdir(mode=0o700)
    killed = softswitch("--wires", "1-2", tmpdir=tmp_path)
    alive = softswitch("--wires", "1", tmpdir=tmp_path)
    try:
        stale, live = ready_fields(killed)["wire_dir"], ready_fields(alive)["wire_dir"]
        assert Path(stale).parent == tmp_path == Path(live).parent
        killed.kill()
        killed.wait(10)
        assert os.path.isdir(stale)  # nobody cleaned up after it
        nxt = softswitch("--wires", "1", tmpdir=tmp_path)
        try:
            fresh = ready_fields(nxt)["wire_dir"]
            assert not os.path.exists(stale)
            assert os.path.isdir(live) and os.path.isdir(fresh) and other_user_like.is_dir()
        finally:
            nxt.terminate()
            nxt.wait(10)
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.wait(10)


def test_two_softswitch_processes_linked_by_the_cli_run_a_job(tmp_path: Path) -> None:
    """s1 (h1 on port 1) --link 2=s2.1, s2 (h2 on port 2) --link 1=s1.2, in one wire dir;
    the controller programs both over P4Runtime, the job's tree crosses the link."""
    import asyncio

    from inaemu.controller.jobs import JobSpec
    from inaemu.controller.p4rt import Controller
    from inaemu.topology.model import Topology

    wires = tmp_path / "w"
    s1 = softswitch("--preconfigured", "--wire-dir", str(wires), "--wires", "1", "--link", "2=s2.1")
    s2 = softswitch(
        *("--preconfigured", "--name", "s2", "--device-id", "2", "--wire-dir", str(wires)),
        *("--wires", "2", "--link", "1=s1.2"),
    )
    try:
        f1, f2 = ready_fields(s1), ready_fields(s2)
        assert f1["ports"] == "1,2" and f2["ports"] == "1,2"
        assert f1["wire_dir"] == f2["wire_dir"] == str(wires)
        assert sorted(os.listdir(wires)) == [".lock", "s1.1", "s1.2", "s2.1", "s2.2"]
        topo = Topology()
        topo.add_switch("s1", grpc=f1["grpc"], device_id=1)
        topo.add_switch("s2", grpc=f2["grpc"], device_id=2)
        topo.add_host("h1", "10.0.0.1/24", "02:00:00:00:00:01")
        topo.add_host("h2", "10.0.0.2/24", "02:00:00:00:00:02")
        topo.link("h1", "s1", b_port=1)
        topo.link("h2", "s2", b_port=2)
        topo.link("s1", "s2", a_port=2, b_port=1)
        topo.validate()

        async def program() -> Controller:
            ctl = Controller(topo)
            await ctl.connect()
            await ctl.add_job(JobSpec(1, ("h1", "h2"), pool_size=8))
            return ctl

        loop = asyncio.new_event_loop()
        ctl = loop.run_until_complete(program())
        try:
            transports = [
                LoopbackWireTransport(1, wires, switch_name="s1"),
                LoopbackWireTransport(2, wires, switch_name="s2"),
            ]
            clients = [
                InaClient(
                    t,
                    job_id=1,
                    run=1,
                    rank=r,
                    n_workers=2,
                    window=8,
                    initial_rto=0.05,
                    give_up_after=30,
                )
                for r, t in enumerate(transports)
            ]
            xs = [np.arange(20 * K, dtype=np.int32) * (r + 1) for r in range(2)]
            results = run_threads(
                [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
            )
            for t in transports:
                t.close()
        finally:
            loop.run_until_complete(ctl.close())
            loop.close()
        for res, over in results:
            assert np.array_equal(res, xs[0].astype(np.int64) * 3) and not over.any()
    finally:
        for proc in (s1, s2):
            proc.terminate()
            proc.wait(10)
    assert s1.returncode == 0 and s2.returncode == 0
    assert sorted(os.listdir(wires)) == [".lock"]  # a named dir stays; each end was removed


def test_softswitch_default_wire_dir_is_removed_at_exit() -> None:
    proc = softswitch("--wires", "1-2")
    try:
        assert proc.stdout is not None
        fields = dict(kv.split("=", 1) for kv in proc.stdout.readline().split()[1:])
        wire_dir = fields["wire_dir"]
        assert sorted(os.listdir(wire_dir)) == [".lock", ".owner", "s1.1", "s1.2"]
        assert stat.S_IMODE(os.stat(wire_dir).st_mode) == 0o700
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0 and not os.path.exists(wire_dir)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--wire-dir", "/tmp", "--wires", "1"), "wire dir /tmp is not private"),
        (("--link", "1=bad/name"), "bad wire end name 'bad/name'"),
        (("--link", "1"), "--link wants PORT=END (e.g. 5=s2.3), got '1'"),
        (("--name", "a.b", "--wires", "1"), "switch name 'a.b' cannot name wire ends"),
        (("--wires", "1", "--link", "1=s2.1"), "s1: port 1 already attached"),
    ],
    ids=["shared-dir", "bad-end", "bad-link", "bad-name", "port-twice"],
)
def test_softswitch_cli_wire_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    proc = softswitch(*args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("softswitch: ") and message in err, err


def test_softswitch_cli_held_wire_end_is_one_line(tmp_path: Path) -> None:
    wires = tmp_path / "w"
    first = softswitch("--wire-dir", str(wires), "--wires", "1-2")
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("READY")
        second = softswitch("--wire-dir", str(wires), "--wires", "2")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2 and err.count("\n") == 1, err
        assert f"wire end s1.2 in {wires} is held by another process" in err
        assert "pick another --wire-dir or --name" in err
    finally:
        first.terminate()
        first.wait(10)


# ---------------------------------------------------------------- records on a wire's stream


@given(
    st.lists(st.binary(min_size=1, max_size=700), max_size=30),
    st.integers(0, 1 << 15),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_records_encode_and_split_back(frames_in: list[bytes], cut: int, same: bool) -> None:
    """Records built from a batch equal records built frame by frame; a buffer cut anywhere
    splits into exactly the whole records before the cut."""
    if same and frames_in:  # one length: numpy's paths
        frames_in = [(f * 700)[:97] for f in frames_in]
    data, ends = encode_frames(frames_in)
    batch = FrameBatch.of([(i % 3, f) for i, f in enumerate(frames_in)])
    n = len(frames_in)
    encoded, ends2 = encode_records(batch.buf, batch.offset[:n], batch.length[:n])
    assert bytes(encoded) == data and ends2.tolist() == ends.tolist()
    every_third = np.arange(0, n, 3)  # one port's frames of an interleaved batch
    part, _ = encode_records(batch.buf, batch.offset[every_third], batch.length[every_third])
    assert bytes(part) == encode_frames(frames_in[::3])[0]
    buf = np.frombuffer(b"junk" + data, np.uint8)
    cut = min(cut, len(data))
    offsets, lengths, end = split_records(buf, 4, 4 + cut)
    whole = int(np.searchsorted(ends, cut, side="right"))
    got = frames_at(buf, offsets, lengths)
    assert got == frames_in[:whole]
    assert end == 4 + (int(ends[whole - 1]) if whole else 0)


@given(
    st.lists(st.binary(min_size=1, max_size=2000), min_size=1, max_size=40),
    st.lists(st.integers(1, 3000), min_size=1, max_size=20),
    st.integers(2100, 9000),
)
@settings(max_examples=60, deadline=None)
def test_a_stream_read_in_any_pieces_gives_every_frame_once(
    frames_in: list[bytes], pieces: list[int], budget: int
) -> None:
    """Records written in arbitrary pieces and read with a small budget: a partial record is
    carried to the next read, every frame comes out once, in order."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reader = WireStream(b, IoCounts())
    try:
        data, _ = encode_frames(frames_in)
        buf = np.zeros(budget + 16, np.uint8)
        got: list[bytes] = []
        pos, i = 0, 0
        while len(got) < len(frames_in):
            if pos < len(data):
                step = pieces[i % len(pieces)]
                a.sendall(data[pos : pos + step])
                pos, i = pos + step, i + 1
            offsets, lengths, _, state = reader.read(buf, 16, budget)
            assert state != ENDED
            got += frames_at(buf, offsets, lengths)
        assert got == frames_in and reader.carry == b""
        a.close()
        assert reader.read(buf, 16, budget)[3] == ENDED
    finally:
        a.close()
        b.close()
