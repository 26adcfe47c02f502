"""Bottleneck accounting (`inaemu.runs.accounting`): the rule that says whether the links or
the emulator bounded a run, on synthetic measurements; the CPU meter against what a process
says it used; the softswitch's port-drop line; `--bw auto`'s choice from measured capacities.
No Mininet, no root."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from inaemu.runs import accounting as acc
from inaemu.runs.accounting import (
    Capacity,
    CpuMeter,
    LinkLoad,
    ProcessUse,
    Usage,
    capacity,
    check_size,
    choose_bw,
    classify,
    drops_delta,
    emulator_drops,
    link_floor,
    link_loads,
    link_queue_drops,
    next_bw,
    port_drops,
    root_qdisc_drops,
    two_digits_down,
    wait_exited,
)


def usage(machine: float | None = 0.5, **busy: float) -> Usage:
    procs = [ProcessUse(n, "softswitch" if n.startswith("s") else "worker", i + 100, b, b, b)
             for i, (n, b) in enumerate(busy.items())]  # fmt: skip
    return Usage(window=1.0, cores=2, machine_busy=machine, processes=procs)


def floor(seconds_needed: float) -> LinkLoad:
    return LinkLoad("h1 -> s1:1", int(seconds_needed * 20e6 / 8), 20.0, seconds_needed, None)


# ---------------------------------------------------------------------- the rule


def test_links_bound_when_the_busiest_link_is_busy_most_of_the_time() -> None:
    b = classify(1.0, floor(0.9), usage(s1=0.5, h1=0.2))
    assert (b.by, b.emulator) == ("links", False)
    assert b.reason.startswith("busiest link h1 -> s1:1 90% of its rate (completion 1.11x")
    # exactly at the slack: still the links'; a saturated switch is mentioned, not blamed
    b = classify(1.5, floor(1.0), usage(s1=0.95))
    assert b.by == "links" and "also s1 (softswitch) 95% of a core" in b.reason


def test_a_saturated_switch_process_while_the_links_idle_is_the_emulator() -> None:
    b = classify(3.0, floor(1.0), usage(s1=0.97, h1=0.3, h2=0.2))
    assert b.emulator and b.by == "emulator"
    assert b.reason.startswith("s1 (softswitch) 97% of a core")
    assert "busiest link h1 -> s1:1 33% of its rate (completion 3.00x its floor 1 s)" in b.reason
    assert "h1" not in b.reason.split(";")[0]  # only the saturated process is blamed


def test_a_process_starved_of_a_core_is_saturated_too() -> None:
    """60 % of a core, and a thread that waited the other 35 % for one: it wanted a core the
    whole time (the machine starved it)."""
    starved = ProcessUse("s1", "softswitch", 1, 0.6, 0.6, 0.6, waiting=0.35, demand=0.95)
    b = classify(3.0, floor(1.0), Usage(1.0, 2, 0.8, [starved]))
    assert b.emulator
    assert b.reason.startswith("s1 (softswitch) 60% of a core and waited 35% more for one")
    idle = ProcessUse("s1", "softswitch", 1, 0.6, 0.6, 0.6, waiting=0.1, demand=0.7)
    assert classify(3.0, floor(1.0), Usage(1.0, 2, 0.8, [idle])).by == "unclear"


def test_a_saturated_worker_or_a_full_machine_is_the_emulator_too() -> None:
    assert "h3 (worker) 92% of a core" in classify(2.0, floor(1.0), usage(h3=0.92)).reason
    b = classify(2.0, floor(1.0), usage(machine=0.96, s1=0.6, h1=0.5))
    assert b.emulator
    assert "the machine's 2 cores 96% busy (this run's processes 1.10 cores)" in b.reason


def test_port_drops_outside_the_pipeline_are_the_emulator() -> None:
    drops = {"s1": {"tx_dropped": 12, "rx_foreign": 0}, "s2": {"tx_dropped": 0}}
    b = classify(2.0, floor(1.0), usage(s1=0.5), drops)
    assert b.emulator
    assert "dropped at switch ports outside the pipeline: s1 tx_dropped 12" in b.reason
    assert "s2" not in b.reason  # nothing dropped there


def test_idle_links_and_nothing_saturated_is_unclear_not_the_emulator() -> None:
    b = classify(2.5, floor(1.0), usage(machine=0.6, s1=0.5), {"s1": {"tx_dropped": 0}})
    assert (b.by, b.emulator) == ("unclear", False)
    assert "40% of its rate" in b.reason and "busiest process s1 (softswitch) 50%" in b.reason
    assert "the machine's 2 cores 60% busy" in b.reason


def test_unshaped_links_leave_only_the_emulator() -> None:
    b = classify(0.5, None, usage(s1=0.4, h1=0.7), shaped=False)
    assert b.emulator
    assert b.reason == (
        "links unshaped: only the emulator bounds the time; h1 (worker) 70% of a core; "
        "the machine's 2 cores 50% busy (this run's processes 1.10 cores)"
    )
    assert classify(float("nan"), floor(1.0), None).by == "unknown"
    # no CPU measured: the links still judge
    assert classify(1.0, floor(0.95), None).by == "links"
    assert classify(3.0, floor(0.95), None).by == "unclear"


def test_the_floor_is_the_direction_that_needs_the_most_time_at_its_own_rate() -> None:
    loads = link_loads([("h1 -> s1:1", 4_000_000, 80.0), ("s1:2 -> s2:1", 2_000_000, 20.0)], 2.0)
    assert [x.seconds_needed for x in loads] == [0.4, 0.8]
    assert [x.load for x in loads] == [0.2, 0.4]
    best = link_floor(loads)
    assert best is not None and best.link == "s1:2 -> s2:1"
    assert link_floor(link_loads([("h1 -> s1:1", 10, None)], 1.0)) is None


# ---------------------------------------------------------------------- measuring


def test_the_meter_sees_what_a_process_says_it_used_even_after_it_exits() -> None:
    """A child burns CPU, then sleeps, then prints its own CPU time and exits; the meter,
    sampling from outside and once more before the child is reaped, agrees within the
    kernel's tick, and the busy share of its idle end is about 0."""
    code = (
        "import time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.4: pass\n"
        "print(time.time(), flush=True)\n"
        "time.sleep(0.4)\n"
        "print(time.process_time(), time.time(), flush=True)\n"
    )
    with CpuMeter(every=0.02) as meter:
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        meter.track(proc.pid, "burner", "worker")
        assert wait_exited(proc, 30)
        assert proc.returncode is None  # not reaped: its /proc entry is still there
        meter.finished(proc.pid)
        assert proc.wait() == 0
    assert proc.stdout is not None
    burnt_at, (own_cpu, ended) = float(proc.stdout.readline()), proc.stdout.readline().split()
    whole = meter.usage(started - 1.0, time.time() + 1.0)
    (p,) = whole.processes
    assert (p.name, p.kind, p.pid) == ("burner", "worker", proc.pid)
    tick = 1 / acc.CLK_TCK
    # the meter missed at most the start-up before it first read the process
    assert float(own_cpu) - 0.15 <= p.cpu_seconds <= float(own_cpu) + 2 * tick
    idle = meter.usage(burnt_at + 0.1, float(ended) - 0.05)
    assert idle.processes[0].busy < 0.2
    assert whole.machine_busy is not None and 0 < whole.machine_busy <= 1
    assert whole.cores == acc.cores() >= 1


