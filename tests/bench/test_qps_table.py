#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of qps_table.py:  python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qps_table  # noqa: E402

MSG = 12800
BYTES = MSG * 8192  # 100 MiB


def client(run, q, bw, tx=25600, rx=12800, probes=0):
    return (f"[g0] QPS run={run} qps={q} messages={MSG} bytes={BYTES} bw_MiBps={bw} tx_packets={tx} "
            f"rx_packets={rx} retransmits=0 local_ack_timeout_err=0 roce_adp_retrans={probes} "
            "port_xmit_discards=0 wakeups=2 doorbell_scans=100 interrupts=50")


def server(run, q, acks):
    return (f"[g1] QPSRX run={run} qps={q} rx_packets=25600 tx_packets={acks} acks_sent={acks} "
            "duplicate_request=0 out_of_sequence=0 wakeups=4 doorbell_scans=10 interrupts=7")


LAB = "\n".join([
    "noise QPS without a run",
    client(1, 16, "800.00"), server(1, 16, 6400),
    server(2, 256, 12800), client(2, 256, "400.00", rx=12800),
    client(3, 16, "600.00"), server(3, 16, 6400),
    client(4, 256, "900.00", probes=3), server(4, 256, 12800),
    client(5, 16, "700.00"), server(5, 16, 6400),
    client(6, 256, "700.00"), server(6, 256, 12800),
])


class ParseTest(unittest.TestCase):
    def test_runs_in_order_with_both_sides(self):
        runs = qps_table.parse(LAB)
        self.assertEqual([r["qps"] for r in runs], [16, 256] * 3)
        self.assertEqual(runs[3]["c"]["roce_adp_retrans"], 3)
        self.assertEqual(runs[1]["s"]["acks_sent"], 12800)
        self.assertEqual(runs[0]["bw"], 800.0)

    def test_a_run_the_client_did_not_finish_is_left_out(self):
        runs = qps_table.parse(server(1, 16, 6400) + "\n" + client(2, 256, "1.5") + "\n" + server(2, 256, 1))
        self.assertEqual([r["run"] for r in runs], [2])


def base(run, q, messages, wakeups, rx_s):
    return (f"[g0] QPS run={run} qps={q} base=1 messages={messages} bytes={messages * 8192} bw_MiBps=5.0 "
            f"tx_packets={2 * messages} rx_packets=1 wakeups={wakeups} doorbell_scans=1 interrupts=1\n"
            f"[g1] QPSRX run={run} qps={q} base=1 rx_packets={rx_s} acks_sent=1 wakeups={wakeups} "
            "doorbell_scans=1 interrupts=1")


class BaseTest(unittest.TestCase):
    def test_the_base_run_is_taken_off_the_per_mib_counts(self):
        # 256 QPs x 10 messages = 2560 (20 MiB) with 2000 wakeups of setup; the timed run
        # 12800 messages (100 MiB) with 2800 wakeups: 800 for 80 MiB of transfer.
        text = base(1, 256, 2560, 2000, 5120) + "\n" + client(2, 256, "500.0").replace("wakeups=2", "wakeups=2800") \
            + "\n" + server(2, 256, 12800)
        runs = qps_table.net_of_base(qps_table.parse(text))
        self.assertEqual([r["run"] for r in runs], [2])
        self.assertEqual(qps_table.per_mib(runs[0], "c", "wakeups"), 10.0)
        self.assertEqual(qps_table.per_mib(runs[0], "s", "rx_packets"), 256.0)  # (25600 - 5120) / 80
        lines = qps_table.table([("x#1", qps_table.parse(text))])
        self.assertTrue(any(x.split()[:4] == ["x#1", "1", "256", "2560"] for x in lines), lines)


def hostcpu(run, at, nic0, nic1, qemu0=0, qemu1=0):
    """A HOSTCPU line as qps_hostcpu.py writes it (ns)."""
    return f"HOSTCPU run={run} at={at} nic0={nic0} nic1={nic1} qemu0={qemu0} qemu1={qemu1}"


