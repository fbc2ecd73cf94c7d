// SPDX-License-Identifier: GPL-2.0
//! The dead-device path: what rox.ko does when the rox-nic behind it stops answering (its
//! process died, or it reported a fatal error), so that kernel consumers can tear down.
//!
//! Death is noticed once, wherever it shows first: an admin command without completion (the
//! admin queue breaks, `admin.rs`), BAR reads of all-ones in the doorbell path, or the
//! device's own fatal event. From then on ([`DeadState::mark`]):
//! - every admin command fails at once with EIO (no timeout per object while unloading);
//! - kernel QPs complete in software: a kernel CQ's poll, once the ring holds nothing more,
//!   returns `IB_WC_WR_FLUSH_ERR` for every work request the device never completed, oldest
//!   first, from the driver's own record of each queue ([`crate::wq::KernelWq`]); work
//!   requests posted afterwards (ib_drain_qp's among them) complete the same way, and the
//!   post kicks the CQ so ib_core's poller runs;
//! - modify QP to ERR or RESET succeeds locally, destroys skip the device;
//! - `IB_EVENT_DEVICE_FATAL` goes to every ib_core client (user processes get it through
//!   uverbs; their rings are theirs).
//!
//! SRQ entries are not flushed (as in mlx5's internal-error path): they belong to no QP and
//! consumers destroy an SRQ with receives posted.

use crate::{
    cq::KernelQps,
    dev::RoxDev,
    hw::regs,
    qp::KernelQp,
    wq::{KernelWq, Posted},
};
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use kernel::{
    prelude::*,
    time::{Delta, Instant, Monotonic},
    transmute::{AsBytes, FromBytes},
};

/// How long a dead device's reset may take before the driver stops waiting for it and
/// completes outstanding work in software anyway: a device whose data path hangs still answers
/// registers (so never reads all-ones) but may never report the reset complete, and ib_core's
/// pollers come back until it does.
const QUIESCE_DEADLINE: Delta = Delta::from_secs(2);

/// Whether the device is dead, and since when. The kernel QPs whose work requests then
/// complete in software are listed by the CQs they complete into (`cq.rs`).
pub(crate) struct DeadState {
    /// The one flag: set once, never cleared (the device needs a new probe).
    dead: AtomicBool,
    /// Set once the reset [`RoxDev::device_died`] asked for is complete (or no device answers
    /// any more): from then on the device writes nothing, so completing work requests in
    /// software cannot race a CQE of its own.
    quiesced: AtomicBool,
    /// When this state was made, and when the device died (nanoseconds after that).
    created: Instant<Monotonic>,
    died_ns: AtomicI64,
}

impl DeadState {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            dead: AtomicBool::new(false),
            quiesced: AtomicBool::new(false),
            created: Instant::now(),
            died_ns: AtomicI64::new(0),
        })
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Marks the device dead; true for the one call that did.
    fn mark(&self) -> bool {
        // The time first, so whoever sees the flag sees when (0: not yet recorded).
        let died_ns = self.created.elapsed().as_nanos().max(1);
        let _ = self
            .died_ns
            .compare_exchange(0, died_ns, Ordering::AcqRel, Ordering::Acquire);
        !self.dead.swap(true, Ordering::AcqRel)
    }

    /// How long ago the device died, in nanoseconds (0: it has not).
    fn dead_ns(&self) -> i64 {
        let died_ns = self.died_ns.load(Ordering::Acquire);
        if died_ns == 0 {
            0
        } else {
            self.created.elapsed().as_nanos() - died_ns
        }
    }
}

/// The device is dead: hands the outstanding work requests of the kernel QPs `qps` (a CQ's
/// list) completing into CQ `cq_id` to `emit`, oldest first per queue, until `emit` returns
/// false (it took that one and has no room for more).
pub(crate) fn flush(qps: &KernelQps, cq_id: u32, mut emit: impl FnMut(&KernelQp, Posted) -> bool) {
    for qp in qps.values() {
        if qp.send_cq == cq_id && !drain(&qp.sq, qp, &mut emit) {
            return;
        }
        if let (true, Some(rq)) = (qp.recv_cq == cq_id, &qp.rq) {
            if !drain(rq, qp, &mut emit) {
                return;
            }
        }
    }
}

