"""Drive a running softswitch P4Runtime server with the official client, p4runtime-shell.

Run it with the python of a separate venv that has `pip install p4runtime-shell` (it pins
protobuf 3.20 and an old `p4runtime`, so it must not go into the project's .venv):

    .venv-p4rt-shell/bin/python tests/p4runtime_shell_check.py --grpc-addr 127.0.0.1:9559 \
        [--config p4/ina.p4info.txt,<any device config file>]

Without --config the switch must already have a pipeline (start it with --preconfigured, or
let a controller push one). Programs an INA job entry, a multicast group, a route and a
default action; reads them back; reads counters; checks that a duplicate insert is reported
as ALREADY_EXISTS. Prints "p4runtime-shell check: OK" and exits 0 on success.

This file is not imported by the project (it needs p4runtime_sh); tests/test_p4runtime_server.py
runs it in a subprocess.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def fail(message: str) -> None:
    print(f"p4runtime-shell check: FAILED: {message}", flush=True)
    sys.exit(1)


def expect(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


def param_values(entry: Any) -> dict[int, int]:
    """param id -> value of a read-back TableEntry (shell object)."""
    return {p.param_id: int.from_bytes(p.value, "big") for p in entry.msg().action.action.params}


def check(sh: Any, p4runtime: Any, drop_reasons: int) -> None:
    version = sh.APIVersion()
    expect(version.startswith("1."), f"unexpected P4Runtime API version {version!r}")

    # An INA job: ina_job (agg_node), a child, the children's multicast group.
    job = sh.TableEntry("ina_job")(action="agg_node")
    job.match["hdr.ina.job_id"] = "1"
    job.match["hdr.ina.tree_id"] = "0"
    for name, value in (
        ("base", 0),
        ("pool_size", 4),
        ("fanin", 2),
        ("child_mgid", 1),
        ("is_root", 1),
        ("parent_port", 0),
        ("epoch", 1),
    ):
        job.action[name] = str(value)
    job.insert()

    child = sh.TableEntry("ina_child")(action="set_child")
    child.match["hdr.ina.job_id"] = "1"
    child.match["hdr.ina.tree_id"] = "0"
    child.match["standard_metadata.ingress_port"] = "1"
    child.match["udp_port"] = "47500"  # the worker's UDP source port
    child.action["index"] = "0"
    child.insert()

    # The shell's legacy byte-padded encoding (\x00\x02 for a 9-bit port) is accepted too.
    sh.global_options["canonical_bytestrings"] = False
    padded = sh.TableEntry("ina_child")(action="set_child")
    padded.match["hdr.ina.job_id"] = "1"
    padded.match["hdr.ina.tree_id"] = "0"
    padded.match["standard_metadata.ingress_port"] = "2"
    padded.match["udp_port"] = "47500"
    padded.action["index"] = "1"
    expect(padded.msg().match[2].exact.value == b"\x00\x02", "padding option had no effect")
    padded.insert()
    sh.global_options["canonical_bytestrings"] = True

    group = sh.MulticastGroupEntry(1).add(1, 0).add(2, 0)
    group.insert()

    route = sh.TableEntry("ipv4_lpm")(action="ipv4_forward")
    route.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    route.action["dstAddr"] = "00:00:00:00:00:02"
    route.action["port"] = "2"
    route.insert()

    default = sh.TableEntry("ipv4_lpm")(is_default=True, action="ipv4_forward")
    default.action["dstAddr"] = "00:00:00:00:00:03"
    default.action["port"] = "3"
    default.modify()

    # Read everything back.
    jobs = list(sh.TableEntry("ina_job").read())
    expect(len(jobs) == 1, f"expected one ina_job entry, read {len(jobs)}")
    expect(
        param_values(jobs[0]) == {1: 0, 2: 4, 3: 2, 4: 1, 5: 1, 6: 0, 7: 1},
        f"ina_job entry read back wrong: {jobs[0]}",
    )
    routes = list(sh.TableEntry("ipv4_lpm").read())
    expect(len(routes) == 1, f"expected one route, read {len(routes)}")
    lpm = routes[0].msg().match[0].lpm
    expect(
        (int.from_bytes(lpm.value, "big"), lpm.prefix_len) == (0x0A000000, 8),
        f"route read back wrong: {routes[0]}",
    )
    defaults = list(sh.TableEntry("ipv4_lpm")(is_default=True).read())
    expect(len(defaults) == 1, "no default entry read back")
    expect(param_values(defaults[0]) == {1: 3, 2: 3}, f"default read back wrong: {defaults[0]}")

    groups = list(sh.MulticastGroupEntry(1).read())
    expect(len(groups) == 1, f"expected multicast group 1, read {len(groups)}")
    replicas = [(r.egress_port, r.instance) for r in groups[0].replicas]
    expect(replicas == [(1, 0), (2, 0)], f"multicast group read back wrong: {replicas}")
    expect(len(list(sh.MulticastGroupEntry().read())) == 1, "wildcard multicast read")

    # Counters: one index, a whole array, the direct counter of ina_child.
    rx = sh.CounterEntry("port_rx")
    rx.index = 1
    [one] = list(rx.read())
    expect((one.packet_count, one.byte_count) == (0, 0), f"port_rx[1] not zero: {one}")
    every = list(sh.CounterEntry("ina_drops").read())
    expect(len(every) == drop_reasons, f"ina_drops has {drop_reasons} cells, read {len(every)}")
    direct = list(sh.DirectCounterEntry("ina_child_stats").read())
    expect(len(direct) == 2, f"expected two ina_child direct counters, read {len(direct)}")
    children = list(sh.TableEntry("ina_child").read())
    ports = sorted(e.msg().match[2].exact.value for e in children)
    expect(ports == [b"\x01", b"\x02"], f"ina_child keys not read back canonical: {ports}")

    # A duplicate insert is a per-update ALREADY_EXISTS in the batch error details.
    try:
        job.insert()
    except p4runtime.P4RuntimeWriteException as err:
        codes = [e.canonical_code for _, e in err.errors]
        expect(codes == [6], f"duplicate insert: expected ALREADY_EXISTS, got {err}")
    else:
        fail("a duplicate insert was accepted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpc-addr", default="127.0.0.1:9559")
    parser.add_argument("--device-id", type=int, default=1)
    parser.add_argument("--election-id", default="0,1", help="high,low")
    parser.add_argument("--config", help="p4info_path,device_config_path to push first")
    parser.add_argument(
        "--drop-reasons", type=int, required=True, help="cells of ina_drops (INA_DROP_REASONS)"
    )
    args = parser.parse_args()

    from p4runtime_sh import p4runtime
    from p4runtime_sh import shell as sh

    high, low = (int(x) for x in args.election_id.split(","))
    config = sh.FwdPipeConfig(*args.config.split(",")) if args.config else None
    sh.setup(
        device_id=args.device_id,
        grpc_addr=args.grpc_addr,
        election_id=(high, low),
        config=config,
        verbose=False,
    )
    try:
        check(sh, p4runtime, args.drop_reasons)
    finally:
        sh.teardown()
    print("p4runtime-shell check: OK", flush=True)


if __name__ == "__main__":
    main()
