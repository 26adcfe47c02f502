// TCP and IPv4 routing for the simulator's host collectives (sim/collectives.py, sim/ipnet.py),
// compiled at run time by cling after glue.cpp.
//
// - HostRoutes: a node's IPv4 routing, /32 host routes in a hash table (ns-3's
//   Ipv4StaticRouting scans a list of every route for every packet: a thousand hosts' routes
//   on every switch), one or several next hops per destination; with several, a flow's
//   (source, destination, protocol, ports) hash picks one (ECMP), so a TCP connection keeps
//   its path. A host routes everything out of its one interface.
// - TcpMesh: the connections of a host collective, one per pair of ranks that exchange
//   messages, both directions on it (as hostlib's TcpPeers). A message is a count of virtual
//   payload bytes (no bytes are copied: the values are checked outside the simulation); a
//   receiving end knows the sizes of the messages it will get, in order, and calls one Python
//   handler per completed message with its end's id.

#include <algorithm>
#include <deque>

#include "ns3/internet-module.h"
#include "ns3/traffic-control-module.h"

namespace inaemu_sim {
using namespace ns3;

class HostRoutes : public Ipv4RoutingProtocol {
  public:
    static TypeId GetTypeId() {
        static TypeId tid = TypeId("inaemu_sim::HostRoutes")
                                .SetParent<Ipv4RoutingProtocol>()
                                .SetGroupName("Internet")
                                .AddConstructor<HostRoutes>();
        return tid;
    }
    uint64_t salt = 0;
    int32_t default_iface = -1;  // a host's: everything goes out of it
    uint64_t forwarded = 0, unroutable = 0;

    void SetSalt(uint64_t s) { salt = s; }
    void SetDefault(int32_t iface) { default_iface = iface; }
    // destination i (an IPv4 address as an integer) leaves by interface ifaces[i]; a
    // destination given several times has several next hops
    void AddMany(const uint32_t* dsts, const int32_t* ifaces, uint64_t n) {
        for (uint64_t i = 0; i < n; i++) Hops(dsts[i]).push_back(Route(dsts[i], ifaces[i]));
    }
    uint64_t NextHops(uint32_t dst) const {
        auto it = table.find(dst);
        return it == table.end() ? 0 : it->second.size();
    }

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p, const Ipv4Header& h, Ptr<NetDevice>,
                               Socket::SocketErrno& err) override {
        Ptr<Ipv4Route> r = Pick(h, p);
        err = r ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
        return r;
    }
    bool RouteInput(Ptr<const Packet> p, const Ipv4Header& h, Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb, const MulticastForwardCallback&,
                    const LocalDeliverCallback& lcb, const ErrorCallback&) override {
        int32_t iif = ipv4->GetInterfaceForDevice(idev);
        if (ipv4->IsDestinationAddress(h.GetDestination(), iif)) {
            lcb(p, h, iif);
            return true;
        }
        Ptr<Ipv4Route> r = Pick(h, p);
        if (!r) return false;
        forwarded++;
        ucb(r, p, h);
        return true;
    }
    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void SetIpv4(Ptr<Ipv4> i) override { ipv4 = i; }
    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override {}

  private:
    Ptr<Ipv4> ipv4;
    std::unordered_map<uint32_t, std::vector<Ptr<Ipv4Route>>> table;
    Ptr<Ipv4Route> default_route;

