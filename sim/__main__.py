"""`python -m inaemu.sim ...` is `inaemu sim ...`."""

from inaemu.sim.run import main

if __name__ == "__main__":
    raise SystemExit(main())
