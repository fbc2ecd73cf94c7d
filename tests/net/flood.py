#!/usr/bin/env python3
"""Floods an Ethernet interface with frames a RoCE NIC must drop: every kind of bad input a rox
port has a counter for, plus well-formed RoCEv2 packets to a QP that does not exist and with a
wrong P_Key, and a broadcast/multicast flood. Runs on the host inside a lab network namespace,
on an interface attached to the same bridge as the target NIC (a raw AF_PACKET socket).

    flood.py --iface IF --dst-mac MAC --dst-ip A.B.C.D --target-mtu MTU [--seconds S]
             [--until FILE] [--rate FRAMES_PER_S]
    flood.py --pcap FILE [--kinds K,K...] --dst-mac MAC --dst-ip A.B.C.D   (one frame per kind)

Prints how many frames of each kind it sent (`FLOOD <kind> <count>`), so a test can compare
them with the target's `rdma statistic` counters. --pcap writes one frame of each kind to a
pcap instead (e.g. for rox-pcap-check, which recomputes their ICRCs as rox-nic does).
"""
import os
import argparse
import random
import socket
import struct
import time
import zlib

ROCE_PORT = 4791
ETH_P_IP, ETH_P_IPV6, ETH_P_8021Q = 0x0800, 0x86DD, 0x8100
ETH_HEADER_LEN = 14
# A Linux bridge forwards a frame to a port of MTU M if it is at most M + 14 + 4 bytes (room
# for an 802.1Q tag): oversize frames are that long, the longest over M the target can see.
BRIDGE_MTU_SLACK = 4
# An ethertype for local experiments (IEEE 802 "Local Experimental Ethertype 1").
ETH_P_LOCAL_EXPERIMENTAL = 0x88B5
BTH_OPCODE_UD_SEND_ONLY = 0x64
BTH_OPCODE_RC_SEND_ONLY = 0x04
DEFAULT_PKEY = 0xFFFF


def mac_bytes(mac):
    return bytes(int(x, 16) for x in mac.split(":"))


def ip_checksum(header):
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4_header(src, dst, payload_len, options=b""):
    ihl = 5 + len(options) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + payload_len, 0, 0x4000, 64, 17, 0,
                    socket.inet_aton(src), socket.inet_aton(dst)) + options
    return h[:10] + struct.pack("!H", ip_checksum(h)) + h[12:]


def icrc(ip_hdr, udp_hdr, bth_and_payload):
    """RoCEv2 invariant CRC (IBA annex 17): CRC-32 over 8 bytes of ones standing in for the
    LRH, then the packet with the variant fields masked to ones: IPv4 TOS, TTL and header
    checksum, the UDP checksum and the BTH's resv8a byte. Stored little-endian."""
    ip = bytearray(ip_hdr)
    ip[1] = 0xFF
    ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"
    bth = bytearray(bth_and_payload)
    bth[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth)))


def roce_frame(dst_mac, src_mac, src_ip, dst_ip, opcode, dest_qpn, pkey=DEFAULT_PKEY, qkey=None,
               payload=b"x" * 32, bad_icrc=False, options=b""):
    bth = struct.pack("!BBHI I", opcode, 0, pkey, dest_qpn & 0xFFFFFF, 0x80000000 | 1)
    ext = struct.pack("!II", qkey, 0x1234) if qkey is not None else b""  # DETH for UD
    body = bth + ext + payload
    udp_len = 8 + len(body) + 4
    ip_hdr = ipv4_header(src_ip, dst_ip, udp_len, options)
    udp_hdr = struct.pack("!HHHH", 49152, ROCE_PORT, udp_len, 0)
    crc = icrc(ip_hdr, udp_hdr, body)
    if bad_icrc:
        crc = bytes(b ^ 0x5A for b in crc)
    return dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + ip_hdr + udp_hdr + body + crc


def garbage(rnd):
    """60 random bytes after an IPv4 ethertype, whose first byte is not an IPv4 version/IHL."""
    body = bytearray(rnd.getrandbits(8) for _ in range(60))
    body[0] = 0x00
    return bytes(body)


