"""Hold one of each rox object on rox_0 (tests/guest/t-driver-load-cycles.sh).

Usage: rox_objects.py [--after-removal]. Creates a ucontext, PD, MR, CQ, SRQ and RC QP
(librox maps the doorbell page) and prints "objects created". With --after-removal it then
waits until rox.ko is gone (the caller removes it; at most REMOVAL_WAIT_S), touches the device
again and prints one line per attempt: "verb after removal: <what>: errno N" or "...:
succeeded". The docs (docs/driver.md) promise EIO once the device is disassociated; the caller
asserts that. Waiting for the removal itself, not for a time, keeps the attempts after it
however slowly the guest runs.
"""
import os
import sys
import time

# How long the caller may take to remove rox.ko (a loaded TCG guest is slow).
REMOVAL_WAIT_S = 300

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


if sys.argv[1:] not in ([], ["--after-removal"]):
    sys.exit("usage: rox_objects.py [--after-removal]")
ctx = d.Context(name="rox_0")
pd = p.PD(ctx)
mr = m.MR(pd, 65536, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
cq = c.CQ(ctx, 64)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=16)))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
print("objects created", flush=True)
if sys.argv[1:]:
    end = time.monotonic() + REMOVAL_WAIT_S
    while os.path.exists("/sys/module/rox"):
        if time.monotonic() > end:
            sys.exit(f"rox.ko still loaded {REMOVAL_WAIT_S} s after the objects were created")
        time.sleep(0.1)
    attempt("alloc PD", lambda: p.PD(ctx))
    # A receive through librox: it writes the QP's ring and rings its doorbell, a page the
    # kernel zapped at disassociation. Any answer is fine; a SIGBUS or SIGSEGV is not.
    attempt("post_recv", lambda: qp.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)])))
    attempt("poll CQ", lambda: cq.poll())