    std::vector<Ptr<Ipv4Route>>& Hops(uint32_t dst) { return table[dst]; }
    Ptr<Ipv4Route> Route(uint32_t dst, int32_t iface) {
        Ptr<Ipv4Route> r = Create<Ipv4Route>();
        r->SetDestination(Ipv4Address(dst));
        r->SetGateway(Ipv4Address::GetAny());  // point to point: the peer takes every frame
        r->SetOutputDevice(ipv4->GetNetDevice(iface));
        r->SetSource(ipv4->GetAddress(iface, 0).GetLocal());
        return r;
    }
    static uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    Ptr<Ipv4Route> Pick(const Ipv4Header& h, Ptr<const Packet> p) {
        if (default_iface >= 0) {
            if (!default_route) default_route = Route(0, default_iface);
            return default_route;
        }
        auto it = table.find(h.GetDestination().Get());
        if (it == table.end() || it->second.empty()) {
            unroutable++;
            return nullptr;
        }
        const std::vector<Ptr<Ipv4Route>>& hops = it->second;
        if (hops.size() == 1) return hops[0];
        uint32_t ports = 0;  // the transport header's source and destination ports
        if (p && p->GetSize() >= 4) p->CopyData((uint8_t*)&ports, 4);
        uint64_t k = Mix((((uint64_t)h.GetSource().Get() << 32) | h.GetDestination().Get()) ^ salt);
        k = Mix(k ^ (((uint64_t)ports << 8) | h.GetProtocol()));
        return hops[k % hops.size()];
    }
};

// IPv4 on a node whose Internet stack is installed: `device` as a new interface with address
// `addr`/`prefix`, up; returns the interface's index.
inline int32_t add_interface(Ptr<Node> node, Ptr<NetDevice> device, uint32_t addr, uint32_t prefix) {
    Ptr<Ipv4> ip = node->GetObject<Ipv4>();
    int32_t i = ip->AddInterface(device);
    uint32_t mask = prefix == 0 ? 0 : 0xFFFFFFFFu << (32 - prefix);
    ip->AddAddress(i, Ipv4InterfaceAddress(Ipv4Address(addr), Ipv4Mask(mask)));
    ip->SetMetric(i, 1);
    ip->SetUp(i);
    return i;
}

// `HostRoutes` as the node's IPv4 routing (in place of what the stack helper installed).
inline Ptr<HostRoutes> install_routes(Ptr<Node> node) {
    Ptr<HostRoutes> r = CreateObject<HostRoutes>();
    node->GetObject<Ipv4>()->SetRoutingProtocol(r);
    return r;
}

// A host's NIC as Linux's: flow control from a short device ring (`ring_bytes`, as byte queue
// limits keep it) to a fair queue per flow in front of it (fq_codel, Linux's default: a
// flow's ACKs do not wait behind another flow's data), whose drop law is off (`limit`
// packets; TCP small queues keep a Linux host's queue short, which ns-3 does not model).
// Returns the queue disc (its drops are counted by the caller).
inline Ptr<QueueDisc> host_fair_queue(Ptr<NetDevice> d, uint32_t ring_bytes, uint32_t limit) {
    Ptr<PointToPointNetDevice> p = DynamicCast<PointToPointNetDevice>(d);
    p->GetQueue()->SetMaxSize(QueueSize(BYTES, ring_bytes));
    Ptr<NetDeviceQueueInterface> ndqi = CreateObject<NetDeviceQueueInterface>();
    ndqi->GetTxQueue(0)->ConnectQueueTraces(p->GetQueue());
    d->AggregateObject(ndqi);
    TrafficControlHelper tch;
    tch.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize",
                         QueueSizeValue(QueueSize(PACKETS, limit)), "Target", StringValue("10s"),
                         "Interval", StringValue("100s"));
    return tch.Install(d).Get(0);
}

// Packets a queue disc dropped.
struct QdiscDrops {
    uint64_t n = 0;
    void Hit(Ptr<const QueueDiscItem>) { n++; }
    void Attach(Ptr<QueueDisc> q) {
        q->TraceConnectWithoutContext("Drop", MakeCallback(&QdiscDrops::Hit, this));
    }
};

// Packets dropped inside nodes, not at a link: by IPv4 (no route, TTL, ...) and by the
// traffic-control layer (a device without a queue disc whose flow control has stopped it: the
// drop no device trace shows, which `ipnet.py` avoids). Both should stay 0.
struct NodeDrops {
    uint64_t ip = 0, traffic_control = 0;
    void Ip(const Ipv4Header&, Ptr<const Packet>, Ipv4L3Protocol::DropReason, Ptr<Ipv4>,
            uint32_t) {
        ip++;
    }
    void Tc(Ptr<const Packet>) { traffic_control++; }
    void Attach(Ptr<Node> node) {
        node->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
            "Drop", MakeCallback(&NodeDrops::Ip, this));
        node->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
            "TcDrop", MakeCallback(&NodeDrops::Tc, this));
    }
};

