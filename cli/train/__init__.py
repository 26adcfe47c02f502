"""`inaemu train`: the training launcher (`launcher.py`) and the networks it runs a script on,
embedded softswitches (`embedded_network.py`) or Mininet (`mininet_network.py`)."""