def test_two_processes_sharing_one_core_each_want_all_of_it() -> None:
    """Two busy loops pinned to one core each get about half of it and wait the rest: each
    is saturated (it ran or waited to run all the time), though neither used 90 % of a core,
    and the rule blames the emulator for a run they bound."""
    code = "import time\nt = time.time()\nwhile time.time() - t < 0.8: pass\n"
    core = min(os.sched_getaffinity(0))
    with CpuMeter(every=0.02) as meter:
        procs = []
        for _ in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", code],
                preexec_fn=lambda: os.sched_setaffinity(0, {core}),
            ))  # fmt: skip
            meter.track(procs[-1].pid, f"burner{len(procs)}", "worker")
        time.sleep(0.3)  # past the interpreter's start-up
        t0 = time.time()
        time.sleep(0.4)
        t1 = time.time()
        for proc in procs:
            assert proc.wait(30) == 0
    use = meter.usage(t0, t1)
    assert len(use.processes) == 2
    for p in use.processes:
        assert p.busy < 0.8 and p.waiting > 0.2 and p.demand > 0.9 and p.saturated, p
    assert sum(p.busy for p in use.processes) <= 1.1  # one core between them
    b = classify(3.0, floor(1.0), use)
    assert b.emulator and "waited" in b.reason


