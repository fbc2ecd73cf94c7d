"""Ring rox_0 while it sleeps, ROUNDS times (tests/guest/t-driver-wake.sh).

Usage: wake_after_idle.py ROUNDS PAUSE_S. Creates a PD, MR, CQ and an RC QP in INIT (every
admin command wakes the device, so they all come first), then ROUNDS times: waits PAUSE_S
(longer than the device's idle_after: it sleeps) and posts one receive, whose doorbell
finds the device idle, so librox writes its wake exactly once. The QP never leaves INIT: the
receives wait, nothing is sent. Prints "rang N times after PAUSE_S s idle".
"""
import sys
import time

import pyverbs.cq as c
import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.mr as m
import pyverbs.pd as p
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR

if len(sys.argv) != 3:
    sys.exit("usage: wake_after_idle.py ROUNDS PAUSE_S")
rounds, pause = int(sys.argv[1]), float(sys.argv[2])
ctx = d.Context(name="rox_0")
pd = p.PD(ctx)
mr = m.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
cq = c.CQ(ctx, 64)
cap = QPCap(max_send_wr=1, max_recv_wr=rounds)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
qp.to_init(attr)
for _ in range(rounds):
    time.sleep(pause)
    qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
print(f"rang {rounds} times after {pause} s idle", flush=True)
