#!/usr/bin/env python3
"""An ICRC check independent of rox-nic's code: recomputes the RoCEv2 invariant CRC (IBA annex
17) of every RoCEv2 frame (IPv4 and IPv6) in an Ethernet pcap, written from the specification in
Python, and compares it with the ICRC the frame carries.

    tests/host/icrc-check.py FILE [--min-roce N]

Prints one line (frames, RoCEv2 frames, IPv4/IPv6, mismatches); exits 1 on any mismatch or
fewer than N RoCEv2 frames (default 1). tests/host/tshark-capture.sh runs it on the roce_capture
pcap; rox-pcap-check does the same with rox-nic's own function.
"""
import argparse
import struct
import sys
import zlib

ROCE_PORT = 4791
ETH_HEADER_LEN = 14
IPV4_HEADER_LEN = 20
IPV6_HEADER_LEN = 40
UDP_HEADER_LEN = 8
ICRC_LEN = 4
PCAP_MAGIC = 0xA1B2C3D4
# The LRH a RoCEv2 packet lacks counts as 8 bytes of ones.
MASKED_LRH = b"\xff" * 8


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack_from("<I", data, 0)
    if magic != PCAP_MAGIC:
        sys.exit(f"icrc-check: {path}: not a little-endian classic pcap")
    at = 24
    while at + 16 <= len(data):
        captured, = struct.unpack_from("<I", data, at + 8)
        yield data[at + 16:at + 16 + captured]
        at += 16 + captured


def icrc_of(ip_packet, ip_len):
    """The ICRC of an IP packet without its ICRC: the variant fields set to ones (IPv4: TOS,
    TTL, header checksum; IPv6: traffic class, flow label, hop limit; UDP checksum; BTH resv8a)."""
    p = bytearray(ip_packet)
    if ip_len == IPV4_HEADER_LEN:
        p[1] = 0xFF
        p[8] = 0xFF
        p[10:12] = b"\xff\xff"
    else:
        p[0] |= 0x0F
        p[1:4] = b"\xff\xff\xff"
        p[7] = 0xFF
    p[ip_len + 6:ip_len + 8] = b"\xff\xff"
    p[ip_len + UDP_HEADER_LEN + 4] = 0xFF
    return zlib.crc32(MASKED_LRH + bytes(p))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--min-roce", type=int, default=1)
    a = ap.parse_args()
    total = roce = v6 = bad = 0
    for n, frame in enumerate(frames(a.file), 1):
        total += 1
        ethertype, = struct.unpack_from("!H", frame, 12)
        ip = frame[ETH_HEADER_LEN:]
        if ethertype == 0x0800 and len(ip) >= IPV4_HEADER_LEN and ip[0] == 0x45 and ip[9] == 17:
            ip_len, length = IPV4_HEADER_LEN, struct.unpack_from("!H", ip, 2)[0]
        elif ethertype == 0x86DD and len(ip) >= IPV6_HEADER_LEN and ip[6] == 17:
            ip_len, length = IPV6_HEADER_LEN, IPV6_HEADER_LEN + struct.unpack_from("!H", ip, 4)[0]
        else:
            continue
        if len(ip) < ip_len + UDP_HEADER_LEN or struct.unpack_from("!H", ip, ip_len + 2)[0] != ROCE_PORT:
            continue
        roce += 1
        v6 += ip_len == IPV6_HEADER_LEN
        packet = ip[:length]
        stored, = struct.unpack("<I", packet[-ICRC_LEN:])
        computed = icrc_of(packet[:-ICRC_LEN], ip_len)
        if stored != computed:
            bad += 1
            if bad <= 10:
                print(f"icrc-check: frame {n}: ICRC {stored:#010x}, computed {computed:#010x}")
    print(f"icrc-check: {total} frames, {roce} RoCEv2 ({roce - v6} IPv4, {v6} IPv6), {bad} with"
          f" an ICRC other than the one computed here")
    sys.exit(1 if bad or roce < a.min_roce else 0)


if __name__ == "__main__":
    main()
