"""`inaemu cluster`: training across machines that torchrun starts, aggregated by one switch
(docs/cluster.md).

    inaemu cluster init --machine m1,ip=10.0.0.1/24,mac=02:00:00:00:00:01,port=1,iface=eth1,ranks=2
                        --machine m2,... [--machines FILE] [--switch softswitch|bmv2] -o DIR
    inaemu cluster setup -c DIR/cluster.json [--offloads-off]     # on each machine, as root

`init` writes DIR/topology.json (the star of the switch and the machines:
`topology.cluster`) and DIR/cluster.json (the job its workers join: `hostlib.cluster`), checks
both, and prints every command to run, in order: the switch on the machines' interfaces,
`inaemu pipeline push`, `inaemu routes`, `inaemu job add`, `inaemu cluster setup` on each
machine and each machine's torchrun line (`cluster_commands`, which the namespace test runs).
`setup` makes a machine ready (`setup_machine`) and says what it did.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from inaemu.common import args as arg
from inaemu.hostlib.cluster import (
    CLUSTER_NAME,
    INA_BACKENDS,
    TOPOLOGY_NAME,
    Cluster,
    find_machine,
)
from inaemu.hostlib.launch import CLUSTER, MACHINE
from inaemu.topology.cluster import (
    AGG_MAC,
    MACHINE_FORM,
    Machine,
    cluster_topology,
    parse_machine,
    read_machines,
)
from inaemu.topology.model import Host, Topology, TopologyError

RENDEZVOUS_PORT = 29500  # torchrun's usual
# torchrun's workers then make their own store per rendezvous round: with the agent's store
# shared (the default since PyTorch 2.5) a restart's ranks read the last round's gloo
# addresses and fail to connect (pytorch/pytorch#135712), so that a restart never trains
TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
SWITCH_KINDS = ("softswitch", "bmv2")


@dataclass(frozen=True)
class ClusterCommands:
    """What to run, in order (argv lists; `inaemu` and `torchrun` as installed)."""

    switch: list[str]  # on the switch box, as root, left running
    control: list[list[str]]  # on the switch box: program, routes, the job
    setup: list[str]  # on every machine, as root, once
    env: dict[str, str]  # the torchrun lines' environment
    torchrun: dict[str, list[str]]  # each machine's


def cluster_commands(
    directory: str,
    machines: list[Machine],
    cluster: Cluster,
    topo: Topology,
    *,
    switch_kind: str,
    rendezvous: str,
    script: str,
) -> ClusterCommands:
    """The commands for `machines` on the one switch of their topology `topo` (written with
    `cluster` to `directory`)."""
    topology = str(Path(directory) / TOPOLOGY_NAME)
    (sw,) = topo.switches.values()
    switch = sw.name
    if switch_kind == "softswitch":
        run_switch = ["inaemu", "softswitch", "--name", switch, "--grpc", sw.grpc]
        run_switch += ["--device-id", str(sw.device_id)]
        run_switch += [x for m in machines for x in ("--iface", f"{m.port}={m.iface}")]
    else:
        run_switch = ["inaemu", "bmv2", "-t", topology]
        run_switch += [x for m in machines for x in ("--iface", f"{switch}:{m.port}={m.iface}")]
    job = ["--job", str(cluster.job), "--workers", ",".join(cluster.workers)]
    control = [
        ["inaemu", "pipeline", "push", "-t", topology],
        ["inaemu", "routes", "-t", topology],
        ["inaemu", "job", "add", "-t", topology, *job, "--pool", str(cluster.window)],
    ]
    cluster_file = str(Path(directory) / CLUSTER_NAME)
    host, _, _ = rendezvous.rpartition(":")
    torchrun = {}
    for m in machines:
        line = ["torchrun", "--nnodes", str(len(machines)), "--nproc-per-node", str(m.ranks)]
        line += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous]
        line += ["--rdzv-id", f"inaemu-job{cluster.job}"]
        if m.address == host:  # it holds the rendezvous store (torchrun would guess by name)
            line += ["--rdzv-conf", "is_host=1"]
        line += ["--local-addr", m.address, script]
        torchrun[m.name] = line
    return ClusterCommands(
        run_switch,
        control,
        ["inaemu", "cluster", "setup", "-c", cluster_file],
        {CLUSTER: cluster_file, **TORCHRUN_ENV},
        torchrun,
    )


def describe(commands: ClusterCommands, switch_kind: str) -> str:
    """The commands as the shell script `init` prints."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in commands.env.items())
    lines = [
        f"# 1. on the switch box, as root, left running: the {switch_kind} on the machines' "
        "interfaces",
        shlex.join(commands.switch),
        "# 2. on the switch box: its program, the routes between the machines, the job",
        *map(shlex.join, commands.control),
        "# 3. on every machine, as root, once: ARP entries for the switch and the machines",
        shlex.join(commands.setup),
        "# 4. on every machine: its training processes (add the script's own options after it;",
        "#    INAEMU_BACKEND=gloo in front runs the same job with PyTorch's allreduce instead)",
    ]
    for name, line in commands.torchrun.items():
        lines += [f"# on {name}:", f"{env} {shlex.join(line)}"]
    return "\n".join(lines)


