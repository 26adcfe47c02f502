// The C++ that inaemu's simulator adds to ns-3, compiled at run time by cling (cppyy), so that
// no compiler is needed at install. It keeps Python out of the per-packet path: frames are
// collected into arrays that Python owns and handed over once per simulated instant (or tick),
// what Python emits goes out in one call, timers are armed by integer id, and link counters
// and TCP messages are counted here. Python never builds an ns-3 callback per event: each
// Python callable converted by cppyy costs a JIT compilation (tens of ms), so every handler is
// registered once.

#include <cstdint>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

namespace inaemu_sim {
using namespace ns3;

inline int64_t now_ps() { return Simulator::Now().GetPicoSeconds(); }

// An event at absolute time `t` (ps) that calls `f` (a Python callable registered once).
inline EventId at_ps(int64_t t, std::function<void()> f) {
    int64_t d = t - now_ps();
    return Simulator::Schedule(PicoSeconds(d > 0 ? d : 0), f);
}

// What crossed a device: transmissions completed (frame bytes as ns-3 carries them, with the
// point-to-point header), frames its queue dropped, frames its receive error model dropped.
struct DeviceCounters {
    uint64_t tx_packets = 0, tx_bytes = 0, queue_drops = 0, rx_drops = 0;
    void Tx(Ptr<const Packet> p) { tx_packets++; tx_bytes += p->GetSize(); }
    void QueueDrop(Ptr<const Packet>) { queue_drops++; }
    void RxDrop(Ptr<const Packet>) { rx_drops++; }
    void Attach(Ptr<NetDevice> d) {
        d->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&DeviceCounters::Tx, this));
        d->TraceConnectWithoutContext("MacTxDrop", MakeCallback(&DeviceCounters::QueueDrop, this));
        d->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&DeviceCounters::RxDrop, this));
    }
};

// A group of devices whose received frames go to one Python handler: a switch's ports, or
// every host's NIC. Frames are copied into arrays bound once (the layout of the softswitch's
// FrameBatch: bytes back to back, offset, length, port), and the handler runs once per
// simulated instant with frames (tick_ps == 0: exact), or at the next multiple of tick_ps,
// or at once when the arrays are full. It reads n() frames and sends what it emits with Send.
struct PortGroup {
    std::vector<Ptr<NetDevice>> devices;  // by port number (an index into this vector)
    std::unordered_map<NetDevice*, int32_t> number;
    uint8_t* buf = nullptr;
    int64_t* off = nullptr;
    int32_t* len = nullptr;
    int32_t* port = nullptr;
    uint64_t buf_cap = 0, cap = 0, count = 0, used = 0;
    std::function<void()> handler;
    int64_t tick_ps = 0;
    bool pending = false;
    EventId flush_event;
    uint64_t frames_in = 0, frames_out = 0, flushes = 0, full_flushes = 0, refused = 0;
    uint64_t oversized = 0;  // frames longer than the arrays hold: dropped and counted
    uint64_t unconnected = 0;  // frames sent to a port with no device: dropped and counted
    std::vector<uint32_t> lose_next;  // by port: frames still to lose when sent there
    uint64_t lost = 0;  // frames lost that way (sent, so counted by the sender, never carried)

    void Bind(uint8_t* b, uint64_t b_cap, int64_t* o, int32_t* l, int32_t* p, uint64_t c) {
        buf = b; buf_cap = b_cap; off = o; len = l; port = p; cap = c;
    }
    void SetHandler(std::function<void()> h) { handler = h; }
    void AddPort(int32_t num, Ptr<NetDevice> d) {
        if ((int32_t)devices.size() <= num) devices.resize(num + 1);
        devices[num] = d;
        number[PeekPointer(d)] = num;
        d->SetReceiveCallback(MakeCallback(&PortGroup::Receive, this));
    }
    uint64_t n() const { return count; }
    // The next frame sent out of `port` is lost on its cable (a conformance case's `lose`).
    void Lose(int32_t port) {
        if ((int32_t)lose_next.size() <= port) lose_next.resize(port + 1);
        lose_next[port]++;
    }
    bool Receive(Ptr<NetDevice> d, Ptr<const Packet> p, uint16_t, const Address&) {
        uint32_t size = p->GetSize();
        if (size > buf_cap) { oversized++; return true; }
        if (count == cap || used + size > buf_cap) { full_flushes++; Flush(); }
        p->CopyData(buf + used, size);
        off[count] = (int64_t)used;
        len[count] = (int32_t)size;
        port[count] = number[PeekPointer(d)];
        used += size;
        count++;
        frames_in++;
        if (!pending) {
            pending = true;
            int64_t delay = 0;
            if (tick_ps > 0) {
                int64_t now = now_ps();
                delay = (now / tick_ps + 1) * tick_ps - now;
            }
            flush_event = Simulator::Schedule(PicoSeconds(delay), &PortGroup::Flush, this);
        }
        return true;
    }
    void Flush() {
        if (pending) { Simulator::Cancel(flush_event); pending = false; }
        if (!count) return;
        flushes++;
        handler();
        count = 0;
        used = 0;
    }
    // Send frame i (bytes b[o[i] : o[i] + l[i]]) out of port p[i], `delay_ps` from now.
    void Send(const uint8_t* b, const int64_t* o, const int32_t* l, const int32_t* p, uint64_t k,
              int64_t delay_ps) {
        for (uint64_t i = 0; i < k; i++) {
            if (p[i] < 0 || p[i] >= (int32_t)devices.size() || !devices[p[i]]) {
                unconnected++;
                continue;
            }
            frames_out++;
            if (p[i] < (int32_t)lose_next.size() && lose_next[p[i]]) {
                lose_next[p[i]]--;
                lost++;
                continue;
            }
            Ptr<Packet> packet = Create<Packet>(b + o[i], (uint32_t)l[i]);
            Ptr<NetDevice> d = devices[p[i]];
            if (delay_ps > 0)
                Simulator::Schedule(PicoSeconds(delay_ps), &PortGroup::SendOne, this, d, packet);
            else
                SendOne(d, packet);
        }
    }
    // Send k rows of `width` bytes each, back to back from b, all out of port `p`.
    void SendRows(const uint8_t* b, uint64_t k, uint32_t width, int32_t p) {
        Ptr<NetDevice> d = devices[p];
        for (uint64_t i = 0; i < k; i++) {
            frames_out++;
            SendOne(d, Create<Packet>(b + i * width, width));
        }
    }
    void SendOne(Ptr<NetDevice> d, Ptr<Packet> packet) {
        if (!d->Send(packet, d->GetBroadcast(), 0x0800)) refused++;
    }
};

// Timers by integer id, one Python handler for all: arming one cancels its last.
struct TimerMux {
    std::vector<EventId> events;
    std::function<void(int32_t)> handler;
    uint64_t fired = 0;
    void Resize(int32_t n) { events.resize(n); }
    void SetHandler(std::function<void(int32_t)> h) { handler = h; }
    void Arm(int32_t id, int64_t at) {
        events[id].Cancel();
        int64_t d = at - now_ps();
        events[id] = Simulator::Schedule(PicoSeconds(d > 0 ? d : 0), &TimerMux::Fire, this, id);
    }
    void Disarm(int32_t id) { events[id].Cancel(); }
    void Fire(int32_t id) {
        fired++;
        handler(id);
    }
};

}  // namespace inaemu_sim
