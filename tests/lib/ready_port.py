"""A server's "ready" word to its client in another guest (tests/soak/guest.py): the client
starts its program only once the server's program listens, however far apart the two guests
run, and learns at once when the server's side failed or went away.

The server's guest opens one TCP listener, the board, when its script starts (a port it cannot
have fails the script there and then) and keeps it open to the end. Per job it posts one line:
"ready" once the job's program listens, "fail <why>" when the job cannot run or its program
ended first. A client connects, asks for its job and gets, at once, a greeting that proves the
board is there; then "pending" every few seconds (the server's guest is alive, not at that job
yet); then the job's line.

What the client is told, and when (nothing is retried that says a failure):
  - the job's "fail" line: at once, with the server's reason;
  - the board refuses the connection after this client has reached it before (the server's
    script ended or its guest died): at once;
  - the connection closes without the job's line (the script ended while the client waited):
    at once;
  - no greeting, no "pending" for STALL_S (something else listens there, or the server's guest
    stopped): after STALL_S;
  - no board at all yet: the connection is tried again only for `first_contact_s` (both guests
    boot together, so the server's script opens its board soon), then it fails.
The job's own port is never the channel, so a job whose program cannot listen still reaches
its client. One board for every job: the per-job listener this replaced could not tell its
client that it failed to bind (the client then waited out its deadline).

`listening(port)` and `announce(...)` are the server side's test for "the program listens" and
its post; tests/lib/ready_board.py puts a board, a program and its client on the command line
(tests/net/pair.sh).

Ports stay below Linux's ephemeral range (ip_local_port_range, 32768-60999 by default): a
port there can be held by any outgoing connection of the guest, and a bind then fails."""
import re
import socket
import subprocess
import threading
import time

EPHEMERAL_FIRST = 32768
GREETING = "rox-ready-board"
HEARTBEAT_S = 5.0
# A live board greets and says "pending" every HEARTBEAT_S; this much silence means it is not
# one (or its guest stopped). Generous: a loaded host can stall a guest's thread for seconds.
STALL_S = 30.0


def job_port(base, span, index):
    """The port of job `index`: cycles through [base, base+span). Raises ValueError for a
    range that reaches the ephemeral range."""
    if base <= 0 or span <= 0 or base + span > EPHEMERAL_FIRST:
        raise ValueError(f"job ports {base}-{base + span - 1} reach {EPHEMERAL_FIRST}")
    return base + index % span


def board_port(base, span):
    """The board's port: the first above the job ports (ValueError if it is ephemeral)."""
    port = job_port(base, span, 0) + span
    if port >= EPHEMERAL_FIRST:
        raise ValueError(f"board port {port} is in the ephemeral range")
    return port


class Board:
    """Server side: binds `port` now (OSError: the server's guest cannot serve; say why) and
    answers clients in threads until close()."""

    def __init__(self, port, heartbeat_s=HEARTBEAT_S):
        self.port, self.heartbeat_s = port, heartbeat_s
        self.sock = socket.create_server(("", port))
        self.lines = {}  # job -> "ready" or "fail ..."
        self.answered = set()  # jobs whose line a client has been sent
        self.changed = threading.Condition()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def post(self, job, line):
        """The job's answer, "ready" or "fail <why>" (the first one posted stands)."""
        with self.changed:
            self.lines.setdefault(str(job), line)
            self.changed.notify_all()

    def wait_answered(self, job, timeout_s):
        """Whether a client has been sent `job`'s line, waiting up to `timeout_s` for one. A
        server closes its board after this: a board gone before its client asked leaves the
        client trying for first contact instead of telling it the answer."""
        with self.changed:
            return self.changed.wait_for(lambda: str(job) in self.answered, timeout_s)

    def status(self, job):
        """`job`'s posted line (None before one) and whether a client has been sent it."""
        with self.changed:
            return self.lines.get(str(job)), str(job) in self.answered

    def close(self):
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        try:
            # Wakes the accept thread and stops listening now (a close alone leaves the
            # listener open while accept() blocks on it).
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected on some systems; the close below still ends it
        self.sock.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            try:
                conn.sendall(f"{GREETING}\n".encode())
                conn.settimeout(STALL_S)
                job = conn.makefile("r").readline().strip().removeprefix("job ")
                while True:
                    with self.changed:
                        self.changed.wait_for(lambda: job in self.lines or self.closed,
                                              self.heartbeat_s)
                        done, line = job in self.lines or self.closed, self.lines.get(job)
                    if done:
                        break
                    conn.sendall(b"pending\n")
                if line is not None:
                    conn.sendall(line.encode() + b"\n")
                    with self.changed:
                        self.answered.add(job)
                        self.changed.notify_all()
            except OSError:
                pass  # the client went away: nothing to tell


