# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/lib/wake_rounds.py — judging one ring of a sleeping rox device from its counters
(tests/guest/wake_after_idle.py).

A ring after an idle pause must find the device asleep and wake it: one wake (wakes_trapped or
wakes_posted). Something else may have woken it within its idle grace before the ring — a frame
on its port or paired netdev (the guest's lab NICs send IPv6 router solicitations for as long
as they are up, at growing intervals, and MLD reports), or a timer — and then librox rightly
writes no wake. The device counts why each idle sleep ended (rox_uapi STAT_WAKEUPS_WIRE,
_TIMER, _DRIVER; `rdma statistic`: wakeups_wire, wakeups_timer, wakeups_driver), so a ring
whose window saw a frame or timer wake-up is not counted, and says why; a ring that woke nothing
while nothing else woke the device fails (librox saw it sleep and wrote no wake, or the device
did not say it slept). Driver wake-ups do not excuse a ring: the counter readings themselves
are admin commands (one to six wake-ups a reading, measured in a guest), and nothing else in
these tests drives the device between rings.
Known limit: a window is the whole pause, wider than the idle grace that matters (20 ms
trapped), so a lost wake that happened to come near a frame would be excused, not failed
(wake_after_idle.py rings with the guest's router solicitations off, tests/lib/ipv6_quiet.py,
so frames, and with them excuses, are rare: none in an idle guest's 40 s, session 19);
and a ring is counted as woken by any wake in its window (nothing else writes wakes in these
tests). A ring racing the device's idle announcement needs something to have just woken the
device, which these tests cannot make happen.
"""

# Counters read once per ring, after it: a window runs from one reading to the next.
NAMES = ("wakes_trapped", "wakes_posted", "wakeups_wire", "wakeups_timer", "wakeups_driver")

WOKE, OTHER, LOST = "woke", "other", "lost"


def judge(before, after):
    """(verdict, reason) of a ring whose window ran from counters `before` to `after` (dicts
    holding NAMES): WOKE (it woke the device), OTHER (the device may have been up for the
    reason given: not counted) or LOST (the device was not woken by anything else and the
    ring woke nothing)."""
    d = {k: after[k] - before[k] for k in NAMES}
    wakes = d["wakes_trapped"] + d["wakes_posted"]
    if wakes > 0:
        return WOKE, f"{wakes} wake(s)"
    others = []
    if d["wakeups_wire"]:
        others.append(f"{d['wakeups_wire']} by a frame on the port or netdev")
    if d["wakeups_timer"]:
        others.append(f"{d['wakeups_timer']} by a timer")
    window = ", ".join(f"{k} +{v}" for k, v in d.items())
    if others:
        return OTHER, "woken in its window " + "; ".join(others) + f" ({window})"
    return LOST, f"no wake and no other wake-up in its window ({window})"