def kinds(dst_mac, src_mac, dst_ip, src_ip, mtu):
    """(name, frame factory) for each kind of bad input."""
    other_mac = b"\x02\x00\x00\xaa\xbb\xcc"
    rnd = random.Random(7)
    ud = dict(opcode=BTH_OPCODE_UD_SEND_ONLY, qkey=0x11111111)
    oversize_len = mtu + ETH_HEADER_LEN + BRIDGE_MTU_SLACK
    oversize_payload = oversize_len - len(roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1,
                                                     payload=b"", **ud))
    return [
        ("truncated", lambda: dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + b"\x45\x00\x00"),
        ("garbage", lambda: dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + garbage(rnd)),
        ("bad_icrc", lambda: roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1, bad_icrc=True, **ud)),
        ("unknown_qp", lambda: roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=0xABCDE, **ud)),
        ("bad_pkey", lambda: roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1, pkey=0x1234, **ud)),
        ("ipv4_options", lambda: roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1,
                                            options=b"\x01\x01\x01\x00", **ud)),
        ("vlan", lambda: dst_mac + src_mac + struct.pack("!HH", ETH_P_8021Q, 7) +
            roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1, **ud)[12:]),
        ("other_mac", lambda: roce_frame(other_mac, src_mac, src_ip, dst_ip, dest_qpn=1, **ud)),
        # Longer than the target's MTU by 4 bytes (the most a bridge delivers to it); the
        # sending interface's MTU must be at least the target's + 4.
        ("oversize", lambda: roce_frame(dst_mac, src_mac, src_ip, dst_ip, dest_qpn=1,
                                        payload=b"o" * oversize_payload, **ud)),
        ("broadcast", lambda: b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_LOCAL_EXPERIMENTAL) +
            b"\x00" * 46),
        ("multicast", lambda: b"\x01\x00\x5e\x01\x02\x03" + src_mac +
            struct.pack("!H", ETH_P_LOCAL_EXPERIMENTAL) + b"\x00" * 46),
    ]


def write_pcap(path, frames):
    """A classic pcap (microsecond timestamps, Ethernet link type) of `frames`."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(frame), len(frame)) + frame)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iface")
    ap.add_argument("--dst-mac", required=True)
    ap.add_argument("--dst-ip", required=True)
    ap.add_argument("--src-ip", default="10.255.0.1")
    ap.add_argument("--target-mtu", type=int, default=1500,
                    help="the target's MTU: oversize frames exceed it (default 1500)")
    ap.add_argument("--seconds", type=float, default=10, help="flood this long at most (default 10)")
    ap.add_argument("--until", metavar="FILE", help="stop early once FILE exists")
    ap.add_argument("--pcap", metavar="FILE", help="write one frame of each kind to FILE and exit")
    ap.add_argument("--kinds", help="comma list of kinds (default: all)")
    ap.add_argument("--rate", type=float, default=2000, help="frames per second (default 2000)")
    ap.add_argument("--self-test", action="store_true", help="print one frame of each kind in hex and exit")
    a = ap.parse_args()
    dst_mac = mac_bytes(a.dst_mac)
    src_mac = b"\x02\x00\x00\x00\xf1\x00"
    ks = kinds(dst_mac, src_mac, a.dst_ip, a.src_ip, a.target_mtu)
    if a.kinds:
        wanted = a.kinds.split(",")
        unknown = set(wanted) - {name for name, _ in ks}
        if unknown:
            ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
        ks = [(name, make) for name, make in ks if name in wanted]
    if a.self_test:
        for name, make in ks:
            print(name, make().hex())
        return
    if a.pcap:
        write_pcap(a.pcap, [make() for _, make in ks])
        return
    if not a.iface:
        ap.error("--iface is required to flood")
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    sent = {name: 0 for name, _ in ks}
    frames = [(name, make()) for name, make in ks]
    start = time.monotonic()
    end = start + a.seconds
    period = 1.0 / a.rate
    next_at = start
    i = 0
    while time.monotonic() < end:
        if a.until and i % 100 == 0 and os.path.exists(a.until):
            break
        name, frame = frames[i % len(frames)]
        try:
            s.send(frame)
            sent[name] += 1
        except OSError as e:  # a frame over the interface MTU: the kernel refuses it
            sent.setdefault(f"refused_{name}", 0)
            if sent[f"refused_{name}"] == 0:
                print(f"flood: {name}: {e}", flush=True)
            sent[f"refused_{name}"] += 1
        i += 1
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    print(f"FLOOD seconds {time.monotonic() - start:.1f}", flush=True)
    for name, n in sent.items():
        print(f"FLOOD {name} {n}", flush=True)


if __name__ == "__main__":
    main()
