"""The application: the `inaemu` command (`main.py`, the console script's entry point, also
`python -m inaemu.cli`) and what only it runs: the demo and the comparison on the embedded
network, the training launcher, `inaemu schedule`. It stands on every other floor
(docs/architecture.md, "Floors") and nothing imports it."""
