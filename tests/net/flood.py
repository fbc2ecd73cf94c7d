#!/usr/bin/env python3
"""Floods an Ethernet interface with frames a RoCE NIC must drop: every kind of bad input a rox
port has a counter for, plus well-formed RoCEv2 packets to a QP that does not exist and with a
wrong P_Key, and a broadcast/multicast flood. Runs on the host inside a lab network namespace,
on an interface attached to the same bridge as the target NIC (a raw AF_PACKET socket).

Every frame is made when it is sent, at random within its kind (lengths, payloads, QPNs,
P_Keys, VLAN IDs, MACs, IPv4 options, which IPv4/UDP header field is wrong...) from one seeded
generator: the seed is printed (`FLOOD seed N`) and --seed N replays the same frames.

    flood.py --iface IF --dst-mac MAC --dst-ip A.B.C.D --target-mtu MTU [--seconds S]
             [--until FILE] [--rate FRAMES_PER_S] [--seed N] [--drops-of IF,IF...]
    flood.py --pcap FILE [--kinds K,K...] [--per-kind N] --dst-mac MAC --dst-ip A.B.C.D
    flood.py --iface IF --dst-mac MAC --dst-ip A.B.C.D --src-ip PEER --live-qp QPN --live-psn PSN
             [--per-kind N] [--seed N] [--drops-of IF,IF...]

Prints how many frames of each kind it sent (`FLOOD <kind> <count>`), so a test can compare
them with the target's `rdma statistic` counters, and (--drops-of) `FLOOD path_dropped N`: the
frames the named interfaces (the sending one, the target's tap) dropped meanwhile, which
never reached the target. --pcap writes N frames of each kind to a pcap instead (e.g. for
rox-pcap-check, which recomputes their ICRCs as rox-nic does).

--live-qp: frames aimed at a live RC QP of a connection (its number and its responder's
expected PSN given), from the connection's peer address PEER: N of each kind in random order
(live_kinds), each a request a conforming responder must not execute: a SEND far ahead of the
expected PSN (sequence error: counted, NAKed), a SEND and an RDMA WRITE with a random R_Key far
behind it (duplicates: re-acknowledged, never executed, the R_Key never checked), and at the
expected PSN itself an unknown opcode, a WRITE cut inside its RETH and a SEND with a bad ICRC
(dropped before the QP sees them).
"""
import argparse
import json
import os
import random
import socket
import struct
import subprocess
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
# P_Key bits that name the partition (bit 15 is the membership type).
PKEY_PARTITION_MASK = 0x7FFF
# QPNs rox never hands out to a guest this small (its QPNs count up from 2).
UNKNOWN_QPN_MIN = 0x10000
# The multicast QPN (UD to a group): not an unknown QP.
MULTICAST_QPN = 0xFFFFFF
IPV4_FLAG_MORE_FRAGMENTS = 0x2000
# Largest random payload of the RoCE kinds (a multiple of 4: BTH pad count 0 stays right).
MAX_PAYLOAD = 1024


def mac_bytes(mac):
    return bytes(int(x, 16) for x in mac.split(":"))


def ip_checksum(header):
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4_header(src, dst, payload_len, options=b"", flags_fragment=0x4000):
    ihl = 5 + len(options) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + payload_len, 0, flags_fragment, 64,
                    17, 0, socket.inet_aton(src), socket.inet_aton(dst)) + options
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
               payload=b"x" * 32, icrc_xor=0, options=b""):
    bth = struct.pack("!BBHI I", opcode, 0, pkey, dest_qpn & 0xFFFFFF, 0x80000000 | 1)
    ext = struct.pack("!II", qkey, 0x1234) if qkey is not None else b""  # DETH for UD
    body = bth + ext + payload
    udp_len = 8 + len(body) + 4
    ip_hdr = ipv4_header(src_ip, dst_ip, udp_len, options)
    udp_hdr = struct.pack("!HHHH", 49152, ROCE_PORT, udp_len, 0)
    crc = icrc(ip_hdr, udp_hdr, body)
    if icrc_xor:
        crc = struct.pack("<I", struct.unpack("<I", crc)[0] ^ icrc_xor)
    return dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + ip_hdr + udp_hdr + body + crc


