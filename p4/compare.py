"""Compare a P4Info that p4c emitted with the committed one (what `make -C p4 check` runs):

python -m inaemu.p4.compare build/ina.p4info.txt ina.p4info.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import text_format

from inaemu.p4.info import p4info_diff, parse_p4info_text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(
            "usage: python -m inaemu.p4.compare BUILT.p4info.txt COMMITTED.p4info.txt",
            file=sys.stderr,
        )
        return 2
    try:
        built, committed = (parse_p4info_text(Path(p).read_text()) for p in argv)
    except (OSError, text_format.ParseError) as exc:
        print(f"p4info compare: {exc}", file=sys.stderr)
        return 2
    diffs = p4info_diff(built, committed)
    for d in diffs:
        print(d)
    print("P4Info: identical objects" if not diffs else f"P4Info: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
