"""ibv_advise_mr on rox_0 through pyverbs (tests/guest/t-driver-negative.sh): prefetching
on-demand regions, and the errno of each bad request. Exit status 1 if any answer is wrong."""
import errno, sys
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.wr import SGE
from pyverbs.pyverbs_error import PyverbsRDMAError

bad = 0
def check(what, fn, want):
    global bad
    try:
        fn()
        got = 0
    except PyverbsRDMAError as ex:
        got = ex.error_code
    ok = got == want
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} advise_mr: {what:48} {got} (want {want})")

ctx = Context(name='rox_0')
pd, pd2 = PD(ctx), PD(ctx)
odp = MR(pd, 3 * 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND)
odp_ro = MR(pd, 4096, e.IBV_ACCESS_ON_DEMAND)
pinned = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
PF, PFW, NOF = (e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                e._IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
FLUSH = e._IBV_ADVISE_MR_FLAG_FLUSH
check("prefetch for write", lambda: pd.advise_mr(PFW, FLUSH, [SGE(odp.buf, 3 * 4096, odp.lkey)]), 0)
check("prefetch, no fault", lambda: pd.advise_mr(NOF, FLUSH, [SGE(odp.buf, 100, odp.lkey)]), 0)
check("prefetch (asynchronous)", lambda: pd.advise_mr(PF, 0, [SGE(odp.buf + 4096, 8, odp.lkey)]), 0)
check("pinned MR", lambda: pd.advise_mr(PF, FLUSH, [SGE(pinned.buf, 8, pinned.lkey)]), errno.EINVAL)
check("range beyond the MR", lambda: pd.advise_mr(PF, FLUSH, [SGE(odp.buf, 4 * 4096, odp.lkey)]), errno.EINVAL)
check("MR of another PD", lambda: pd2.advise_mr(PF, FLUSH, [SGE(odp.buf, 8, odp.lkey)]), errno.EINVAL)
check("prefetch for write, read-only MR", lambda: pd.advise_mr(PFW, FLUSH, [SGE(odp_ro.buf, 8, odp_ro.lkey)]), errno.EPERM)
check("unknown lkey", lambda: pd.advise_mr(PF, FLUSH, [SGE(odp.buf, 8, 0xdead00)]), errno.EINVAL)
sys.exit(1 if bad else 0)