def payload(rnd, most=MAX_PAYLOAD):
    """Random bytes, a random multiple of 4 long (0..most)."""
    return rnd.randbytes(4 * rnd.randrange(most // 4 + 1))


def garbage(rnd):
    """20..200 random bytes after an IPv4 ethertype, whose first byte is neither an IPv4 nor an
    IPv6 version nibble."""
    body = bytearray(rnd.randbytes(rnd.randrange(20, 201)))
    body[0] = rnd.choice([v for v in range(256) if v >> 4 not in (4, 6)])
    return bytes(body)


def bad_ip(rnd, eth, src_ip, dst_ip, ud):
    """A RoCEv2 UD frame with one IPv4/UDP header field wrong (chosen at random): the header
    checksum, a total length past the frame, a UDP length that is not the IP payload's, or a
    first fragment (MF set). Every one is malformed to rox (and to rxe)."""
    good = roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=payload(rnd, 256), **ud)
    f = bytearray(good)
    ip, udp = ETH_HEADER_LEN, ETH_HEADER_LEN + 20
    how = rnd.randrange(4)
    if how == 0:
        f[ip + 10] ^= rnd.randrange(1, 256)  # header checksum
    elif how == 1:
        total = struct.unpack("!H", f[ip + 2:ip + 4])[0] + rnd.randrange(1, 64)
        f[ip + 2:ip + 4] = struct.pack("!H", total)
        f[ip + 10:ip + 12] = b"\0\0"
        f[ip + 10:ip + 12] = struct.pack("!H", ip_checksum(bytes(f[ip:ip + 20])))
    elif how == 2:
        udp_len = struct.unpack("!H", f[udp + 4:udp + 6])[0]
        f[udp + 4:udp + 6] = struct.pack("!H", udp_len + rnd.choice([-4, -1, 1, 4, 8]))
    else:
        f[ip + 6:ip + 8] = struct.pack("!H", IPV4_FLAG_MORE_FRAGMENTS)
        f[ip + 10:ip + 12] = b"\0\0"
        f[ip + 10:ip + 12] = struct.pack("!H", ip_checksum(bytes(f[ip:ip + 20])))
    return bytes(f)


def random_unicast_mac(rnd, not_this):
    while True:
        mac = bytes([rnd.randrange(256) & 0xFE | 0x02]) + rnd.randbytes(5)
        if mac != not_this:
            return mac


def kinds(dst_mac, src_mac, dst_ip, src_ip, mtu):
    """(name, frame factory) for each kind of bad input; a factory takes the random generator
    and makes one frame of its kind, different each time."""
    eth = (dst_mac, src_mac)
    ud = dict(opcode=BTH_OPCODE_UD_SEND_ONLY)

    def uqkey(rnd):
        return dict(ud, qkey=rnd.getrandbits(32))

    def oversize(rnd):
        # Longer than the target's MTU by 1 to 4 bytes (4: the most a bridge delivers to it);
        # the sending interface's MTU must be at least the target's + 4.
        length = mtu + ETH_HEADER_LEN + rnd.randrange(1, BRIDGE_MTU_SLACK + 1)
        empty = len(roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=b"", **uqkey(rnd)))
        return roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=rnd.randbytes(length - empty),
                          **uqkey(rnd))

    def bad_pkey(rnd):
        pkey = rnd.choice([p for p in (rnd.getrandbits(16) for _ in range(4))
                           if p & PKEY_PARTITION_MASK != PKEY_PARTITION_MASK] or [0x1234])
        return roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, pkey=pkey, payload=payload(rnd),
                          **uqkey(rnd))

    return [
        ("truncated", lambda rnd: dst_mac + src_mac + struct.pack("!H", ETH_P_IP) +
            bytes([0x45]) + rnd.randbytes(rnd.randrange(19))),
        ("garbage", lambda rnd: dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + garbage(rnd)),
        ("bad_ip", lambda rnd: bad_ip(rnd, eth, src_ip, dst_ip, uqkey(rnd))),
        ("bad_icrc", lambda rnd: roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=payload(rnd),
                                            icrc_xor=rnd.randrange(1, 1 << 32), **uqkey(rnd))),
        ("unknown_qp", lambda rnd: roce_frame(*eth, src_ip, dst_ip,
                                              dest_qpn=rnd.randrange(UNKNOWN_QPN_MIN, MULTICAST_QPN),
                                              payload=payload(rnd), **uqkey(rnd))),
        ("bad_pkey", bad_pkey),
        ("ipv4_options", lambda rnd: roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=payload(rnd, 256),
                                                options=rnd.randbytes(4 * rnd.randrange(1, 11)),
                                                **uqkey(rnd))),
        ("vlan", lambda rnd: dst_mac + src_mac +
            struct.pack("!HH", rnd.choice([ETH_P_8021Q, 0x88A8]), rnd.randrange(1, 1 << 16)) +
            roce_frame(*eth, src_ip, dst_ip, dest_qpn=1, payload=payload(rnd, 256), **uqkey(rnd))[12:]),
        ("other_mac", lambda rnd: roce_frame(random_unicast_mac(rnd, dst_mac), src_mac, src_ip, dst_ip,
                                             dest_qpn=1, payload=payload(rnd), **uqkey(rnd))),
        ("oversize", oversize),
        ("broadcast", lambda rnd: b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_LOCAL_EXPERIMENTAL) +
            rnd.randbytes(rnd.randrange(46, 300))),
        ("multicast", lambda rnd: b"\x01\x00\x5e" + bytes([rnd.randrange(128)]) + rnd.randbytes(2) +
            src_mac + struct.pack("!H", ETH_P_LOCAL_EXPERIMENTAL) + rnd.randbytes(rnd.randrange(46, 300))),
    ]


