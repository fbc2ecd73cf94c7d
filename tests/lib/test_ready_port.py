"""ready_port.py on localhost: the port layout, and every answer a client can get — each
failure told at once (well inside the deadlines given), never by waiting them out."""
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ready_port  # noqa: E402

# Deadlines the tests must never reach when a failure is to be told at once.
LONG_S = 60
AT_ONCE_S = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Layout(unittest.TestCase):
    def test_soak_layout_stays_below_the_ephemeral_range_and_apart(self):
        board = ready_port.board_port(10000, 10000)
        self.assertLess(board, ready_port.EPHEMERAL_FIRST)
        for i in range(0, 200000, 7):
            job = ready_port.job_port(10000, 10000, i)
            self.assertTrue(10000 <= job < 20000)
            self.assertNotEqual(job, board)

    def test_a_layout_reaching_the_ephemeral_range_is_refused(self):
        with self.assertRaises(ValueError):
            ready_port.job_port(23000, 20000, 0)
        with self.assertRaises(ValueError):
            ready_port.board_port(22768, 10000)  # jobs fit, the board would not


class Protocol(unittest.TestCase):
    def setUp(self):
        self.port = free_port()
        self.boards = []

    def tearDown(self):
        for b in self.boards:
            b.close()

    def board(self, heartbeat_s=0.05):
        b = ready_port.Board(self.port, heartbeat_s)
        self.boards.append(b)
        return b

    def client(self, first_contact_s=LONG_S, stall_s=LONG_S):
        return ready_port.Client("127.0.0.1", self.port, first_contact_s, stall_s, 0.05)

    def timed_wait(self, client, job, limit_s=LONG_S):
        t0 = time.monotonic()
        why = client.wait(job, limit_s)
        return why, time.monotonic() - t0

    def test_ready_once_the_server_posts_it(self):
        b = self.board()
        threading.Timer(0.3, b.post, args=(7, "ready")).start()
        why, took = self.timed_wait(self.client(), 7)
        self.assertIsNone(why)
        self.assertGreater(took, 0.25)

    def test_a_failed_job_fails_its_client_at_once_with_the_reason(self):
        b = self.board()
        b.post(7, "fail: cannot start the program")
        why, took = self.timed_wait(self.client(), 7)
        self.assertLess(took, AT_ONCE_S)
        self.assertIn("cannot start the program", why)

    def test_jobs_are_answered_apart(self):
        b = self.board()
        b.post(1, "fail: one")
        b.post(2, "ready")
        c = self.client()
        self.assertIn("one", c.wait(1, LONG_S))
        self.assertIsNone(c.wait(2, LONG_S))

    def test_a_client_before_the_board_retries_until_it_opens(self):
        threading.Timer(0.3, lambda: self.board().post(3, "ready")).start()
        self.assertIsNone(self.client().wait(3, LONG_S))

    def test_no_board_fails_after_the_first_contact_window(self):
        why, took = self.timed_wait(self.client(first_contact_s=0.3), 3)
        self.assertIn("opened no board", why)
        self.assertLess(took, AT_ONCE_S)

    def test_a_board_gone_after_the_first_contact_fails_at_once(self):
        # The case the per-job ready port could not tell: the server's side cannot answer
        # (here: its board is gone) and the client would wait out its first-contact window.
        b = self.board()
        b.post(1, "ready")
        c = self.client()
        self.assertIsNone(c.wait(1, LONG_S))
        b.close()
        why, took = self.timed_wait(c, 2)
        self.assertLess(took, AT_ONCE_S)
        self.assertIn("board", why)
        self.assertIn("is gone", why)

    def test_a_board_closed_while_the_client_waits_fails_at_once(self):
        b = self.board()
        threading.Timer(0.3, b.close).start()
        why, took = self.timed_wait(self.client(), 5)
        self.assertLess(took, AT_ONCE_S)
        self.assertIn("closed without an answer", why)

    def test_a_job_the_server_never_reaches_fails_at_the_limit(self):
        self.board()
        why, took = self.timed_wait(self.client(), 5, limit_s=0.5)
        self.assertIn("did not reach it", why)
        self.assertLess(took, AT_ONCE_S)

    def test_a_taken_board_port_fails_the_server_at_once(self):
        with socket.create_server(("", 0)) as holder:
            self.port = holder.getsockname()[1]
            with self.assertRaises(OSError):
                self.board()

    def test_a_silent_stranger_on_the_port_fails_after_the_stall_time(self):
        with socket.create_server(("127.0.0.1", self.port)):  # listens, never answers
            why, took = self.timed_wait(self.client(stall_s=0.5), 5)
        self.assertIn("fell silent", why)
        self.assertLess(took, AT_ONCE_S)

    def test_a_stranger_that_answers_something_else_fails_at_once(self):
        with socket.create_server(("127.0.0.1", self.port)) as srv:
            def say_hello():
                conn = srv.accept()[0]
                conn.sendall(b"hello\n")
                conn.close()
            t = threading.Thread(target=say_hello)
            t.start()
            why, took = self.timed_wait(self.client(), 5)
            t.join()
        self.assertIn("not a ready board", why)
        self.assertIn("hello", why)
        self.assertLess(took, AT_ONCE_S)



class Listening(unittest.TestCase):
    """listening(), the one "a program listens on this port" check (ready boards, tests/cc)."""

    def test_a_tcp_listener_is_seen_and_a_closed_one_is_not(self):
        srv = socket.create_server(("127.0.0.1", 0))
        port = srv.getsockname()[1]
        with srv:
            self.assertTrue(ready_port.listening(port))
        self.assertFalse(ready_port.listening(port))

    def test_a_bound_socket_that_does_not_listen_is_not_seen(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.assertFalse(ready_port.listening(s.getsockname()[1]))

if __name__ == "__main__":
    unittest.main()