def test_a_reused_pid_is_not_read_as_the_tracked_process() -> None:
    meter = CpuMeter()
    meter.track(os.getpid(), "me", "worker")
    meter._procs[os.getpid()].start -= 1  # as if this pid had been another process's
    meter.sample()
    assert len(meter._procs[os.getpid()].total) == 1  # only the sample taken when tracked


# ---------------------------------------------------------------------- port drops


def test_the_softswitch_drop_line_is_read_back() -> None:
    """The line the softswitch itself prints (`softswitch.__main__._report_port_drops`)."""
    from inaemu.softswitch.__main__ import _report_port_drops

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        _report_port_drops("s1", SimpleNamespace(tx_dropped=3, rx_foreign=0), (0, 0))  # type: ignore[arg-type]
        _report_port_drops("s1", SimpleNamespace(tx_dropped=7, rx_foreign=2), (3, 0))  # type: ignore[arg-type]
    log = "READY name=s1 grpc=127.0.0.1:1\n" + err.getvalue()
    assert port_drops(log) == {"tx_dropped": 7, "rx_foreign": 2}
    assert port_drops("READY name=s1\n") == {}
    before = {"s1": {"tx_dropped": 3, "rx_foreign": 0}}
    after = {"s1": {"tx_dropped": 7, "rx_foreign": 2}, "s2": {"tx_dropped": 1}}
    assert drops_delta(before, after) == {
        "s1": {"tx_dropped": 4, "rx_foreign": 2},
        "s2": {"tx_dropped": 1},
    }


TC = """qdisc noqueue 0: dev lo root refcnt 2
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc htb 5: dev s1-eth1 root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000
 Sent 5560464 bytes 17822 pkt (dropped 7, overlimits 17742 requeues 0)
 backlog 0b 0p requeues 0
qdisc pfifo 8001: dev s1-eth1 parent 5:1 limit 1000p
 Sent 5560464 bytes 17822 pkt (dropped 7, overlimits 0 requeues 0)
qdisc htb 5: dev s1-eth2 root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000
 Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)
"""


def test_drops_in_front_of_a_shaped_link_are_the_links_not_the_emulators() -> None:
    """tc's root qdiscs (a child's drops are its root's too, counted once); a switch whose
    links are all shaped: its tx_dropped are its congested links' queue overflowing; a switch
    on an unshaped link or a wire: only what a qdisc dropped is the link's, the rest the
    emulator's."""
    assert root_qdisc_drops(TC) == {"lo": 0, "s1-eth1": 7, "s1-eth2": 0}
    port = {"s1": {"tx_dropped": 103, "rx_foreign": 0}, "s2": {"tx_dropped": 9}}
    queued = link_queue_drops(port, {"s1": 7, "s2": 2}, shaped={"s1"})
    assert queued == {"s1": 103, "s2": 2}
    assert emulator_drops(port, queued) == {
        "s1": {"tx_dropped": 0, "rx_foreign": 0},
        "s2": {"tx_dropped": 7},
    }
    b = classify(2.0, floor(1.0), usage(s1=0.2), emulator_drops(port, queued), queued=105)
    assert (
        b.emulator and "dropped at switch ports outside the pipeline: s2 tx_dropped 7" in b.reason
    )
    assert "the links' queues dropped 105 frames (congestion)" in b.reason
    only_queues = classify(2.0, floor(1.0), usage(s1=0.2), {"s1": {"tx_dropped": 0}}, queued=3)
    assert only_queues.by == "unclear" and "queues dropped 3 frames" in only_queues.reason


