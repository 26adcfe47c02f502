"""How a shaped Mininet link is shaped: htb with both buckets a few milliseconds of the
link's rate (`htb_commands`), instead of TCLink's burst 15k and tc's one-frame cburst. Pure
functions, no Mininet import: `nodes.ShapedIntf` runs the commands, the tests read them."""

from __future__ import annotations

# a shaped link's htb bucket holds this long of its rate (`htb_burst`): what a late dequeue
# may catch up on at once
BURST_SECONDS = 0.005
MIN_BURST = 1600  # bytes: one full-size frame and then some (tc's own default)


def htb_burst(bw: float) -> int:
    """Bytes a link shaped to `bw` Mbit/s may send at once after idling: `BURST_SECONDS` of
    its rate, at least `MIN_BURST`, for both of htb's buckets (rate and ceil).

    Mininet's TCLink sets `burst 15k` and leaves `cburst` to tc, about one frame: with rate =
    ceil the ceil bucket decides, so the link sends a frame, waits for htb's timer, sends the
    next. On a busy machine the timer's softirq runs late and the time lost is never caught
    up: on 2 cores running the softswitch and four workers a link shaped to 44 or 88 Mbit/s
    carried about 20 (docs/mininet.md, "Links"). A bucket of a few milliseconds lets a late
    dequeue send what the link owes; the rate over a run is unchanged, and a run's bytes can
    beat the link floor by at most this much."""
    return max(MIN_BURST, round(bw * 1e6 / 8 * BURST_SECONDS))


def htb_commands(bw: float) -> list[str]:
    """The tc commands (Mininet's `%s` for tc and the device left in) that shape an interface
    to `bw` Mbit/s with htb, as Mininet's TCIntf does but with both buckets `htb_burst`."""
    burst = htb_burst(bw)
    return [
        "%s qdisc add dev %s root handle 5:0 htb default 1",
        "%s class add dev %s parent 5:0 classid 5:1 htb "
        f"rate {bw:f}Mbit burst {burst} cburst {burst}",
    ]
