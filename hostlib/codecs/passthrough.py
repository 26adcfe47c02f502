"""The "int32" codec: one SUM phase of the int32 values as they are (exact, no scaling).

`SumOverflow` propagates to the caller when the switch saturated: the true sum, or a partial
sum in the switch's arrival order, left the int32 range. There is nothing lossless to retry.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import INT32_MAX, INT32_MIN, Opcode
from inaemu.hostlib.codecs._util import check_workers, expect_result
from inaemu.hostlib.codecs.base import Int32Array, Phase, PhaseGenerator, SumOverflow


def int32_sum_phases(flat: Int32Array, shape: tuple[int, ...], label: str) -> PhaseGenerator:
    """One exact SUM of `flat` (1-D int32); the result is reshaped to `shape`."""
    if flat.size == 0:
        return np.zeros(shape, dtype=np.int32)
    try:
        total = yield Phase(Opcode.SUM, flat, label)
    except SumOverflow as exc:
        raise SumOverflow(
            f"{label}: the int32 sum does not fit in int32 (switch saturated)",
            label=exc.label,
            lanes=exc.lanes,
        ) from exc
    return expect_result(total, flat.size, label).reshape(shape)


class Int32Codec:
    """Plain int32 SUM. Accepts any integer (or bool) array whose values fit in int32."""

    name = "int32"

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> PhaseGenerator:
        check_workers(n_workers)
        arr = np.asarray(x)
        if arr.dtype.kind not in "iub":
            raise TypeError(f"int32 codec: expected an integer array, got {arr.dtype}")
        if arr.dtype != np.int32:
            if arr.size and (int(arr.min()) < INT32_MIN or int(arr.max()) > INT32_MAX):
                raise ValueError("int32 codec: input values do not fit in int32")
            arr = arr.astype(np.int32)
        return int32_sum_phases(np.ascontiguousarray(arr).reshape(-1), arr.shape, self.name)
