"""ready_board.py on localhost, as tests/net/pair.sh uses it: the client is told "ready" only
once the server's program listens, and at once when that program ended before it listened;
the server keeps its board until the client has had the answer."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ready_port  # noqa: E402
from test_ready_port import AT_ONCE_S, LONG_S, free_port  # noqa: E402

CLI = [sys.executable, os.path.join(HERE, "ready_board.py")]


def listener(port, delay_s):
    """A server program: listens on `port` after `delay_s`, serves one connection, exits 0."""
    code = ("import socket, time; time.sleep(%r); s = socket.create_server(('127.0.0.1', %d)); "
            "s.accept()[0].close()" % (delay_s, port))
    return [sys.executable, "-c", code]


class Cli(unittest.TestCase):
    def setUp(self):
        self.board_port, self.job_port = free_port(), free_port()

    def serve(self, cmd, limit_s=LONG_S):
        return subprocess.Popen(CLI + ["serve", str(self.board_port), "x", str(self.job_port),
                                       str(limit_s), "--"] + cmd,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    @staticmethod
    def finish(server, timeout_s):
        """The server's exit status and output, once it ended within `timeout_s` (else it and
        its program are killed and the test fails)."""
        try:
            out, _ = server.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.communicate()
            raise
        return server.returncode, out

    def wait(self):
        t0 = time.monotonic()
        p = subprocess.run(CLI + ["wait", "127.0.0.1", str(self.board_port), "x", str(LONG_S),
                                  str(LONG_S)], stdout=subprocess.PIPE, text=True,
                           timeout=2 * LONG_S)
        return p.returncode, p.stdout, time.monotonic() - t0

    def test_ready_only_once_the_program_listens(self):
        server = self.serve(listener(self.job_port, 1.0))
        rc, out, took = self.wait()
        self.assertEqual(rc, 0, out)
        self.assertGreater(took, 0.9)
        # Told "ready": the program must accept now, at the first try.
        socket.create_connection(("127.0.0.1", self.job_port), timeout=AT_ONCE_S).close()
        self.assertEqual(self.finish(server, LONG_S)[0], 0)

    def test_a_program_that_ends_before_it_listens_fails_the_client_at_once(self):
        server = self.serve([sys.executable, "-c", "import sys; sys.exit(3)"])
        rc, out, took = self.wait()
        self.assertEqual(rc, 1)
        self.assertIn("ended (exit 3) before it listened", out)
        self.assertLess(took, AT_ONCE_S)
        self.assertEqual(self.finish(server, LONG_S)[0], 3)

    def test_the_board_waits_for_a_late_client_then_closes(self):
        server = self.serve([sys.executable, "-c", "pass"])
        time.sleep(1.0)  # the program is long gone when the client first asks
        rc, out, _ = self.wait()
        self.assertEqual(rc, 1)
        self.assertIn("before it listened", out)
        self.assertEqual(self.finish(server, LONG_S)[0], 0)

    def test_without_a_client_the_server_gives_up_at_its_limit(self):
        server = self.serve([sys.executable, "-c", "pass"], limit_s=0.5)
        rc, out = self.finish(server, AT_ONCE_S)
        self.assertEqual(rc, 0)
        self.assertIn("no client asked", out)

    def test_a_program_that_listens_for_no_client_is_stopped_at_the_limit(self):
        server = self.serve(listener(self.job_port, 0), limit_s=2.0)
        rc, out = self.finish(server, AT_ONCE_S)
        self.assertEqual(rc, 124, out)
        self.assertIn("still ran after 2 s: it listened, but no client asked for job x", out)

    def test_a_program_that_never_listens_is_stopped_at_the_limit(self):
        server = self.serve([sys.executable, "-c", "import time; time.sleep(60)"], limit_s=1.0)
        rc, out = self.finish(server, AT_ONCE_S)
        self.assertEqual(rc, 124, out)
        self.assertIn(f"it never listened on port {self.job_port}", out)

    def test_a_client_told_ready_that_never_connects_is_named_at_the_limit(self):
        server = self.serve(listener(self.job_port, 0), limit_s=3.0)
        rc, out, _ = self.wait()
        self.assertEqual(rc, 0, out)
        # Told "ready", the client never connects to the program.
        rc, out = self.finish(server, AT_ONCE_S)
        self.assertEqual(rc, 124, out)
        self.assertIn("its client was told it listens, but it did not end", out)

    def test_a_taken_board_port_fails_the_server_at_once(self):
        with socket.create_server(("", self.board_port)):
            rc, out = self.finish(self.serve(listener(self.job_port, 0)), AT_ONCE_S)
        self.assertEqual(rc, 1)
        self.assertIn("cannot open the board", out)

    def test_bad_arguments_are_a_usage_error(self):
        p = subprocess.run(CLI + ["serve", "1", "x", "2", "3", "prog"], stderr=subprocess.PIPE,
                           text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage", p.stderr)


class Answered(unittest.TestCase):
    def test_a_board_knows_when_its_client_has_had_the_line(self):
        board = ready_port.Board(free_port(), 0.05)
        try:
            board.post("j", "ready")
            self.assertFalse(board.wait_answered("j", 0.2))
            client = ready_port.Client("127.0.0.1", board.port, LONG_S, LONG_S, 0.05)
            threading.Thread(target=client.wait, args=("j", LONG_S)).start()
            self.assertTrue(board.wait_answered("j", LONG_S))
        finally:
            board.close()


if __name__ == "__main__":
    unittest.main()
