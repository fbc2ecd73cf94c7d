"""Hold one of each rox object on rox_0 (tests/guest/t-driver-load-cycles.sh).

Usage: rox_objects.py [SECONDS]. Creates a ucontext, PD, MR, CQ, SRQ and RC QP (librox maps
the doorbell page) and prints "objects created". With SECONDS it then sleeps (rox.ko is
removed meanwhile), touches the device again and prints one line per attempt:
"verb after removal: <what>: errno N" or "...: succeeded". The docs (docs/driver.md) promise
EIO once the device is disassociated; the caller asserts that.
"""
import sys
import time

import pyverbs.cq as c
import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.mr as m
import pyverbs.pd as p
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR


def attempt(what, fn):
    try:
        fn()
        print(f"verb after removal: {what}: succeeded", flush=True)
    except Exception as ex:  # pyverbs raises PyverbsRDMAError (error_code) or PyverbsError
        print(f"verb after removal: {what}: errno {getattr(ex, 'error_code', '?')} ({ex})", flush=True)


ctx = d.Context(name="rox_0")
pd = p.PD(ctx)
mr = m.MR(pd, 65536, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
cq = c.CQ(ctx, 64)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=16)))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
print("objects created", flush=True)
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
    attempt("alloc PD", lambda: p.PD(ctx))
    # A receive through librox: it writes the QP's ring and rings its doorbell, a page the
    # kernel zapped at disassociation. Any answer is fine; a SIGBUS or SIGSEGV is not.
    attempt("post_recv", lambda: qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)])))
    attempt("poll CQ", lambda: cq.poll())
