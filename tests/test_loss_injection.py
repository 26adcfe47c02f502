"""Loss injection is seeded per switch and per port: reproducible, and at the asked rate."""

from __future__ import annotations

from inaemu.p4.constants import DropReason
from inaemu.p4.plan import LOSS_TABLE, SwitchPlan, TableWrite, loss_threshold
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline

ARP = bytes.fromhex(
    "ffffffffffff000000000001080600010800060400010000000000010a0000010000000000000a000002"
)  # any frame: loss comes before everything else


def drops(seed: int, p: float, n: int = 2000, port: int = 1) -> list[bool]:
    pipe = Pipeline(seed=seed)
    plan = SwitchPlan()
    plan.tables.append(TableWrite(LOSS_TABLE, (port,), "set_loss", (loss_threshold(p),)))
    apply_to_pipeline(pipe, plan)
    out = []
    for _ in range(n):
        before = pipe.ina_drops.packets[DropReason.LOSS]
        pipe.process(port, ARP)
        out.append(pipe.ina_drops.packets[DropReason.LOSS] > before)
    return out


def test_same_seed_same_losses_other_seed_other_losses() -> None:
    assert drops(5, 0.3) == drops(5, 0.3)
    assert drops(5, 0.3) != drops(6, 0.3)


def test_rate_and_extremes() -> None:
    assert 0.26 < sum(drops(1, 0.3)) / 2000 < 0.34
    assert not any(drops(1, 0.0, 500))
    assert all(drops(1, 1.0, 500))


def test_ports_draw_independently() -> None:
    """Port 2's losses do not depend on traffic arriving on port 1 (one generator per port)."""
    pipe = Pipeline(seed=3)
    plan = SwitchPlan()
    for port in (1, 2):
        plan.tables.append(TableWrite(LOSS_TABLE, (port,), "set_loss", (loss_threshold(0.5),)))
    apply_to_pipeline(pipe, plan)
    pattern = []
    for i in range(400):
        if i % 3 == 0:
            pipe.process(1, ARP)
        before = pipe.ina_drops.packets[DropReason.LOSS]
        pipe.process(2, ARP)
        pattern.append(pipe.ina_drops.packets[DropReason.LOSS] > before)
    assert pattern == drops(3, 0.5, 400, port=2)
