"""inaemu softswitch: the p4/ina.p4 pipeline in Python, with a port layer and P4Runtime state."""
