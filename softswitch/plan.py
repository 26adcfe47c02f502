"""A controller plan installed straight into an in-process pipeline (tests, benchmarks, and
multi-switch fabrics without gRPC): the in-process twin of the controller's P4Runtime writes."""

from __future__ import annotations

from inaemu.p4.plan import SwitchPlan, TableWrite
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry


def apply_to_pipeline(pipeline: Pipeline, plan: SwitchPlan) -> None:
    """Install a plan into an in-process pipeline (all or nothing)."""
    with pipeline.lock:
        done: list[TableWrite] = []
        groups: list[int] = []
        try:
            for w in plan.tables:
                pipeline.tables[w.table].insert(TableEntry(w.key, ActionCall(w.action, w.params)))
                done.append(w)
            for g in plan.groups:
                pipeline.multicast.insert(g.mgid, list(g.replicas))
                groups.append(g.mgid)
        except BaseException:
            for w in done:
                pipeline.tables[w.table].delete(w.key)
            for mgid in groups:
                pipeline.multicast.delete(mgid)
            raise


def remove_from_pipeline(pipeline: Pipeline, plan: SwitchPlan) -> None:
    """Remove what `apply_to_pipeline` installed."""
    with pipeline.lock:
        for w in plan.tables:
            pipeline.tables[w.table].delete(w.key)
        for g in plan.groups:
            pipeline.multicast.delete(g.mgid)
