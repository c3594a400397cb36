#!/usr/bin/env python3
"""Captures real kernel datagrams as seeds of the rtnetlink and nfnetlink fuzz targets.

Run as root; it makes its own throwaway network namespace (nothing outside changes):

    unshare --net python3 fuzz/seeds/capture_netlink.py --inside

Inside, it creates a bridge, veths, an ifb, addresses, routes
(with metrics, in two tables), a rule, a neighbour, a tbf qdisc, an ingress qdisc with a
u32 redirect filter, an nftables ruleset like portmap's and firewall's, and conntrack
entries; then it dumps them all and writes every datagram the kernel answers (dump parts,
NLMSG_DONE, and errors with extended acks) to fuzz/corpus/{rtnetlink,nfnetlink}/."""
import hashlib
import os
import socket
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11


def sh(*cmds):
    for c in cmds:
        subprocess.run(c, shell=True, check=True)


def save(target, datagram):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(datagram).hexdigest()[:16]), "wb") as f:
        f.write(datagram)


def conversation(protocol, msg_type, flags, body, target, seq):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
    s.setsockopt(270, NETLINK_EXT_ACK, 1)
    s.setsockopt(270, NETLINK_CAP_ACK, 1)
    s.bind((0, 0))
    s.send(struct.pack("=IHHII", 16 + len(body), msg_type, flags, seq, 0) + body)
    count = 0
    while True:
        datagram = s.recv(1 << 20)
        save(target, datagram)
        count += 1
        kinds = []
        off = 0
        while off + 16 <= len(datagram):
            length, kind = struct.unpack_from("=IH", datagram, off)
            kinds.append(kind)
            off += (length + 3) & ~3
            if length < 16:
                break
        if 2 in kinds or 3 in kinds or not flags & NLM_F_DUMP:
            break
    s.close()
    return count


def setup():
    sh("ip link set lo up",
       "ip link add fz-br0 type bridge",
       "ip link add fz-v0 mtu 1400 type veth peer name fz-v1",
       "ip link set fz-v0 master fz-br0 && ip link set fz-v0 up && ip link set fz-br0 up",
       "ip link add fz-d0 type veth peer name fz-d1 && ip link set fz-d0 up address 02:00:00:00:00:01",
       "ip link set fz-d1 up",
       "ip link add fz-ifb0 type ifb",
       "ip addr add 10.88.0.1/16 dev fz-br0",
       "ip addr add fd00:88::1/64 dev fz-br0 nodad",
       "ip addr add 10.1.0.5/24 dev fz-d0",
       "ip route add 192.168.0.0/24 via 10.88.0.2 mtu 1300 advmss 1260 metric 10",
       "ip route add default via 10.1.0.1 table 100",
       "ip -6 route add fd01::/64 via fd00:88::2 dev fz-br0",
       "ip route add 172.16.0.0/12 nexthop via 10.88.0.3 weight 1 nexthop via 10.1.0.3 weight 2",
       "ip rule add from 10.1.0.0/16 table 100 pref 100",
       "ip neigh add 10.88.0.9 lladdr 02:00:00:00:00:09 dev fz-br0 nud permanent",
       "tc qdisc add dev fz-d0 root tbf rate 1mbit burst 32kbit latency 400ms",
       "tc qdisc add dev fz-v0 ingress",
       "tc filter add dev fz-v0 parent ffff: protocol all u32 match u32 0 0 "
       "action mirred egress redirect dev fz-ifb0")
    ruleset = """
table inet fz-portmap {
  set hostports {
    type inet_proto . inet_service
    elements = { tcp . 8080, udp . 53 }
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    fib daddr type local meta l4proto . th dport @hostports counter jump to-ctr comment "fz-ctr-1"
  }
  chain to-ctr {
    ip daddr 127.0.0.1 tcp dport 8080 dnat ip to 10.88.0.2:80
    ip6 daddr ::1 udp dport 53 dnat ip6 to [fd00:88::2]:53
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr 10.88.0.0/16 ip daddr != 10.88.0.0/16 masquerade
  }
}
table ip fz-firewall {
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "fz-br0" oifname != "fz-br0" accept
    meta mark & 0x2000 == 0x2000 counter drop
  }
  chain input {
    type filter hook input priority 0;
    ct state new counter accept
  }
  chain output {
    type filter hook output priority 0;
    ct state new counter accept
  }
}
"""
    subprocess.run(["nft", "-f", "-"], input=ruleset.encode(), check=True)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for port in (5353, 5354):
        u.sendto(b"x", ("127.0.0.1", port))
    t = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    t.sendto(b"y", ("::1", 9))