class HostCpuTest(unittest.TestCase):
    def test_each_runs_host_cpu_is_its_end_less_its_start_per_mib_net_of_its_base(self):
        # Base run: 20 MiB, the client's rox-nic ran 30 ms. Timed run: 100 MiB, 110 ms: 80 ms
        # for the 80 MiB of transfer, 1,000 µs a MiB; the server's 160 ms less 0: 2,000 µs.
        text = "\n".join([
            "[g0] QPSSTART run=1 qps=256 base=1", hostcpu(1, "start", 5_000_000, 7_000_000),
            base(1, 256, 2560, 2000, 5120), hostcpu(1, "end", 35_000_000, 7_000_000),
            hostcpu(2, "start", 35_000_000, 7_000_000, 1_000, 2_000),
            client(2, 256, "500.0"), server(2, 256, 12800),
            hostcpu(2, "end", 145_000_000, 167_000_000, 3_001_000, 2_000),
        ])
        runs = qps_table.parse(text)
        self.assertEqual(runs[0]["h"], {"nic0": 30_000, "nic1": 0, "qemu0": 0, "qemu1": 0})
        self.assertEqual(runs[1]["h"]["qemu0"], 3_000)
        net = qps_table.net_of_base(runs)
        self.assertEqual(qps_table.per_mib(net[0], "h", "nic0"), 1000.0)
        self.assertEqual(qps_table.per_mib(net[0], "h", "nic1"), 2000.0)
        self.assertEqual(qps_table.per_mib(net[0], "h", "qemu0"), 3000 / 80)

    def test_a_run_without_both_marks_has_no_host_cpu(self):
        text = hostcpu(1, "start", 1, 1) + "\n" + client(1, 16, "10.0") + "\n" + server(1, 16, 1)
        runs = qps_table.parse(text)
        self.assertEqual(runs[0]["h"], {})
        self.assertIsNone(qps_table.per_mib(runs[0], "h", "nic0"))
        self.assertTrue(any(" ? " in x for x in qps_table.table([("x#1", runs)])))


class SummaryTest(unittest.TestCase):
    def test_medians_of_alternated_runs_and_per_mib_counts(self):
        s = qps_table.summary(qps_table.net_of_base(qps_table.parse(LAB)))
        self.assertEqual(list(s), [16, 256])
        bw16, per16, n16 = s[16]
        bw256, per256, _ = s[256]
        self.assertEqual((bw16, bw256, n16), (700.0, 700.0, 3))
        self.assertEqual(per16["s_acks"], 64.0)  # 6400 ACKs over 100 MiB
        self.assertEqual(per256["s_acks"], 128.0)
        self.assertEqual(per16["c_tx"], 256.0)

    def test_table_prints_every_run_and_the_ratio_of_medians(self):
        runs = qps_table.parse(LAB)
        lines = qps_table.table([("main#1", runs)])
        self.assertEqual(sum(1 for x in lines if x.startswith("main#1") and " 400.00 " in x), 1)
        median_rows = [x.split() for x in lines[lines.index(next(x for x in lines if x.startswith("medians"))) + 2:]]
        self.assertEqual([r[:5] for r in median_rows], [["main#1", "16", "3", "700.00", "1.00"],
                                                         ["main#1", "256", "3", "700.00", "1.00"]])


class PooledTest(unittest.TestCase):
    def test_labs_of_one_binary_are_pooled_with_each_labs_ratio(self):
        other = LAB.replace("bw_MiBps=800.00", "bw_MiBps=100.00")  # lab 2: 16 QPs 100, 600, 700
        lines = qps_table.table([("main#1", qps_table.parse(LAB)), ("main#2", qps_table.parse(other))])
        start = lines.index(next(x for x in lines if x.startswith("medians over every lab")))
        rows = [x.split() for x in lines[start + 2:]]
        # 16 QPs over both labs: 100 600 600 700 700 800 -> 650; 256: 400 400 700 700 900 900 -> 700.
        self.assertEqual(rows[0][:6], ["main", "16", "6", "650.00", "1.00", "0.50"])
        self.assertEqual(rows[1][:5], ["main", "256", "6", "700.00", "1.08"])
        self.assertEqual(rows[1][6:], ["1.00", "1.17"], "each lab's own ratio: 700 / 700, 700 / 600")
        # 16 QPs: 100 600 600 700 700 800; 256: 400 400 700 700 900 900. Of the 36 pairs:
        # a 400 beats 100 only (1), a 700 beats 100, 600, 600 and ties 700 twice (4), a 900
        # beats all six.
        self.assertEqual(rows[1][5], f"{(2 * 1 + 2 * 4 + 2 * 6) / 36:.2f}")

    def test_wins_count_pairs_of_single_runs_ties_half(self):
        runs = [{"qps": 16, "bw": 10.0}, {"qps": 16, "bw": 30.0}, {"qps": 256, "bw": 20.0}, {"qps": 256, "bw": 30.0}]
        self.assertEqual(qps_table.beats(runs, 256, 16), (1 + 0 + 1 + 0.5) / 4)
        self.assertIsNone(qps_table.beats(runs, 64, 16))

    def test_one_lab_per_binary_has_no_pooled_rows(self):
        lines = qps_table.table([("main#1", qps_table.parse(LAB)), ("after#2", qps_table.parse(LAB))])
        self.assertFalse(any(x.startswith("medians over every lab") for x in lines))


if __name__ == "__main__":
    unittest.main()