struct TcpMesh;

// One end of a connection: what it still has to send, what it has received, where the
// messages it waits for end.
struct TcpEnd {
    TcpMesh* mesh = nullptr;
    int32_t id = 0;
    Ptr<Node> node;
    Ptr<Socket> sock;
    uint64_t unsent = 0;  // bytes queued by Send and not yet taken by the socket
    uint64_t queued = 0, received = 0;
    uint64_t expected = 0;  // bytes of every message Expect announced
    std::deque<uint64_t> marks;  // received-byte counts at which the next messages end
    uint64_t messages = 0;  // completed on arrival
    bool open = false;

    void Fill();
    void Space(Ptr<Socket>, uint32_t) { Fill(); }
    void Recv(Ptr<Socket> s);
};

struct TcpMesh {
    std::vector<TcpEnd*> ends;  // end 2c and 2c + 1: connection c's (connecting, accepting)
    std::vector<Ipv4Address> accept_ip;  // per connection: the accepting end's address
    std::unordered_map<uint64_t, int32_t> accepting;  // (node id, peer address) -> end
    std::unordered_map<uint32_t, Ptr<Socket>> listeners;  // node id ->
    std::function<void(int32_t)> on_message;
    std::function<void()> on_open;
    uint16_t port = 7000;
    uint32_t piece = 1 << 20;  // bytes handed to a socket per Send at most
    int32_t open_ends = 0;
    uint64_t segments = 0, segment_bytes = 0, acks = 0, retransmissions = 0;
    uint64_t timeouts = 0, recoveries = 0;  // entries into CA_LOSS, CA_RECOVERY
    uint64_t handler_calls = 0;

    ~TcpMesh() {
        for (TcpEnd* e : ends) delete e;
    }
    void SetHandlers(std::function<void(int32_t)> message, std::function<void()> open) {
        on_message = message;
        on_open = open;
    }
    // A connection from node a to node b (address b_ip): returns its index c; a's end is
    // 2c, b's 2c + 1.
    int32_t Add(Ptr<Node> a, Ptr<Node> b, uint32_t b_ip) {
        int32_t c = (int32_t)accept_ip.size();
        for (int k = 0; k < 2; k++) {
            TcpEnd* e = new TcpEnd();
            e->mesh = this;
            e->id = 2 * c + k;
            e->node = k == 0 ? a : b;
            ends.push_back(e);
        }
        accept_ip.push_back(Ipv4Address(b_ip));
        return c;
    }
    void Expect(int32_t end, uint64_t bytes) {
        TcpEnd* e = ends[end];
        e->expected += bytes;
        e->marks.push_back(e->expected);
    }
    void Send(int32_t end, uint64_t bytes) {
        TcpEnd* e = ends[end];
        e->unsent += bytes;
        e->queued += bytes;
        if (e->open) e->Fill();
    }
    uint64_t Received(int32_t end) const { return ends[end]->received; }
    uint64_t Unsent(int32_t end) const { return ends[end]->unsent; }
    uint64_t Messages(int32_t end) const { return ends[end]->messages; }
    uint64_t Pending(int32_t end) const { return ends[end]->marks.size(); }
    int32_t OpenEnds() const { return open_ends; }

    // Open every connection now (sockets are made inside the simulation: a Connect before
    // it runs crashes in the traffic-control layer).
    void Open() { Simulator::ScheduleNow(&TcpMesh::DoOpen, this); }

