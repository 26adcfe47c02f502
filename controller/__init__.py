"""inaemu control plane, a library: jobs and slot pools, aggregation trees as table entries,
P4Runtime programming with rollback, statistics, the job state file, and `api`: one function
per operation, which the `inaemu` subcommands and the Mininet scenario call."""
