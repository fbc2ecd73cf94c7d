#!/usr/bin/env python3
"""srq_resize.py SUITE PKG_DIR: an SRQ resized with receive WRs posted loses none: every one
completes with its own wr_id (t-provider-verbs.sh; pyverbs and the rdma-core test suite's
helpers from SUITE, the suite importable as package `tests` from PKG_DIR)."""
import sys
# The suite as package `tests` (argv[2]/tests -> the unpacked suite), its helpers (argv[1]).
sys.path[:0] = [sys.argv[2], sys.argv[1]]
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.srq import SrqAttr
from tests.base import RCResources
import tests.utils as u

DEPTH = 8
with Context(name="rox_0") as ctx:
    # The first GID table entry in use (loopback on one port works with any).
    gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                     if int(str(ctx.query_gid(1, i)).replace(":", ""), 16) != 0)

class Res(RCResources):
    def create_srq_attr(self):
        return SrqAttr(max_wr=DEPTH)

server = Res(dev_name="rox_0", ib_port=1, gid_index=gid_index, with_srq=True)
client = Res(dev_name="rox_0", ib_port=1, gid_index=gid_index, with_srq=True)
server.pre_run(client.psns, client.qps_num)
client.pre_run(server.psns, server.qps_num)
before = server.srq.query().max_wr
posted = before - 2
total = before * 2
for i in range(posted):
    wr = u.get_recv_wr(server)
    wr.wr_id = 1000 + i
    server.srq.post_recv(wr)
server.srq.modify(SrqAttr(max_wr=before * 4), e.IBV_SRQ_MAX_WR)
after = server.srq.query().max_wr
assert after >= before * 4, f"max_wr {before} -> {after}"
for i in range(posted, total):
    wr = u.get_recv_wr(server)
    wr.wr_id = 1000 + i
    server.srq.post_recv(wr)
seen = []
for i in range(total):
    send_wr, _ = u.get_send_elements(client, False)
    u.send(client, send_wr)
    u.poll_cq(client.cq)
    wc = u._poll_cq(server.cq)[0]
    assert wc.status == e.IBV_WC_SUCCESS, wc
    seen.append(wc.wr_id)
assert seen == [1000 + i for i in range(total)], seen
print(f"srq resize {before} -> {after} with {posted} WRs posted: {total} receives in order")
for res in (client, server):
    res.ctx.close()
