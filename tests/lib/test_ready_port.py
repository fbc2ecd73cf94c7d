"""ready_port.py on localhost: the port layout, and every answer a client can get."""
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ready_port  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Layout(unittest.TestCase):
    def test_soak_layout_stays_below_the_ephemeral_range_and_apart(self):
        jobs, readies = set(), set()
        for i in range(0, 200000, 7):
            job, ready = ready_port.job_ports(10000, 10000, 10000, i)
            self.assertLess(ready, ready_port.EPHEMERAL_FIRST)
            jobs.add(job)
            readies.add(ready)
        self.assertFalse(jobs & readies)

    def test_a_layout_reaching_the_ephemeral_range_is_refused(self):
        with self.assertRaises(ValueError):
            ready_port.job_ports(23000, 20000, 20000, 0)  # the old layout
        with self.assertRaises(ValueError):
            ready_port.job_ports(10000, 10000, 5000, 0)  # job and ready ports overlap


class Protocol(unittest.TestCase):
    def serve(self, port, listening, running, limit_s=10):
        ann = ready_port.Announcer(port)
        t = threading.Thread(target=ann.serve, args=(listening, running, limit_s, 0.01))
        t.start()
        return ann, t

    def test_ready_once_the_program_listens(self):
        port = free_port()
        t0 = time.monotonic()
        ann, t = self.serve(port, lambda: time.monotonic() - t0 > 0.3, lambda: True)
        self.assertIsNone(ready_port.wait("127.0.0.1", port, 10, 0.05))
        self.assertGreater(time.monotonic() - t0, 0.3)
        t.join()
        self.assertIsNone(ann.error)

    def test_a_program_that_ends_first_fails_the_client_at_once(self):
        port = free_port()
        ann, t = self.serve(port, lambda: False, lambda: False)
        t0 = time.monotonic()
        why = ready_port.wait("127.0.0.1", port, 60, 0.05)
        self.assertLess(time.monotonic() - t0, 30)  # not its 60 s deadline
        self.assertIn("ended before it listened", why)
        t.join()

    def test_a_taken_ready_port_fails_the_server_at_once(self):
        with socket.create_server(("", 0)) as holder:
            port = holder.getsockname()[1]
            with self.assertRaises(OSError):
                ready_port.Announcer(port)

    def test_a_client_before_the_server_retries_until_it_comes(self):
        port = free_port()
        result = []
        c = threading.Thread(target=lambda: result.append(
            ready_port.wait("127.0.0.1", port, 10, 0.05)))
        c.start()
        time.sleep(0.3)
        _, t = self.serve(port, lambda: True, lambda: True)
        c.join()
        t.join()
        self.assertEqual(result, [None])

    def test_nobody_there_fails_after_the_deadline(self):
        why = ready_port.wait("127.0.0.1", free_port(), 0.3, 0.05)
        self.assertIn("opened no ready port", why)

    def test_a_closed_connection_without_answer_fails(self):
        with socket.create_server(("127.0.0.1", 0)) as srv:
            port = srv.getsockname()[1]

            def close_at_once():
                srv.accept()[0].close()
            t = threading.Thread(target=close_at_once)
            t.start()
            why = ready_port.wait("127.0.0.1", port, 10, 0.05)
            t.join()
        self.assertIn("nothing (connection closed)", why)


if __name__ == "__main__":
    unittest.main()
