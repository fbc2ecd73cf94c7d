"""Shared by the scripts that run inside a lab guest (rox-lab mounts the clone at /rox): what the
lab tells a guest about its network (`ROX_IF_<n>`, `ROX_IP_<guest>_<n>`) and waiting for an RDMA
device's port. The host-side helpers are lab.py's."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from cases import sh  # noqa: E402  (the guest scripts' shell runner)

# How long a port may take to become active after its device appeared (rdma_rxe and rox both
# come up within a second or two; a slow TCG guest takes longer).
PORT_ACTIVE_POLLS = 150
PORT_ACTIVE_POLL_S = 0.2


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
