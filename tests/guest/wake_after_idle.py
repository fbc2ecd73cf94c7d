"""Ring rox_0 while it sleeps, ROUNDS times (tests/guest/t-driver-wake.sh,
t-driver-companion-removal.sh).

Usage: wake_after_idle.py ROUNDS PAUSE_S [srq|rq]. Creates a PD, MR, CQ, an SRQ and an RC QP
in INIT (every admin command wakes the device, so they all come first), then ROUNDS times:
waits PAUSE_S (longer than the device's idle_after: it sleeps) and posts one receive.
- srq (default): to the SRQ, whose doorbell finds the device idle, so librox writes its wake
  exactly once per round.
- rq: to the QP's own receive queue, whose doorbell needs no wake while no QP of its page is
  in the error state (the idle device says so in `DbPage::rq_no_wake`; the device reads the
  RQ when a message needs a receive WQE), so librox writes no wake at all.
The QP never leaves INIT: the receives wait, nothing is sent. Prints "rang N times after
PAUSE_S s idle (KIND)".
"""
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

if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("srq", "rq")):
    sys.exit("usage: wake_after_idle.py ROUNDS PAUSE_S [srq|rq]")
rounds, pause = int(sys.argv[1]), float(sys.argv[2])
kind = sys.argv[3] if len(sys.argv) == 4 else "srq"
ctx = d.Context(name="rox_0")
pd = p.PD(ctx)
mr = m.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
cq = c.CQ(ctx, 64)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=rounds, max_sge=1)))
cap = QPCap(max_send_wr=1, max_recv_wr=rounds)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
qp.to_init(attr)
target = srq if kind == "srq" else qp
for _ in range(rounds):
    time.sleep(pause)
    target.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
print(f"rang {rounds} times after {pause} s idle ({kind})", flush=True)
