"""The softswitch's P4Runtime gRPC server (`server.P4RuntimeServer`) and what it is made of."""