# ---------------------------------------------------------------------- --bw auto


def test_capacity_counts_a_wide_link_in_units_of_bw() -> None:
    """A torus node's host link shaped to 4 x --bw carries 4 MB in a second: 8 Mbit/s in
    units of --bw, less than a network link's 2 MB (16 Mbit/s); a link with a rate of its own
    does not count."""
    ways = [("h1 -> t1", 4_000_000, 4.0), ("t1:1 -> t2:1", 2_000_000, 1.0), ("x", 9e9, None)]
    c = capacity("multitree", 1000, 1.0, ways)  # type: ignore[arg-type]
    assert c is not None and (c.link, c.mbit) == ("t1:1 -> t2:1", 16.0)
    assert capacity("ina", 1000, float("nan"), ways) is None  # type: ignore[arg-type]
    assert capacity("ina", 1000, 1.0, [("h1 -> s1:1", 0, 1.0)]) is None


def test_bw_auto_picks_the_margin_of_the_slowest_algorithm_rounded_down() -> None:
    caps = [Capacity("ina", 1 << 18, 0.7, "h1 -> s1:1", 27.9),
            Capacity("ring", 1 << 18, 0.4, "s1:1 -> h1", 130.0)]  # fmt: skip
    choice = choose_bw(caps)
    assert choice.bw == 13.0 and choice.slowest.algo == "ina" and choice.margin == 0.5
    assert "ina 27.9, ring 130" in choice.reason
    assert "the slowest, ina (h1 -> s1:1)" in choice.reason
    assert "links set to 13 Mbit/s, 50% of it" in choice.reason
    assert choose_bw(caps, margin=0.25).bw == 6.9
    capped = choose_bw([Capacity("ring", 1, 0.1, "a", 9000.0)], most=250.0)
    assert capped.bw == 250.0 and "capped at 250" in capped.reason
    with pytest.raises(ValueError, match="give --bw"):
        choose_bw([])
    assert [two_digits_down(x) for x in (13.95, 0.456, 999.9, 1e-3)] == [13, 0.45, 990, 0.001]


def test_bw_auto_check_run_lasts_about_a_second_of_link_time() -> None:
    """The unshaped run's 256K elements put 90 Mbit/s x 0.1 s on its busiest link: at 45
    Mbit/s that is 0.2 s of link time, so a check of one second needs 5x the elements; never
    fewer than the unshaped run's, never more than `most`."""
    cap = Capacity("ina", 1 << 18, 0.1, "h1 -> s1:1", 90.0)
    assert check_size(cap, 45.0) == 5 << 18
    assert check_size(cap, 45.0, seconds=0.5) == 5 << 17
    assert check_size(cap, 45.0, seconds=0.1) == 1 << 18  # less than the unshaped size
    assert check_size(cap, 450.0, most=1 << 20) == 1 << 20  # 50x, capped


def test_bw_auto_steps_down_from_a_rate_the_links_did_not_bound() -> None:
    """Links-bound: the rate stays. Otherwise 0.7 of the lower of the rate and what the
    busiest link carried (the bench's star:4 at 44 Mbit/s that carried 19.4 -> 13), two
    digits down; with nothing carried, 0.7 of the rate."""
    assert next_bw(44.0, "links", 43.5) == 44.0
    assert next_bw(44.0, "emulator", 19.4) == 13.0
    assert next_bw(44.0, "unclear", 50.0) == 30.0
    assert next_bw(44.0, "emulator", None) == 30.0
    assert next_bw(44.0, "unknown", 0.0) == 30.0
    with pytest.raises(ValueError, match="give --bw"):
        next_bw(0.0, "emulator", None)


