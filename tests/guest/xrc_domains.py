"""The XRC domain as the protection boundary (tests/guest/t-provider-xrc.sh).

Usage: xrc_domains.py DEVICE. On one device (same-device loopback over GID 0): XRC domains A
and B, an XRC SRQ in each (one CQ for everything), an XRC target QP in A and an initiator
connected to it. A send naming A's SRQ arrives there (its receive completion names the
target QP); a send naming B's SRQ is refused by the target (the initiator completes with
REM_INV_REQ_ERR), B's SRQ keeps its receive and its buffer stays untouched, and the device's
`rx_xrc_domain_errors` hw_counter (`rdma statistic`) grows by exactly 1 for the refusal and not
at all for the good send. Exits non-zero with the reason on the first deviation.
"""
import json
import os
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqInitAttrEx
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs.xrcd import XRCD, XRCDInitAttr

PORT = 1
GID_INDEX = 0
MSG = 64
POLL_TIMEOUT_S = 10


def die(why):
    print(f"xrc_domains: FAIL: {why}", flush=True)
    sys.exit(1)


def poll(cq, timeout=POLL_TIMEOUT_S):
    """The next completion of `cq`, or None after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        n, wcs = cq.poll(1)
        if n:
            return wcs[0]
        time.sleep(0.001)
    return None


def domain_errors(dev):
    """The device's rx_xrc_domain_errors hw_counter, through `rdma -j statistic`."""
    out = subprocess.run(["rdma", "-j", "statistic", "show", "link", f"{dev}/{PORT}"],
                         check=True, capture_output=True, text=True).stdout
    for entry in json.loads(out):
        # iproute2 puts the counters beside ifname/port; newer ones may nest them.
        for where in (entry, entry.get("counters", {})):
            if entry.get("ifname") == dev and "rx_xrc_domain_errors" in where:
                return where["rx_xrc_domain_errors"]
    die(f"no rx_xrc_domain_errors of {dev} in `rdma -j statistic show`: {out!r}")


def xrc_srq(ctx, pd, xrcd, cq):
    attr = SrqInitAttrEx(max_wr=8)
    attr.srq_type = e.IBV_SRQT_XRC
    attr.pd = pd
    attr.xrcd = xrcd
    attr.cq = cq
    attr.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD
                      | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD)
    return SRQ(ctx, attr)


def main(dev):
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 32, None, None, 0)
    domains = [XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS,
                                      os.O_CREAT, -1)) for _ in range(2)]
    srq_a, srq_b = (xrc_srq(ctx, pd, x, cq) for x in domains)
    mr = MR(pd, 4 * MSG, e.IBV_ACCESS_LOCAL_WRITE)
    init = QPAttr(port_num=PORT)
    init.pkey_index = 0
    init.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    target = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD,
                                  xrcd=domains[0]), init)
    init.qp_access_flags = 0
    caps = QPCap(max_send_wr=8, max_recv_wr=0, max_recv_sge=0)
    initiator = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, sq_sig_all=1,
                                     comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=pd, scq=cq, cap=caps),
                   init)
    gid = ctx.query_gid(PORT, GID_INDEX)
    attr = QPAttr()
    attr.path_mtu = e.IBV_MTU_1024
    attr.max_rd_atomic = 1
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 1
    attr.rnr_retry = 0
    attr.timeout = 14
    attr.retry_cnt = 1
    attr.ah_attr = AHAttr(port_num=PORT, is_global=True,
                          gr=GlobalRoute(dgid=gid, sgid_index=GID_INDEX))
    attr.rq_psn = attr.sq_psn = 0
    attr.dest_qp_num = initiator.qp_num
    target.to_rts(attr)
    attr.dest_qp_num = target.qp_num
    initiator.to_rts(attr)

    # Receive buffers: A's at offset 0, B's at offset MSG; the send comes from offset 2 MSG.
    mr.write(b"\0" * (4 * MSG), 4 * MSG)
    srq_a.post_recv(RecvWR(wr_id=0xa, num_sge=1, sg=[SGE(mr.buf, MSG, mr.lkey)]))
    srq_b.post_recv(RecvWR(wr_id=0xb, num_sge=1, sg=[SGE(mr.buf + MSG, MSG, mr.lkey)]))
    payload = b"xrc to its own domain".ljust(MSG, b".")
    mr.write(payload, MSG, 2 * MSG)

    def send(wr_id, srq):
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(mr.buf + 2 * MSG, MSG, mr.lkey)])
        wr.set_qp_type_xrc(srq.get_srq_num())
        initiator.post_send(wr)

    # Domain A's SRQ: delivered there, the completion names the target QP.
    errors_before = domain_errors(dev)
    send(1, srq_a)
    got = {}
    for _ in range(2):
        wc = poll(cq)
        if wc is None:
            die(f"no completion of the send to domain A's SRQ (so far {got})")
        got[wc.wr_id] = wc
    if set(got) != {1, 0xa}:
        die(f"completions {sorted(got)} for the send to domain A's SRQ, want the send (1) and A's receive (0xa)")
    for wr_id, wc in got.items():
        if wc.status != e.IBV_WC_SUCCESS:
            die(f"wr {wr_id:#x} completed with status {wc.status}")
    if got[0xa].qp_num != target.qp_num or got[0xa].byte_len != MSG:
        die(f"A's receive names QP {got[0xa].qp_num} with {got[0xa].byte_len} bytes, "
            f"want the target {target.qp_num} and {MSG}")
    if mr.read(MSG, 0) != payload:
        die("A's receive buffer does not hold the message")
    print(f"xrc_domains: a send naming SRQ {srq_a.get_srq_num()} of the target's domain arrived", flush=True)
    errors_good = domain_errors(dev)
    if errors_good != errors_before:
        die(f"rx_xrc_domain_errors went {errors_before} -> {errors_good} for a good send")

    # Domain B's SRQ: the target refuses it; nothing reaches B.
    send(2, srq_b)
    wc = poll(cq)
    if wc is None:
        die("no completion of the send naming domain B's SRQ")
    if wc.wr_id != 2 or wc.status != e.IBV_WC_REM_INV_REQ_ERR:
        die(f"wr {wc.wr_id:#x} completed with status {wc.status}, "
            f"want the send (2) with REM_INV_REQ_ERR ({e.IBV_WC_REM_INV_REQ_ERR})")
    extra = poll(cq, timeout=1)
    if extra is not None:
        die(f"an extra completion: wr {extra.wr_id:#x} status {extra.status} (B's receive must stay posted)")
    if mr.read(MSG, MSG) != b"\0" * MSG:
        die("domain B's receive buffer was written")
    errors_after = domain_errors(dev)
    if errors_after != errors_good + 1:
        die(f"rx_xrc_domain_errors went {errors_good} -> {errors_after} for the refused send, want +1")
    print(f"xrc_domains: a send naming SRQ {srq_b.get_srq_num()} of another domain was refused "
          f"(REM_INV_REQ_ERR), nothing arrived there, rx_xrc_domain_errors "
          f"{errors_good} -> {errors_after}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "rox_0")
