"""Shared by the scripts that run inside a lab guest (rox-lab mounts the clone at /rox): what the
lab tells a guest about its network (`ROX_IF_<n>`, `ROX_IP_<guest>_<n>`), loading rox.ko, making
rdma_rxe devices and waiting for an RDMA device's port. The host-side helpers are lab.py's."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from cases import sh  # noqa: E402  (the guest scripts' shell runner)

# How long a port may take to become active after its device appeared (rdma_rxe and rox both
# come up within a second or two; a slow TCG guest takes longer).
PORT_ACTIVE_POLLS = 150
PORT_ACTIVE_POLL_S = 0.2
# How long rox_0 may take to appear after insmod (polls of PORT_ACTIVE_POLL_S).
ROX_APPEAR_POLLS = 100


class Guest:
    """The lookups of one guest script; `who` prefixes its fatal messages."""

    def __init__(self, who):
        self.who = who

    def env(self, name):
        """The lab's value of `name` (an interface or an address); exits if rox-lab set none."""
        v = os.environ.get(name)
        if not v:
            sys.exit(f"{self.who}: ${name} is not set (run under rox-lab)")
        return v

    def wait_active(self, dev):
        """Waits for port 1 of RDMA device `dev` to be active; exits if it does not become so."""
        for _ in range(PORT_ACTIVE_POLLS):
            if "PORT_ACTIVE" in sh(f"ibv_devinfo -d {dev}", 30)[1]:
                return
            time.sleep(PORT_ACTIVE_POLL_S)
        sys.exit(f"{self.who}: {dev} port 1 is not active")

    def load_rox(self, ko):
        """Loads rox.ko `ko` unless rox_0 is there already, and waits for rox_0's port 1 to be
        active; exits if insmod fails or the port does not come up."""
        if not os.path.isdir("/sys/class/infiniband/rox_0"):
            rc, out = sh(f"insmod {ko}", 60)
            if rc != 0:
                sys.exit(f"{self.who}: insmod {ko} failed: {out}")
            for _ in range(ROX_APPEAR_POLLS):
                if os.path.isdir("/sys/class/infiniband/rox_0"):
                    break
                time.sleep(PORT_ACTIVE_POLL_S)
        self.wait_active("rox_0")

    def add_rxe(self, dev, netdev):
        """Makes rdma_rxe device `dev` on `netdev` and waits for its port 1 to be active; exits
        if either fails."""
        rc, out = sh(f"modprobe rdma_rxe && rdma link add {dev} type rxe netdev {netdev}", 60)
        if rc != 0:
            sys.exit(f"{self.who}: cannot create {dev} on {netdev}: {out}")
        self.wait_active(dev)
