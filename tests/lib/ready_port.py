"""A server's "ready" word to its client in another guest, over a TCP port of its own
(tests/soak/guest.py): the client starts its program only once the server's program listens,
however far apart the two guests run, and learns at once when the server's side failed.

The server binds the ready port before it starts its program (a port it cannot have fails the
job there and then), and answers the client's connection with one line: "ready" once its
program listens, "fail <why>" when the program ended first. The client retries a refused
connection (the server's guest is not at that job yet) until its deadline, then reads that
line; anything but "ready" fails its job at once, with the server's reason.

Ports stay below Linux's ephemeral range (ip_local_port_range, 32768-60999 by default): a
port there can be held by any outgoing connection of the guest, and a bind then fails."""
import socket
import time

EPHEMERAL_FIRST = 32768


def job_ports(base, span, offset, index):
    """(job port, ready port) of job `index`: the job port cycles through [base, base+span),
    its ready port is `offset` above. Raises ValueError for a layout that reaches the
    ephemeral range or makes the two ranges overlap."""
    if base + span + offset > EPHEMERAL_FIRST or offset < span or base <= 0:
        raise ValueError(f"ports {base}-{base + span - 1} and +{offset} reach {EPHEMERAL_FIRST}"
                         " or overlap")
    port = base + index % span
    return port, port + offset


class Announcer:
    """Server side. Made before the server's program starts: binds the ready port now
    (OSError: the job cannot run; say why). `serve` then runs in a thread."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.create_server(("", port))
        self.error = None  # what serving the client ran into, for the job's report

    def serve(self, listening, running, limit_s, poll_s=0.2):
        """Waits until `listening()` (the program listens) or not `running()` (it ended),
        then answers one client with "ready" or "fail ...", waiting at most `limit_s` for it.
        Never raises: an error is kept in self.error (the client then sees the connection
        closed without an answer and fails at once)."""
        try:
            with self.sock:
                while not listening():
                    if not running():
                        self._answer("fail: the server's program ended before it listened",
                                     limit_s)
                        return
                    time.sleep(poll_s)
                self._answer("ready", limit_s)
        except OSError as e:
            self.error = f"ready port {self.port}: {e}"

    def _answer(self, line, limit_s):
        self.sock.settimeout(limit_s)
        try:
            conn, _ = self.sock.accept()
        except socket.timeout:
            self.error = f"ready port {self.port}: no client came in {limit_s} s"
            return
        with conn:
            conn.sendall(line.encode() + b"\n")


def wait(host, port, limit_s, retry_s=0.5):
    """Client side: None once the server at `host` said "ready" on ready port `port`, else
    why not (its "fail" reason, a closed connection, or nobody there within `limit_s`)."""
    end = time.monotonic() + limit_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > end:
                return f"the server on {host} opened no ready port {port} in {limit_s} s ({e})"
            time.sleep(retry_s)
    with conn:
        conn.settimeout(max(end - time.monotonic(), 5))
        try:
            answer = conn.makefile("r").readline().strip()
        except OSError as e:
            return f"the server on {host} gave no answer on ready port {port} ({e})"
    if answer == "ready":
        return None
    return (f"the server on {host} answered on ready port {port}: "
            f"{answer or 'nothing (connection closed)'}")
