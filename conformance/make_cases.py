"""Writes the conformance cases (conformance/cases/*.stf and *.mstf) from readable descriptions:
the single-switch cases of `switch_cases.py` and the multi-switch ones of `network_cases.py`,
both built with `case_builder.py`.

The .stf files are the cases: data that p4c's bmv2 STF runner and our targets both read.
This script only saves typing hex. Every expected packet is computed from first principles
(the sums by numpy, the rewrites and checksums by hand), never by running a switch, so a case
checks the switch instead of restating it.

    python -m inaemu.conformance.make_cases        # rewrite the .stf files
    python -m inaemu.conformance.make_cases --check  # exit 1 if a file is stale
"""

from __future__ import annotations

import argparse

from inaemu.conformance.case_builder import HERE
from inaemu.conformance.network_cases import NETWORK_CASES
from inaemu.conformance.switch_cases import CASES


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check the files are current")
    args = ap.parse_args()
    written = [(f"{c.name}.stf", c.text()) for c in CASES]
    written += [(c.filename, c.text()) for c in NETWORK_CASES]
    stale = []
    for name, text in written:
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print("stale conformance files (run python -m inaemu.conformance.make_cases):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