PSN_MODULUS = 1 << 24
# Far outside the window either way: a quarter of the PSN space ahead or behind.
PSN_FAR = 1 << 22
BTH_OPCODE_RC_WRITE_ONLY = 0x0A
# An RC opcode IBA reserves (0x18-0x1b): no device may take it.
BTH_OPCODE_RC_RESERVED = 0x19
RETH_LEN = 16


def rc_frame(eth, src_ip, dst_ip, opcode, qpn, psn, body, icrc_xor=0):
    """An RC request to `qpn` at `psn` with `body` after the BTH (AckReq set)."""
    bth = struct.pack("!BBHII", opcode, 0, DEFAULT_PKEY, qpn & 0xFFFFFF,
                      0x80000000 | (psn % PSN_MODULUS))
    payload = bth + body
    udp_len = 8 + len(payload) + 4
    ip_hdr = ipv4_header(src_ip, dst_ip, udp_len)
    udp_hdr = struct.pack("!HHHH", 49152, ROCE_PORT, udp_len, 0)
    crc = icrc(ip_hdr, udp_hdr, payload)
    if icrc_xor:
        crc = struct.pack("<I", struct.unpack("<I", crc)[0] ^ icrc_xor)
    return eth[0] + eth[1] + struct.pack("!H", ETH_P_IP) + ip_hdr + udp_hdr + payload + crc