class Client:
    """Client side, one per server guest: remembers whether the board was ever reached, so a
    refused connection after that fails at once."""

    def __init__(self, host, port, first_contact_s, stall_s=STALL_S, retry_s=0.5):
        self.host, self.port = host, port
        self.first_contact_s, self.stall_s, self.retry_s = first_contact_s, stall_s, retry_s
        self.t0 = time.monotonic()
        self.reached = False

    def _connect(self):
        """A connection to the board, or why there is none."""
        while True:
            try:
                return socket.create_connection((self.host, self.port), timeout=self.stall_s), None
            except OSError as e:
                if self.reached:
                    return None, (f"the server's board on {self.host}:{self.port} is gone ({e}):"
                                  " its script ended or its guest stopped")
                if time.monotonic() - self.t0 > self.first_contact_s:
                    return None, (f"the server on {self.host} opened no board on port {self.port}"
                                  f" in {self.first_contact_s:g} s ({e})")
                time.sleep(self.retry_s)

    def wait(self, job, limit_s):
        """None once the server said "ready" for `job`, else why not; at most `limit_s` of
        "pending" (the server's guest alive, not at that job yet)."""
        conn, why = self._connect()
        if conn is None:
            return why
        where = f"board {self.host}:{self.port}"
        end = time.monotonic() + limit_s
        with conn:
            conn.settimeout(self.stall_s)
            lines = conn.makefile("r")
            try:
                first = lines.readline().strip()
                if first != GREETING:
                    return (f"port {self.port} on {self.host} is not a ready board: it said "
                            f"{first or 'nothing (connection closed)'!r}")
                self.reached = True
                conn.sendall(f"job {job}\n".encode())
                while True:
                    line = lines.readline().strip()
                    if line != "pending":
                        break
                    if time.monotonic() > end:
                        return f"job {job}: the server did not reach it in {limit_s:g} s ({where})"
            except OSError as e:
                return f"job {job}: the {where} fell silent for {self.stall_s:g} s ({e})"
        if line == "ready":
            return None
        if not line:
            return (f"job {job}: the {where} closed without an answer: the server's script "
                    "ended")
        return f"job {job}: the server answered: {line}"


def listening(port):
    """Whether a program of this host listens on `port`: TCP (`ss`) or rdma_cm (a cm_id in
    state LISTEN in `rdma resource show cm_id`)."""
    def output(cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    if output(["ss", "-Hltn", f"sport = :{port}"]).strip():
        return True
    return re.search(rf"state LISTEN .*src-addr \S*:{port}( |$)",
                     output(["rdma", "resource", "show", "cm_id"]), re.M) is not None


def announce(board, job, port, proc, poll_s=0.2):
    """Posts `job`'s line on `board`: "ready" once a program listens on `port`, or "fail" when
    the server's program `proc` (a Popen) ended first."""
    while not listening(port):
        if proc.poll() is not None:
            board.post(job, f"fail: the server's program ended (exit {proc.returncode}) "
                            f"before it listened on port {port}")
            return
        time.sleep(poll_s)
    board.post(job, "ready")
