"""Compare a P4Info p4c emitted with the committed one: python tests/p4info_compare.py A B."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inaemu.p4.info import p4info_diff, parse_p4info_text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: p4info_compare.py BUILT.p4info.txt COMMITTED.p4info.txt", file=sys.stderr)
        return 2
    built, committed = (parse_p4info_text(Path(p).read_text()) for p in argv)
    diffs = p4info_diff(built, committed)
    for d in diffs:
        print(d)
    print("P4Info: identical objects" if not diffs else f"P4Info: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
