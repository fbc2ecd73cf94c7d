// SPDX-License-Identifier: GPL-2.0
//! What a store to a slot of the driver's doorbell page asks of the device (`regs::DbPage`,
//! docs/summary-doorbell.md). A producer index or a CQ's arm word is work the device must look
//! at: the news byte of the slot's group follows it (on a device with the summary doorbell),
//! then the idle check and, if it sleeps, a wake. A CQ's consumer index needs neither: the
//! device reads it only when it writes a CQE and never waits for it, so news there cost a
//! group visit per kernel poll, and a wake a trapped write (librox's `publish_consumer_index`
//! stores it alone too). An RC QP's SQ producer index whose new WQEs all send packets skips
//! the wake while the idle device says its port's flight is full (`DbPage::rc_sq_no_wake`),
//! as librox's does: the ACK or timer that frees the flight wakes the device, and a trapped
//! wake is a vCPU exit per doorbell. Every store reads the page's `device_idle` after it,
//! though: a BAR reading all-ones is a device gone from the bus (surprise removal, its process
//! dead), which a kernel poll must notice as a ring does. Pure logic: `dev.rs` does the stores
//! and reads; the host and KUnit test this.

use crate::uapi::regs;

/// A kind of store to a doorbell slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SlotStore {
    /// An SQ, RQ or SRQ producer index, or a CQ's arm word: work for the device.
    Ring,
    /// The SQ producer index of a QP that counts in its port's flight
    /// (`verbs::qp_type_counts_in_flight`: RC or XRC initiator) whose new WQEs all send
    /// packets: as `Ring`, but no wake while the idle device says its flight is full
    /// (`DbPage::rc_sq_no_wake`): none of them could be sent before the ACK or retransmission
    /// timer that wakes it anyway.
    RcSqOfPackets,
    /// A CQ's consumer index (word `a`).
    ConsumerIndex,
}

/// Whether a device with `caps` takes news (the summary doorbell): the driver then says
/// `news_on` on its page and stores news after its rings.
pub(crate) fn device_takes_news(caps: u32) -> bool {
    caps & regs::CAP_DB_SUMMARY != 0
}

/// What follows a store, from the page's `device_idle` word read after it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AfterStore {
    /// The device is up, or asleep and the store needs no wake.
    Nothing,
    /// The device sleeps and the store is work for it: wake it.
    Wake,
    /// All-ones: no device may answer behind the BAR; a register read confirms it (a
    /// `device_idle` of all-ones is no state the device writes).
    ConfirmRemoved,
}

impl SlotStore {
    /// The store of an SQ's producer index: of a QP that `counts_in_flight`
    /// (`verbs::qp_type_counts_in_flight` of its type), for new WQEs that are all
    /// `packets_only` (none a local operation: `verbs::WrOpcode::is_local`) or not.
    pub(crate) fn sq(counts_in_flight: bool, packets_only: bool) -> Self {
        if counts_in_flight && packets_only {
            SlotStore::RcSqOfPackets
        } else {
            SlotStore::Ring
        }
    }

    /// Whether the news byte of the slot's group follows, on a device with `caps`.
    pub(crate) fn stores_news(self, caps: u32) -> bool {
        self.may_wake() && device_takes_news(caps)
    }

    /// Whether a sleeping device is woken after the store (then the store and the read of
    /// `device_idle` are fenced: the arm/wake protocol of `regs::DbPage`).
    pub(crate) fn may_wake(self) -> bool {
        self != SlotStore::ConsumerIndex
    }

    /// What follows the store, given the `device_idle` word read after it. `rc_sq_no_wake`
    /// reads the page's `DbPage::rc_sq_no_wake`, after `device_idle` (the device stores it
    /// before): only for an `RcSqOfPackets` store to a sleeping device.
    pub(crate) fn after(self, device_idle: u32, rc_sq_no_wake: impl FnOnce() -> u32) -> AfterStore {
        match device_idle {
            regs::DB_DEVICE_IDLE if self.may_wake() => {
                if self == SlotStore::RcSqOfPackets && rc_sq_no_wake() == regs::DB_RC_SQ_NO_WAKE {
                    AfterStore::Nothing
                } else {
                    AfterStore::Wake
                }
            }
            u32::MAX => AfterStore::ConfirmRemoved,
            _ => AfterStore::Nothing,
        }
    }
}
