"""inaemu host library: wire format, transports, INA allreduce client, codecs."""
