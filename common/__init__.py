"""What every part of inaemu shares, below the host library: the wire format (`wire.py`, and
its scapy layer `scapy_ina.py`), the argument types of every command line (`args.py`),
loopback wires (`loopback.py`), many frames per system call (`batch_io.py`), lifelines
(`lifeline.py`) and compiled kernels' caching (`jit.py`)."""