/// Whether a kernel QP of `qps` (a CQ's list) completing into CQ `cq_id` has work requests
/// outstanding.
pub(crate) fn pending(qps: &KernelQps, cq_id: u32) -> bool {
    qps.values().any(|qp| {
        (qp.send_cq == cq_id && qp.sq.has_outstanding())
            || (qp.recv_cq == cq_id && qp.rq.as_ref().is_some_and(|rq| rq.has_outstanding()))
    })
}

/// Hands the outstanding entries of `wq`, a queue of `qp`, to `emit` until it returns false;
/// false then.
fn drain<T: AsBytes + FromBytes + Copy>(
    wq: &KernelWq<T>,
    qp: &KernelQp,
    emit: &mut impl FnMut(&KernelQp, Posted) -> bool,
) -> bool {
    while let Some(posted) = wq.retire_oldest() {
        if !emit(qp, posted) {
            return false;
        }
    }
    true
}

/// What a destroy makes of an admin command's error `err`: nothing to undo on a dead device
/// (the command failed at once and the device, reset or gone, forgot every object).
pub(crate) fn gone_if_dead(dev: &RoxDev<'_>, err: Error) -> Result {
    if dev.is_dead() {
        Ok(())
    } else {
        Err(err)
    }
}

impl RoxDev<'_> {
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.is_dead()
    }

    /// Whether the device is dead and writes nothing any more: the reset `device_died` asked
    /// for is complete (`STATUS_READY`), or nothing answers (all-ones: its process or link is
    /// gone). Until then work requests must not complete in software: the device could
    /// still complete them itself (a second completion of one request) or write into their
    /// buffers after the consumer got them back. One register read per call until it holds,
    /// or until [`QUIESCE_DEADLINE`] after the death (a hung device may never finish).
    pub(crate) fn dead_and_quiesced(&self) -> bool {
        if !self.is_dead() {
            return false;
        }
        if self.dead.quiesced.load(Ordering::Acquire) {
            return true;
        }
        let status = self.regs.read(regs::REG_STATUS);
        let reset_done = status == u32::MAX || status & regs::STATUS_READY != 0;
        let dead_ns = self.dead.dead_ns();
        let quiesced = reset_done || dead_ns > QUIESCE_DEADLINE.as_nanos();
        // Said once, by the poller that first saw it (several CQs' pollers may race here).
        let first = quiesced && !self.dead.quiesced.swap(true, Ordering::AcqRel);
        if first && !reset_done {
            // The time by the deadline's own clock (tests/guest/t-z-driver-hung-device.sh
            // checks it; dmesg's stamps come from another clock).
            dev_warn!(
                self.pdev.as_ref(),
                "the dead device's reset did not complete in 2 s (gave up {} ms after its death); completing its work requests in software\n",
                dead_ns / 1_000_000
            );
        }
        quiesced
    }

    /// The device stopped answering (`why` says how it showed). The first call reports it:
    /// the device is reset, the kernel CQs' pollers are kicked (once the reset is complete
    /// they complete what is outstanding with flush errors, see [`Self::dead_and_quiesced`];
    /// until then a dead CQ's arm answers "missed events", so they come back) and every
    /// ib_core client gets `IB_EVENT_DEVICE_FATAL`. Any context: it only sets a flag, logs,
    /// writes a register and schedules (ib_core's pollers and event dispatch run in work
    /// items).
    pub(crate) fn device_died(&self, why: &str) {
        if !self.dead.mark() {
            return;
        }
        dev_err!(
            self.pdev.as_ref(),
            "device fatal error: {}; the device is dead, kernel work requests complete with flush errors\n",
            why
        );
        // A device that still runs (it reported the error itself) forgets every ring, so no
        // completion of its own follows one completed here.
        self.regs.write(regs::REG_RESET, regs::RESET_VALUE);
        let registry = self.registry();
        registry.kick_kernel_cqs();
        registry.device_event(0, crate::ib::AsyncEvent::DeviceFatal);
    }
}