def cmd_cluster(args: argparse.Namespace) -> None:
    if args.action == "init":
        cmd_init(args)
    else:
        cmd_setup(args)


def cmd_init(args: argparse.Namespace) -> None:
    machines = [parse_machine(text) for text in args.machine]
    if args.machines:
        machines += read_machines(Path(args.machines))
    if args.switch == "bmv2" and not args.program:
        raise TopologyError(
            "--switch bmv2 needs --program p4/build/ina.json (bmv2's JSON: `make -C p4`), "
            "which `inaemu pipeline push` sends"
        )
    if args.program and not Path(args.program).is_file():
        raise TopologyError(f"--program {args.program}: no such file (`make -C p4` builds it)")
    topo = cluster_topology(
        machines,
        switch=args.name,
        grpc=args.grpc,
        device_id=args.device_id,
        agg_ip=args.agg_ip or "",
        agg_mac=args.agg_mac,
        program=str(Path(args.program).resolve()) if args.program else "",
    )
    cluster = Cluster(
        TOPOLOGY_NAME,
        tuple(m.name for m in machines),
        backend=args.backend,
        job=args.job,
        window=args.pool,
        timeout=args.timeout,
    )
    rendezvous = args.rendezvous or f"{machines[0].address}:{RENDEZVOUS_PORT}"
    host, colon, port = rendezvous.rpartition(":")
    if not (host and colon and port.isdigit() and 0 < int(port) < 65536):
        raise TopologyError(f"--rendezvous {rendezvous}: write HOST:PORT, e.g. 10.0.0.1:29500")
    arg.checks_done()
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
        topo.save(out / TOPOLOGY_NAME)
        cluster.save(out / CLUSTER_NAME)
    except OSError as exc:
        raise TopologyError(f"cannot write {out}: {exc.strerror or exc}") from None
    Cluster.load(out / CLUSTER_NAME)  # reads back as every machine will
    commands = cluster_commands(
        args.output,
        machines,
        cluster,
        topo,
        switch_kind=args.switch,
        rendezvous=rendezvous,
        script=args.script,
    )
    workers = cluster.world_size(topo)
    print(
        f"# wrote {out / TOPOLOGY_NAME} (switch {args.name}, {len(machines)} machines, "
        f"{workers} workers) and {out / CLUSTER_NAME} (job {cluster.job}, {cluster.backend}); "
        f"copy {out}/ to the switch box and to every machine, at the same path"
    )
    print(describe(commands, args.switch))


def cmd_setup(args: argparse.Namespace) -> None:
    if not args.cluster:
        raise TopologyError("setup needs -c DIR/cluster.json (`inaemu cluster init` writes it)")
    path = Path(args.cluster)
    cluster, topo = Cluster.load(path)
    host = find_machine(cluster, topo, args.machine or os.environ.get(MACHINE, ""), str(path))
    arg.checks_done()
    for line in setup_machine(cluster, topo, host, offloads_off=args.offloads_off):
        print(line)