def test_bw_auto_holds_a_rate_only_if_the_links_bound_every_algorithm() -> None:
    """The check runs every algorithm: the rate stays only if the links bound each run; a
    run they did not bound steps it down, the one asking the lowest rate deciding (here
    not the slowest algorithm's, links-bound, but another's, emulator-bound at the rate)."""
    assert acc.next_bw_all(44.0, [("links", 43.5), ("links", 40.0)]) == 44.0
    assert acc.next_bw_all(44.0, [("links", 43.5), ("emulator", 19.4)]) == 13.0
    assert acc.next_bw_all(44.0, [("unclear", 50.0), ("emulator", 40.0)]) == 28.0
    with pytest.raises(ValueError, match="give --bw"):
        acc.next_bw_all(44.0, [])


# ---------------------------------------------------------------------- bmv2's drops (root)


def test_a_full_libpcap_ring_is_counted_from_outside_the_process() -> None:
    """bmv2's receive drops (`Bmv2Drops`): tcpdump (libpcap, as bmv2's ports are) on one end
    of a veth pair in a namespace of this test's, stopped while frames arrive, so that its
    ring overflows; its drops are read from outside it, and kept across reads (each resets
    the kernel's counter)."""
    import shutil
    import signal

    from tests.netns import namespaces_missing

    missing = namespaces_missing() or (None if shutil.which("tcpdump") else "needs tcpdump")
    if missing:
        pytest.skip(missing)
    ns = f"inaemu-ring-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    dump = None
    try:
        for cmd in (
            "ip link add ra type veth peer name rb",
            "ip link set ra up",
            "ip link set rb up",
        ):
            subprocess.run(["ip", "netns", "exec", ns, *cmd.split()], check=True)
        dump = subprocess.Popen(
            ["ip", "netns", "exec", ns, "tcpdump", "-i", "rb", "-B", "64", "-w", "/dev/null"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not acc.packet_sockets(dump.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        drops = acc.Bmv2Drops()
        assert drops.read(dump.pid, []) == {"rx_ring_dropped": 0, "veth_tx_dropped": 0}
        os.kill(dump.pid, signal.SIGSTOP)
        blast = (
            "import socket\n"
            "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
            "s.bind(('ra', 0))\n"
            "f = b'\\xff' * 6 + b'\\x02\\0\\0\\0\\0\\x01\\x88\\xb5' + b'x' * 300\n"
            "for _ in range(5000):\n"
            "    s.send(f)\n"
        )
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", blast], check=True)
        time.sleep(0.2)
        dropped = drops.read(dump.pid, [])["rx_ring_dropped"]
        assert 0 < dropped <= 5000
        assert drops.read(dump.pid, [])["rx_ring_dropped"] == dropped  # a total, not reset
    finally:
        if dump is not None:
            dump.kill()
            dump.wait(5)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_run_shorter_than_a_tick_still_has_the_machine_share() -> None:
    """`/proc/stat` moves once a tick: a window between two equal samples is widened to the
    samples around it that moved, not reported as unmeasured."""
    from inaemu.runs.accounting import _machine_share

    samples = [(0.0, 10.0, 20.0), (1.0, 10.0, 20.0), (1.001, 10.0, 20.0), (2.0, 13.0, 24.0)]
    assert _machine_share(samples, 1.0002, 1.0008) == pytest.approx(3 / 4)
    assert _machine_share(samples, 1.5, 2.0) == pytest.approx(3 / 4)
    assert _machine_share(samples[:1], 0.0, 1.0) is None
    assert _machine_share(samples[:3], 0.5, 0.9) is None  # nothing moved at all
