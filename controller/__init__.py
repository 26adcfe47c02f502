"""inaemu control plane: topologies, jobs and slot pools, P4Runtime programming, CLI."""