def setup_machine(
    cluster: Cluster, topo: Topology, host: Host, *, offloads_off: bool = False
) -> list[str]:
    """Make this machine ready for the job (as root; `inaemu cluster setup`): its interface
    that faces the switch has the topology's MAC, is up and carries an INA frame; permanent
    ARP entries for the switch's aggregation address and every other machine of the job (the
    switch answers no ARP); with `offloads_off`, the interface's transmit offloads off (a
    veth to a switch in user space: `inaemu.mininet.offload`). What it did, a line each;
    OSError saying what failed and the fix."""
    # here, not at the top: `inaemu` loads no compiled kernel for commands that need none
    from inaemu.hostlib.worker import add_static_arp, check_mac, facing_interface
    from inaemu.mininet.offload import tx_offloads_off
    from inaemu.softswitch.ports import InterfaceError, check_interface

    switch = topo.switches[topo.host_attachment(host.name)[0]]
    dev = facing_interface(switch.agg_ip, host.ip)
    check_mac(dev, host.mac)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            mtu = check_interface(probe, dev)
        except InterfaceError as exc:
            raise OSError(str(exc)) from None
    done = [f"{host.name}: {host.ip} on {dev} ({host.mac}, MTU {mtu}), {host.ranks} ranks"]
    neighbours = [(switch.agg_ip, switch.agg_mac, f"switch {switch.name}")] + [
        (topo.hosts[w].ip, topo.hosts[w].mac, w) for w in cluster.workers if w != host.name
    ]
    for ip, mac, what in neighbours:
        add_static_arp(ip, mac, host.ip)
        done.append(f"ARP {ip} -> {mac} ({what}) on {dev}, permanent")
    if offloads_off:
        tx_offloads_off(dev)
        done.append(f"{dev}: transmit offloads off")
    return done


def main(argv: list[str] | None = None) -> int:
    """`inaemu cluster` (dispatched by `cli/main.py`): every expected failure in one line."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cmd_cluster(args)
    except arg.ParseOnly:
        arg.parse_only("inaemu cluster")
    except KeyboardInterrupt:
        print("\ninaemu cluster: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:  # TopologyError and ClusterError are ValueErrors
        print(f"inaemu cluster: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    c = arg.ArgumentParser(
        prog="inaemu cluster",
        description="machines that torchrun starts, aggregated by one switch (docs/cluster.md)",
    )
    c.add_argument(
        "action", choices=("init", "setup"), help="init: write and print; setup: a machine"
    )
    c.add_argument(
        "--machine",
        action="append",
        default=[],
        metavar="SPEC",
        help=f"init: a machine, {MACHINE_FORM} (repeatable)",
    )
    c.add_argument("--machines", help="init: a file of machines, one SPEC per line")
    c.add_argument(
        "--switch", choices=SWITCH_KINDS, default="softswitch", help="init: which switch"
    )
    c.add_argument("--name", default="s1", help="init: the switch's name (default %(default)s)")
    c.add_argument(
        "--grpc",
        type=arg.listen_address,
        default="127.0.0.1:9559",
        help="init: its P4Runtime address, as the controller reaches it (default %(default)s)",
    )
    c.add_argument("--device-id", type=arg.DEVICE_ID, default=1, help="init: its device id")
    c.add_argument(
        "--agg-ip", help="init: its aggregation address (default: the subnet's last free)"
    )
    c.add_argument(
        "--agg-mac", default=AGG_MAC, help="init: its aggregation MAC (default %(default)s)"
    )
    c.add_argument("--program", help="init: bmv2's JSON (p4/build/ina.json), for --switch bmv2")
    c.add_argument("--job", type=arg.JOB_ID, default=1, help="init: the job id (default 1)")
    c.add_argument(
        "--backend",
        choices=INA_BACKENDS,
        default="ina-fixedpoint",
        help="init: the workers' backend",
    )
    c.add_argument("--pool", type=arg.WINDOW, default=64, help="init: the job's slots (window)")
    c.add_argument(
        "--timeout",
        type=arg.SECONDS,
        default=30.0,
        help="init: seconds without progress before a worker gives up (default %(default)s)",
    )
    c.add_argument(
        "--rendezvous",
        metavar="HOST:PORT",
        help=f"init: torchrun's rendezvous (default the first machine's address:{RENDEZVOUS_PORT})",
    )
    c.add_argument(
        "--script",
        default="train_ddp.py",
        help="init: the training script in the torchrun lines (`inaemu train --example F` "
        "writes one; default %(default)s)",
    )
    c.add_argument("-o", "--output", default="cluster", help="init: the directory to write")
    c.add_argument("-c", "--cluster", help="setup: the cluster file (DIR/cluster.json)")
    c.add_argument(
        "--machine-name",
        dest="machine",
        help="setup: this machine (default: $INAEMU_MACHINE, else by this host's address)",
    )
    c.add_argument(
        "--offloads-off",
        action="store_true",
        help="setup: transmit offloads off (a veth to a switch that runs in user space)",
    )
    return c
