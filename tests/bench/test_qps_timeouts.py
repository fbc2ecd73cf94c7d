#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of qps_timeouts.py:  python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qps_timeouts  # noqa: E402

# rox-trace's timeline, trimmed to what the script reads: a WRITE of QP 0x00e built by a at
# 100 us, taken by b at 300 us, its ACK built at 320 us; then b goes silent 12 ms and a times
# the QP out at 12,400 us.
PEER_HELD_ACK = """\
     100.000 us  a  qp 0x00e  frame out    psn=0x0000f5 WRITE_LAST 4096 B
     150.000 us  a            napped       40 us (asked 40 us)
     300.000 us  b  qp 0x00e  frame in     psn=0x0000f5 WRITE_LAST 4096 B
     320.000 us  b  qp 0x00e  frame out    psn=0x0000f5 ACK 0 B
    5000.000 us  a            napped       4800 us (asked 4800 us)
   12400.000 us  a  qp 0x00e  RETRANSMIT   from psn=0x0000f5 (ACK timeout)
   12500.000 us  b  qp 0x00e  frame in     psn=0x0000f5 WRITE_LAST 4096 B
"""

# The requester builds the packet and its thread goes silent for 20 ms inside the pass.
REQUESTER_HELD_PACKET = """\
     100.000 us  a  qp 0x003  frame out    psn=0x000010 WRITE_FIRST 4096 B
   20100.000 us  a  qp 0x003  RETRANSMIT   from psn=0x000010 (ACK timeout)
     500.000 us  b            napped       300 us (asked 300 us)
"""


def explain(text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        recs = sorted(qps_timeouts.parse(f.name), key=lambda r: r[0])
        return qps_timeouts.explain(recs)
    finally:
        os.unlink(f.name)


class ExplainTest(unittest.TestCase):
    def test_an_ack_built_before_the_timeout_then_a_silent_peer_is_the_peers_queue(self):
        rows = explain(PEER_HELD_ACK)
        self.assertEqual(len(rows), 1)
        t, qp, psn, why = rows[0]
        self.assertEqual((t, qp, psn), (12400.0, "0x00e", 0xF5))
        self.assertIn("taken +      200", why)
        self.assertIn("ACK built +      220", why)
        self.assertIn("peer's ACK waited in the peer", why)

    def test_a_requester_silent_right_after_building_the_packet_held_it_unsent(self):
        rows = explain(REQUESTER_HELD_PACKET)
        self.assertEqual(len(rows), 1)
        self.assertIn("requester stalled with p unsent", rows[0][3])


if __name__ == "__main__":
    unittest.main()
