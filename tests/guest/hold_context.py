"""Hold a context of a rox device across its companion's removal (t-driver-companion-removal.sh).

Usage: hold_context.py DEV READY GO. Opens DEV, makes a PD, MR, CQ and an RC QP in INIT and
posts one receive (so its doorbell and wake pages are mapped and used), creates the file READY,
waits for the file GO, then posts one more receive (its stores now land wherever the kernel
left the mappings: they must not crash the process or the kernel), destroys everything and
prints "held DEV across the removal".
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
from pyverbs.wr import SGE, RecvWR

if len(sys.argv) != 4:
    sys.exit("usage: hold_context.py DEV READY GO")
dev, ready, go = sys.argv[1:]
ctx = d.Context(name=dev)
pd = p.PD(ctx)
mr = m.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
cq = c.CQ(ctx, 64)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_recv_wr=4)))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
qp.to_init(attr)
qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
open(ready, "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go within 120 s")
    time.sleep(0.05)
time.sleep(0.1)  # the device has gone idle: the post below rings the wake page too
qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
for obj in (qp, cq, mr, pd, ctx):
    obj.close()
print(f"held {dev} across the removal", flush=True)
