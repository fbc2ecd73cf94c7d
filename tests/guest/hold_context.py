"""Hold a context of a rox device across its companion's removal (t-driver-companion-removal.sh).

Usage: hold_context.py DEV READY GO. Opens DEV, makes a PD, MR, CQ and an RC QP in INIT and
posts one receive (wr_id 1: its doorbell and wake pages are mapped and used), creates the file
READY, waits for the file GO, then posts one more receive (wr_id 2: its stores now land wherever
the kernel left the mappings: they must not crash the process or the kernel). rox.ko moved the
QP to error when the companion went (docs/driver.md "Companion removed while held"): the holder
must get IBV_EVENT_QP_FATAL (ibv_get_async_event) and receive 1 back from its CQ flushed
(IBV_WC_WR_FLUSH_ERR), and a new CQ or QP of the context must be refused with EIO (the context
is cut off), else it exits nonzero. Then it destroys everything and prints "held DEV
across the removal".
"""
import errno
import os
import signal
import sys
import time

import pyverbs.cq as c
import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.mr as m
import pyverbs.pd as p
from pyverbs.pyverbs_error import PyverbsRDMAError
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
qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
open(ready, "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go within 120 s")
    time.sleep(0.05)
time.sleep(0.1)  # the device has gone idle: the post below rings the wake page too
qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))

# The QP's fate, told twice: the fatal event (acknowledged before the QP is destroyed, which
# waits for that) and the flush of the receive the device had. An alarm ends a wait for an
# event that never comes (the blocked read fails, and so does the holder).
signal.signal(signal.SIGALRM, lambda *_: sys.exit("no async event within 10 s"))
signal.alarm(10)
event = ctx.get_async_event()
signal.alarm(0)
event_type = event.event_type
event.ack()
if event_type != e.IBV_EVENT_QP_FATAL:
    sys.exit(f"async event {event_type}, not IBV_EVENT_QP_FATAL ({e.IBV_EVENT_QP_FATAL})")
flushed = []
deadline = time.monotonic() + 10
while not flushed and time.monotonic() < deadline:
    _, wcs = cq.poll(4)
    flushed = [(wc.wr_id, wc.status) for wc in wcs]
    time.sleep(0.01)
if flushed != [(1, e.IBV_WC_WR_FLUSH_ERR)]:
    sys.exit(f"completions {flushed}, not receive 1 flushed ({e.IBV_WC_WR_FLUSH_ERR})")
print(f"QP_FATAL and receive 1 flushed (status {e.IBV_WC_WR_FLUSH_ERR})", flush=True)

# The removal cut the context off: a CQ or QP it makes now would ring pages that no longer
# reach the device, so rox.ko refuses them with EIO (a clear error, not a queue that never runs).
def refused(what, make):
    try:
        obj = make()
    except PyverbsRDMAError as err:
        if err.error_code != errno.EIO:
            sys.exit(f"new {what}: errno {err.error_code}, not EIO ({errno.EIO}): {err}")
        return
    obj.close()
    sys.exit(f"new {what} of the cut-off context was created, not refused with EIO")


refused("CQ", lambda: c.CQ(ctx, 8))
refused("QP", lambda: QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap())))
print("new CQ and QP of the cut-off context refused with EIO", flush=True)
for obj in (qp, cq, mr, pd, ctx):
    obj.close()
print(f"held {dev} across the removal", flush=True)