def live_kinds(dst_mac, src_mac, dst_ip, src_ip, qpn, epsn):
    """(name, factory) of the frames aimed at the live RC QP `qpn` whose responder expects
    `epsn` (--live-qp)."""
    eth = (dst_mac, src_mac)

    def ahead(rnd):
        return epsn + PSN_FAR + rnd.randrange(1024)

    def behind(rnd):
        return epsn - PSN_FAR - rnd.randrange(1024)

    def reth(rnd, length):
        return struct.pack("!QII", rnd.getrandbits(64), rnd.getrandbits(32), length)

    def bad_rkey_write(rnd):
        data = payload(rnd, 256)
        return rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_WRITE_ONLY, qpn, behind(rnd),
                        reth(rnd, len(data)) + data)

    return [
        ("live_psn_ahead", lambda rnd: rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_SEND_ONLY, qpn,
                                                ahead(rnd), payload(rnd, 256))),
        ("live_psn_behind", lambda rnd: rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_SEND_ONLY, qpn,
                                                 behind(rnd), payload(rnd, 256))),
        ("live_bad_rkey_write", bad_rkey_write),
        ("live_unknown_opcode", lambda rnd: rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_RESERVED, qpn,
                                                     epsn, payload(rnd, 256))),
        ("live_truncated", lambda rnd: rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_WRITE_ONLY, qpn,
                                                epsn, rnd.randbytes(4 * rnd.randrange(RETH_LEN // 4)))),
        ("live_bad_icrc", lambda rnd: rc_frame(eth, src_ip, dst_ip, BTH_OPCODE_RC_SEND_ONLY, qpn, epsn,
                                               payload(rnd, 256), icrc_xor=rnd.randrange(1, 1 << 32))),
    ]


def send_live(a, rnd, dst_mac, src_mac):
    """--live-qp: --per-kind frames of each live kind, in random order, at --rate."""
    ks = live_kinds(dst_mac, src_mac, a.dst_ip, a.src_ip, a.live_qp, a.live_psn)
    order = [k for k in ks for _ in range(a.per_kind)]
    rnd.shuffle(order)
    drop_ifaces = a.drops_of.split(",") if a.drops_of else []
    drops_before = dropped(drop_ifaces)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    for name, make in order:
        s.send(make(rnd))
        time.sleep(1.0 / a.rate)
    time.sleep(1)  # frames still on the way have gone by now
    for name, _ in ks:
        print(f"FLOOD {name} {a.per_kind}", flush=True)
    print(f"FLOOD path_dropped {dropped(drop_ifaces) - drops_before}", flush=True)


def dropped(ifaces):
    """Frames the interfaces dropped on transmit (ip -s -j: namespace-correct)."""
    n = 0
    for iface in ifaces:
        out = subprocess.run(["ip", "-s", "-j", "link", "show", "dev", iface], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        n += json.loads(out)[0]["stats64"]["tx"]["dropped"]
    return n


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
    ap.add_argument("--pcap", metavar="FILE", help="write --per-kind frames of each kind to FILE and exit")
    ap.add_argument("--per-kind", type=int, default=1, help="frames of each kind in --pcap (default 1)")
    ap.add_argument("--kinds", help="comma list of kinds (default: all)")
    ap.add_argument("--rate", type=float, default=2000, help="frames per second (default 2000)")
    ap.add_argument("--seed", type=int, help="the generator's seed (default: a random one, printed)")
    ap.add_argument("--drops-of", help="comma list of interfaces whose transmit drops to report")
    ap.add_argument("--self-test", action="store_true", help="print one frame of each kind in hex and exit")
    ap.add_argument("--live-qp", type=lambda v: int(v, 0), help="aim the live kinds at this RC QP")
    ap.add_argument("--live-psn", type=lambda v: int(v, 0), help="the live QP's expected PSN")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "big")
    print(f"FLOOD seed {seed}", flush=True)
    rnd = random.Random(seed)
    dst_mac = mac_bytes(a.dst_mac)
    src_mac = b"\x02\x00\x00\x00\xf1\x00"
    if a.live_qp is not None:
        if a.live_psn is None or not a.iface:
            ap.error("--live-qp needs --live-psn and --iface")
        send_live(a, rnd, dst_mac, src_mac)
        return
    ks = kinds(dst_mac, src_mac, a.dst_ip, a.src_ip, a.target_mtu)
    if a.kinds:
        wanted = a.kinds.split(",")
        unknown = set(wanted) - {name for name, _ in ks}
        if unknown:
            ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
        ks = [(name, make) for name, make in ks if name in wanted]
    if a.self_test:
        for name, make in ks:
            print(name, make(rnd).hex())
        return
    if a.pcap:
        write_pcap(a.pcap, [make(rnd) for _, make in ks for _ in range(a.per_kind)])
        return
    if not a.iface:
        ap.error("--iface is required to flood")
    drop_ifaces = a.drops_of.split(",") if a.drops_of else []
    drops_before = dropped(drop_ifaces)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    sent = {name: 0 for name, _ in ks}
    start = time.monotonic()
    end = start + a.seconds
    period = 1.0 / a.rate
    next_at = start
    i = 0
    while time.monotonic() < end:
        if a.until and i % 100 == 0 and os.path.exists(a.until):
            break
        name, make = ks[rnd.randrange(len(ks))]
        try:
            s.send(make(rnd))
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
    # Frames still queued on the way have gone by now.
    time.sleep(1)
    print(f"FLOOD seconds {time.monotonic() - start:.1f}", flush=True)
    for name, n in sent.items():
        print(f"FLOOD {name} {n}", flush=True)
    print(f"FLOOD path_dropped {dropped(drop_ifaces) - drops_before}", flush=True)


if __name__ == "__main__":
    main()
