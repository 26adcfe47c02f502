"""`python -m inaemu.cli ARGS`: the `inaemu` command."""

from inaemu.cli.main import main

raise SystemExit(main())