def capture():
    rt = socket.NETLINK_ROUTE
    seq = 100
    dumps = [
        (18, struct.pack("=BxHiII", 0, 0, 0, 0, 0)),           # RTM_GETLINK, ifinfomsg
        (22, struct.pack("=BBBBI", 0, 0, 0, 0, 0)),             # RTM_GETADDR, ifaddrmsg
        (26, struct.pack("=BBBBBBBBI", 0, 0, 0, 0, 0, 0, 0, 0, 0)),  # RTM_GETROUTE, rtmsg
        (30, struct.pack("=BxxxiHBB", 0, 0, 0, 0, 0)),          # RTM_GETNEIGH, ndmsg
        (34, struct.pack("=BBBBBBBBI", 0, 0, 0, 0, 0, 0, 0, 0, 0)),  # RTM_GETRULE
        (38, struct.pack("=BxxxiIII", 0, 0, 0, 0, 0)),          # RTM_GETQDISC, tcmsg
    ]
    total = 0
    for kind, body in dumps:
        seq += 1
        total += conversation(rt, kind, NLM_F_REQUEST | NLM_F_DUMP, body, "rtnetlink", seq)
    index = socket.if_nametoindex("fz-v0")
    seq += 1
    total += conversation(rt, 46, NLM_F_REQUEST | NLM_F_DUMP,
                          struct.pack("=BxxxiIII", 0, index, 0, 0xFFFF0000, 0), "rtnetlink", seq)
    # Errors with extended acks: a link that does not exist, a route to nowhere.
    seq += 1
    total += conversation(rt, 17, NLM_F_REQUEST | NLM_F_ACK, struct.pack("=BxHiII", 0, 0, 99999, 0, 0),
                          "rtnetlink", seq)
    seq += 1
    total += conversation(rt, 24, NLM_F_REQUEST | NLM_F_ACK | 0x400,
                          struct.pack("=BBBBBBBBI", 2, 33, 0, 0, 254, 4, 0, 1, 0), "rtnetlink", seq)
    print(f"rtnetlink: {total} datagrams")

    nf = 12  # NETLINK_NETFILTER
    total = 0
    for msg in (1, 4, 7):  # NFT_MSG_GETTABLE, GETCHAIN, GETRULE
        seq += 1
        total += conversation(nf, (10 << 8) | msg, NLM_F_REQUEST | NLM_F_DUMP, struct.pack("=BBH", 0, 0, 0),
                              "nfnetlink", seq)
    for family in (2, 10):  # conntrack, IPCTNL_MSG_CT_GET
        seq += 1
        total += conversation(nf, (1 << 8) | 1, NLM_F_REQUEST | NLM_F_DUMP, struct.pack("=BBH", family, 0, 0),
                              "nfnetlink", seq)
    # An error: deleting a table that does not exist (NFT_MSG_DELTABLE, NFTA_TABLE_NAME).
    name = b"fz-none\0"
    attr = struct.pack("=HH", 4 + len(name), 1) + name + b"\0" * ((4 - len(name) % 4) % 4)
    seq += 1
    total += conversation(nf, (10 << 8) | 2, NLM_F_REQUEST | NLM_F_ACK, struct.pack("=BBH", 1, 0, 0) + attr,
                          "nfnetlink", seq)
    print(f"nfnetlink: {total} datagrams")


if __name__ == "__main__":
    if sys.argv[1:] != ["--inside"]:
        sys.exit("run as: unshare --net python3 fuzz/seeds/capture_netlink.py --inside")
    setup()
    capture()
