"""The client's congestion control, per worker and per job: how many chunks may be in flight
and how long a chunk's copy waits before it is presumed lost. `InaClient` (`client.py`)
decides what is lost and when to resend; these two keep the numbers.

- `RttEstimator`: RFC 6298 timers (SRTT, RTTVAR, RTO with backoff), samples only from chunks
  sent once (Karn's rule), gains scaled to many samples per round trip (RFC 7323).
- `CongestionWindow`: AIMD within the job's pool of W slots, 1 <= cwnd <= W: slow start, then
  +1 chunk per round trip; a loss halves it (a timeout drops it to 1 and slow start resumes),
  at most once per window of chunks; a decrease that proves spurious is taken back.

The compiled steady state (`kernels.py`) repeats `RttEstimator.sample_many`'s arithmetic on
the estimator's state; `tests/test_client_kernels.py` holds the two to the same results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt


@dataclass
class RttEstimator:
    """Retransmission timer of RFC 6298: SRTT and RTTVAR from RTT samples, RTO = SRTT + 4 RTTVAR
    clamped to [min_rto, max_rto], `initial_rto` until the first sample. Samples come only from
    chunks sent once (Karn's rule: the caller never samples a retransmitted chunk). A timeout
    doubles the timer (`back_off`) until the next sample.

    A client takes a sample from every chunk, many per round trip, where RFC 6298 assumes
    about one: `per_rtt` (the chunks in flight) divides the gains (RFC 7323, appendix G), so
    that SRTT and RTTVAR keep a few round trips of memory, not a few samples', and RTTVAR still
    covers the delay spikes of the last round trips.

    A copy of a chunk sent for the r-th time waits `timeout(r)`: the RTO times
    2**max(r, backoff), at most `max_rto`.
    """

    initial_rto: float = 0.1
    min_rto: float = 0.02
    max_rto: float = 1.0
    srtt: float | None = None
    rttvar: float = 0.0
    min_rtt: float = math.inf
    backoff: int = 0  # exponent: doubled timers since the last sample
    samples: int = 0

    ALPHA: ClassVar[float] = 1 / 8
    BETA: ClassVar[float] = 1 / 4
    MAX_BACKOFF: ClassVar[int] = 30

    def sample(self, rtt: float, per_rtt: int = 1) -> None:
        rtt = max(rtt, 0.0)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            alpha, beta = self.ALPHA / max(per_rtt, 1), self.BETA / max(per_rtt, 1)
            self.rttvar = (1 - beta) * self.rttvar + beta * abs(self.srtt - rtt)
            self.srtt = (1 - alpha) * self.srtt + alpha * rtt
        self.min_rtt = min(self.min_rtt, rtt)
        self.backoff = 0
        self.samples += 1

    def sample_many(self, rtts: list[float], per_rtt: int = 1) -> None:
        """`sample` for each of `rtts` in order (the same arithmetic, without a call each)."""
        if not rtts:
            return
        if self.srtt is None:
            self.sample(rtts[0], per_rtt)
            rtts = rtts[1:]
        srtt, rttvar, low = self.srtt, self.rttvar, self.min_rtt
        assert srtt is not None
        scale = max(per_rtt, 1)
        alpha, beta = self.ALPHA / scale, self.BETA / scale
        for rtt in rtts:
            rtt = max(rtt, 0.0)
            rttvar = (1 - beta) * rttvar + beta * abs(srtt - rtt)
            srtt = (1 - alpha) * srtt + alpha * rtt
            low = min(low, rtt)
        self.srtt, self.rttvar, self.min_rtt = srtt, rttvar, low
        self.backoff = 0
        self.samples += len(rtts)

    def back_off(self) -> None:
        self.backoff = min(self.backoff + 1, self.MAX_BACKOFF)

    def cover(self, delay: float) -> None:
        """A round trip of `delay` fooled the timer (a spurious timeout): raise RTTVAR so that
        the RTO is at least 2 x delay - SRTT, above it; it decays again with later samples."""
        if self.srtt is not None:
            self.rttvar = max(self.rttvar, (delay - self.srtt) / 2)

    @property
    def base_rto(self) -> float:
        """The RTO without backoff."""
        raw = self.initial_rto if self.srtt is None else self.srtt + 4 * self.rttvar
        return min(max(raw, self.min_rto), self.max_rto)

    @property
    def rto(self) -> float:
        return self.timeout(0)

    def timeout(self, retries: int) -> float:
        return float(min(self.base_rto * 2.0 ** max(retries, self.backoff), self.max_rto))

    def timeouts(self, retries: npt.NDArray[np.int32]) -> npt.NDArray[np.float64]:
        """`timeout` for each entry of `retries`."""
        exp = np.maximum(retries, self.backoff).astype(np.float64)
        out: npt.NDArray[np.float64] = np.minimum(self.base_rto * 2.0**exp, self.max_rto)
        return out


@dataclass
class CongestionWindow:
    """AIMD congestion window over chunks (TCP Reno's rules, ATP's use of them), within the
    job's window: 1 <= cwnd <= limit.

    - Growth, per chunk completed while the window was in use: +1 below `ssthresh` (slow
      start, doubling per round trip), else +1/cwnd (additive increase, +1 per round trip).
    - Decrease on a presumed loss of a copy numbered `tx` (every copy a client sends, first
      sends and retransmissions, gets the next transmission number): ssthresh = cwnd x beta
      (at least 2), and cwnd = ssthresh after a fast retransmit, 1 after a timeout (the
      round trip is in doubt: slow start again, to ssthresh). At most once per window of
      chunks: only a copy sent after the last decrease (tx >= `recover`) decreases again, so
      the losses of one round trip count once.
    - `undo`: a decrease found spurious (the chunk presumed lost was answered from its
      original copy) is taken back: cwnd and ssthresh as before it (RFC 4015's response).
    - `fixed`: cwnd stays at `limit` (SwitchML's fixed window).
    """

    limit: int
    cwnd: float
    ssthresh: float
    beta: float = 0.5
    fixed: bool = False
    recover: int = 0  # transmission number from which a loss decreases the window again
    decreases: int = 0
    undone: int = 0
    before: tuple[float, float] | None = None  # (cwnd, ssthresh) before the last decrease

    @classmethod
    def start(cls, limit: int, initial: int, *, fixed: bool = False) -> CongestionWindow:
        if limit < 1:
            raise ValueError(f"the window must be at least 1, got {limit}")
        cwnd = float(limit) if fixed else float(min(max(initial, 1), limit))
        return cls(limit=limit, cwnd=cwnd, ssthresh=float(limit), fixed=fixed)

    @property
    def allowed(self) -> int:
        """Chunks that may be in flight now."""
        return max(1, min(self.limit, int(self.cwnd)))

    def on_results(self, n: int, limited: bool = True) -> None:
        """`n` chunks completed; `limited`: the window was in use (else it does not grow)."""
        if self.fixed or n <= 0 or not limited:
            return
        cwnd = self.cwnd
        if cwnd < self.ssthresh:
            step = min(float(n), self.ssthresh - cwnd)
            cwnd += step
            n -= math.ceil(step)
        if n > 0:
            cwnd += n / cwnd
        self.cwnd = min(cwnd, float(self.limit))

    def on_loss(self, tx: int, next_tx: int, *, timeout: bool) -> bool:
        """A copy numbered `tx` is presumed lost, `next_tx` is the number the next copy sent
        will get. Returns whether the window decreased."""
        if self.fixed or tx < self.recover:
            return False
        self.before = (self.cwnd, self.ssthresh)
        self.ssthresh = min(max(self.cwnd * self.beta, 2.0), float(self.limit))
        self.cwnd = 1.0 if timeout else min(self.ssthresh, self.cwnd)
        self.recover = next_tx
        self.decreases += 1
        return True

    def undo(self) -> bool:
        """Take the last decrease back (once). Returns whether there was one to take back."""
        if self.before is None:
            return False
        cwnd, ssthresh = self.before
        self.before = None
        self.cwnd = max(self.cwnd, cwnd)
        self.ssthresh = max(self.ssthresh, ssthresh)
        self.undone += 1
        return True