    void DoOpen() {
        if (ends.empty()) {  // one rank: nothing to connect
            if (on_open) on_open();
            return;
        }
        for (size_t c = 0; c < accept_ip.size(); c++) {
            TcpEnd* b = ends[2 * c + 1];
            uint32_t id = b->node->GetId();
            if (!listeners.count(id)) {
                Ptr<Socket> l = Socket::CreateSocket(b->node, TcpSocketFactory::GetTypeId());
                l->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
                l->Listen();
                l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                     MakeCallback(&TcpMesh::Accept, this));
                listeners[id] = l;
            }
        }
        for (size_t c = 0; c < accept_ip.size(); c++) {
            TcpEnd* a = ends[2 * c];
            TcpEnd* b = ends[2 * c + 1];
            Ptr<Ipv4> ip = a->node->GetObject<Ipv4>();
            Ipv4Address mine = ip->GetAddress(1, 0).GetLocal();
            accepting[Key(b->node->GetId(), mine)] = b->id;
            a->sock = Socket::CreateSocket(a->node, TcpSocketFactory::GetTypeId());
            a->sock->Bind();
            a->sock->SetConnectCallback(MakeCallback(&TcpMesh::Connected, this),
                                        MakeCallback(&TcpMesh::Failed, this));
            Watch(a);
            a->sock->Connect(InetSocketAddress(accept_ip[c], port));
        }
    }

  private:
    std::unordered_map<Socket*, TcpEnd*> by_socket;

    static uint64_t Key(uint32_t node, Ipv4Address peer) {
        return ((uint64_t)node << 32) | peer.Get();
    }
    void Watch(TcpEnd* e) {
        by_socket[PeekPointer(e->sock)] = e;
        e->sock->SetSendCallback(MakeCallback(&TcpEnd::Space, e));
        e->sock->SetRecvCallback(MakeCallback(&TcpEnd::Recv, e));
        e->sock->TraceConnectWithoutContext("Tx", MakeCallback(&TcpMesh::Tx, this));
        e->sock->TraceConnectWithoutContext("Retransmission", MakeCallback(&TcpMesh::Retx, this));
        e->sock->TraceConnectWithoutContext("CongState", MakeCallback(&TcpMesh::Cong, this));
    }
    void Opened(TcpEnd* e) {
        e->open = true;
        open_ends++;
        e->Fill();
        if (open_ends == (int32_t)ends.size() && on_open) on_open();
    }
    void Connected(Ptr<Socket> s) { Opened(by_socket[PeekPointer(s)]); }
    void Failed(Ptr<Socket>) {}  // the connection stays closed: the run reports it
    void Accept(Ptr<Socket> s, const Address& from) {
        auto it = accepting.find(Key(s->GetNode()->GetId(),
                                     InetSocketAddress::ConvertFrom(from).GetIpv4()));
        if (it == accepting.end()) {
            s->Close();
            return;
        }
        TcpEnd* e = ends[it->second];
        accepting.erase(it);
        e->sock = s;
        Watch(e);
        Opened(e);
    }
    void Tx(Ptr<const Packet> p, const TcpHeader&, Ptr<const TcpSocketBase>) {
        if (p->GetSize()) {
            segments++;
            segment_bytes += p->GetSize();
        } else {
            acks++;
        }
    }
    void Retx(Ptr<const Packet>, const TcpHeader&, const Address&, const Address&,
              Ptr<const TcpSocketBase>) {
        retransmissions++;
    }
    void Cong(TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now) {
        if (now == TcpSocketState::CA_LOSS) timeouts++;
        if (now == TcpSocketState::CA_RECOVERY) recoveries++;
    }
    friend struct TcpEnd;
};

inline void TcpEnd::Fill() {
    while (unsent) {
        uint32_t room = sock->GetTxAvailable();
        if (!room) return;
        uint32_t k = (uint32_t)std::min<uint64_t>({unsent, (uint64_t)room, (uint64_t)mesh->piece});
        int r = sock->Send(Create<Packet>(k));
        if (r <= 0) return;
        unsent -= (uint64_t)r;
    }
}

inline void TcpEnd::Recv(Ptr<Socket> s) {
    Ptr<Packet> p;
    while ((p = s->Recv())) {
        received += p->GetSize();
        while (!marks.empty() && received >= marks.front()) {
            marks.pop_front();
            messages++;
            mesh->handler_calls++;
            mesh->on_message(id);
        }
    }
}

}  // namespace inaemu_sim
