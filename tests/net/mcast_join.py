#!/usr/bin/env python3
"""mcast_join.py GROUP NETDEV: hold an IP-level membership of multicast GROUP (IPv4 or IPv6)
on NETDEV for an hour (until killed); prints "joined" once it holds (tests/net/mcast.sh)."""
import socket, struct, sys, time
group, ifindex = sys.argv[1], socket.if_nametoindex(sys.argv[2])
if ":" in group:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                 socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", ifindex))
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # struct ip_mreqn: group, local address (any), interface index
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(group) + bytes(4) + struct.pack("@i", ifindex))
print("joined", flush=True)
time.sleep(3600)
