"""Host collectives (the baselines in-network aggregation is compared with): allreduce
schedules as data (`schedule`), the algorithms that compute them, and a checker that proves
them correct and measures their link contention on a topology."""
