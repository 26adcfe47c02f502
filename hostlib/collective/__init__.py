"""Host collectives: allreduce schedules (`inaemu.collectives.schedule`) executed between
hosts over a `PeerChannel` (TCP mesh or frames through the softswitch network), as baselines
for in-network aggregation. See docs/collectives.md, "Running a schedule between hosts"."""
