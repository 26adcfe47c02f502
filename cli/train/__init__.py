"""`inaemu train`: the training launcher (`launcher.py`) and the networks it runs a script on,
the embedded softswitches (`inaemu.embedded`) or Mininet (`mininet_network.py`)."""
