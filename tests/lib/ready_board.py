#!/usr/bin/env python3
"""The ready board (ready_port.py) for shell scripts: a server program's guest tells the client
in another guest when the program listens, so the client runs once, then, and whatever it meets
after that (a reject, a refused connection) is a failure, not a server that was not there yet.

  ready_board.py serve BOARD_PORT JOB LISTEN_PORT LIMIT_S -- CMD [ARG...]
      Opens the board on BOARD_PORT (exit 1 at once if it cannot), runs CMD (its output is
      this one's) and posts for JOB "ready" once a program of this guest listens on
      LISTEN_PORT (TCP or rdma_cm), or "fail <why>" if CMD ended first. When CMD has ended and
      a client has been sent JOB's line, closes the board and exits with CMD's status (127:
      CMD could not start). All of it within LIMIT_S of the start: a CMD still running then is
      stopped (exit 124), and the board says what was missing (CMD never listened; no client
      asked; or the client was told "ready" and CMD still did not end); a client that never
      asked after CMD ended is named too (exit CMD's status).
  ready_board.py wait HOST BOARD_PORT JOB FIRST_CONTACT_S LIMIT_S
      Exits 0 once the board on HOST said "ready" for JOB; else prints why and exits 1: at
      once for a "fail" or a board gone, after FIRST_CONTACT_S if no board ever answered,
      after LIMIT_S of "pending"."""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ready_port  # noqa: E402

USAGE = __doc__.split("\n\n", 1)[1]


# Exit status of a CMD stopped at the limit (as timeout(1)), and its time to end on SIGTERM.
EXIT_LIMIT = 124
STOP_GRACE_S = 5.0


def serve(board_port, job, listen_port, limit_s, cmd):
    deadline = time.monotonic() + limit_s
    try:
        board = ready_port.Board(board_port)
    except OSError as e:
        print(f"ready_board: cannot open the board on port {board_port}: {e}", file=sys.stderr)
        return 1
    try:
        proc = subprocess.Popen(cmd)
    except OSError as e:
        board.post(job, f"fail: the server cannot run {cmd[0]}: {e}")
        rc = 127
    else:
        threading.Thread(target=ready_port.announce, args=(board, job, listen_port, proc),
                         daemon=True).start()
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            print(f"ready_board: {cmd[0]} still ran after {limit_s:g} s: "
                  f"{missing(board, job, listen_port)}; stopped it", file=sys.stderr)
            board.post(job, f"fail: the server stopped {cmd[0]} after {limit_s:g} s")
            stop(proc)
            board.close()
            return EXIT_LIMIT
    if not board.wait_answered(job, max(0.0, deadline - time.monotonic())):
        print(f"ready_board: no client asked for job {job} within {limit_s:g} s",
              file=sys.stderr)
    board.close()
    return rc


def missing(board, job, listen_port):
    """What kept the server's program running: the step of the exchange that never came."""
    line, answered = board.status(job)
    if line is None:
        return f"it never listened on port {listen_port}"
    if not answered:
        return f"it listened, but no client asked for job {job}"
    return ("its client was told it listens, but it did not end (no client connected, or the "
            "exchange hung)")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait(host, board_port, job, first_contact_s, limit_s):
    why = ready_port.Client(host, board_port, first_contact_s).wait(job, limit_s)
    if why:
        print(f"ready_board: {why}")
        return 1
    return 0


def main(argv):
    try:
        if argv[:1] == ["serve"] and len(argv) > 6 and argv[5] == "--":
            return serve(int(argv[1]), argv[2], int(argv[3]), float(argv[4]), argv[6:])
        if argv[:1] == ["wait"] and len(argv) == 6:
            return wait(argv[1], int(argv[2]), argv[3], float(argv[4]), float(argv[5]))
    except ValueError:
        pass
    print(f"usage:\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
