"""`python -m inaemu.mininet ...` is `inaemu mininet ...`."""

from inaemu.mininet.run import main

if __name__ == "__main__":
    raise SystemExit(main())
