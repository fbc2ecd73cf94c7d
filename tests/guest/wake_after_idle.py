"""Ring rox_0 while it sleeps, ROUNDS times (tests/guest/t-driver-wake.sh,
t-driver-companion-removal.sh).

Usage: wake_after_idle.py ROUNDS PAUSE_S [srq|rq]. Creates a PD, MR, CQ, an SRQ and an RC QP
in INIT (every admin command wakes the device, so they all come first), then rings: waits
PAUSE_S (longer than the device's idle_after: it sleeps) and posts one receive.
- srq (default): to the SRQ, whose doorbell finds the device idle, so librox writes its wake
  exactly once per ring. rox_0's counters are read after each ring (tests/lib/wake_rounds.py
  judges it): a ring that found the device up because something else woke it in its window
  (a frame on the port or netdev, or a timer) is not counted and said so, and rings go
  on until ROUNDS rings woke the device (at most 4 x ROUNDS rings); a ring that woke nothing
  while nothing else woke the device fails at once (exit 1).
- rq: to the QP's own receive queue, whose doorbell needs no wake while no QP of its page is
  in the error state (the idle device says so in `DbPage::rq_no_wake`; the device reads the
  RQ when a message needs a receive WQE), so librox writes no wake at all: ROUNDS rings (the
  caller checks the counters).
The QP never leaves INIT: the receives wait, nothing is sent. While it rings, the guest's NICs
send no IPv6 router solicitations (tests/lib/ipv6_quiet.py), the frames that woke rox_0 between
rings before. Prints "rang N times after PAUSE_S s idle (KIND)".
"""
import os
import sys
import time

import pyverbs.cq as c
import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.mr as m
import pyverbs.pd as p
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from ipv6_quiet import no_router_solicitations  # noqa: E402
from rdma_tool import port_counters  # noqa: E402
from wake_rounds import LOST, OTHER, WOKE, judge  # noqa: E402

DEV = "rox_0"
if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("srq", "rq")):
    sys.exit("usage: wake_after_idle.py ROUNDS PAUSE_S [srq|rq]")
rounds, pause = int(sys.argv[1]), float(sys.argv[2])
kind = sys.argv[3] if len(sys.argv) == 4 else "srq"
most = 4 * rounds if kind == "srq" else rounds
ctx = d.Context(name=DEV)
pd = p.PD(ctx)
mr = m.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
cq = c.CQ(ctx, 64)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=most, max_sge=1)))
cap = QPCap(max_send_wr=1, max_recv_wr=rounds)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
qp.to_init(attr)
target = srq if kind == "srq" else qp
with no_router_solicitations() as quiet:
    print(f"no IPv6 router solicitations from {', '.join(quiet) or 'no interface'} while ringing",
          flush=True)
    woke = rang = 0
    counters = port_counters(DEV) if kind == "srq" else None
    while woke < rounds and rang < most:
        time.sleep(pause)
        target.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
        rang += 1
        if kind == "rq":
            woke += 1
            continue
        before, counters = counters, port_counters(DEV)
        verdict, reason = judge(before, counters)
        if verdict == LOST:
            sys.exit(f"ring {rang} of {DEV}: {reason}: librox saw it asleep and wrote no wake, "
                     "or the device did not say it slept")
        if verdict == OTHER:
            print(f"ring {rang} of {DEV} not counted: {reason}", flush=True)
        if verdict == WOKE:
            woke += 1
if woke < rounds:
    sys.exit(f"{DEV}: only {woke} of {rang} rings found it asleep; the others found it woken "
             "by something else")
print(f"rang {rang} times after {pause} s idle ({kind})"
      + (f"; {woke} woke {DEV}" if kind == "srq" else ""), flush=True)
