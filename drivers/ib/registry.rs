// SPDX-License-Identifier: GPL-2.0
//! Routing of device events to ib_core's objects: the live CQs, QPs and SRQs by device id, and
//! the asynchronous events ib_core knows.

use super::bindings as b;
use crate::hw::uapi::ids::Qpn;
use core::ptr::NonNull;
use kernel::{
    new_spinlock_irq,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::SpinLockIrq,
};

/// Asynchronous events of objects and of the device.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AsyncEvent {
    QpFatal,
    QpReqErr,
    QpAccessErr,
    QpLastWqeReached,
    SqDrained,
    CqError,
    SrqLimitReached,
    SrqError,
    DeviceFatal,
    PortActive,
    PortError,
}

impl AsyncEvent {
    fn as_raw(self) -> b::ib_event_type {
        match self {
            Self::QpFatal => b::ib_event_type_IB_EVENT_QP_FATAL,
            Self::QpReqErr => b::ib_event_type_IB_EVENT_QP_REQ_ERR,
            Self::QpAccessErr => b::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
            Self::QpLastWqeReached => b::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
            Self::SqDrained => b::ib_event_type_IB_EVENT_SQ_DRAINED,
            Self::CqError => b::ib_event_type_IB_EVENT_CQ_ERR,
            Self::SrqLimitReached => b::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED,
            Self::SrqError => b::ib_event_type_IB_EVENT_SRQ_ERR,
            Self::DeviceFatal => b::ib_event_type_IB_EVENT_DEVICE_FATAL,
            Self::PortActive => b::ib_event_type_IB_EVENT_PORT_ACTIVE,
            Self::PortError => b::ib_event_type_IB_EVENT_PORT_ERR,
        }
    }
}

struct ObjPtr<T>(NonNull<T>);
// SAFETY: the pointers are only dereferenced under the registry lock while the object is
// registered, and ib_core's objects may be used from any thread.
unsafe impl<T> Send for ObjPtr<T> {}

/// Calls the completion handler of `cq` when it is a kernel CQ that ib_core polls
/// (`ib_alloc_cq` in softirq or workqueue context): that handler only schedules the poller,
/// so it may run from any context, a verb's included. Others are left alone: user CQs (their
/// process gets the fatal event), `IB_POLL_DIRECT` CQs (their owner polls; an unsolicited
/// completion would warn), and CQs with a consumer's own handler (`ib_create_cq`), which may
/// poll and post from inside it.
fn kick_polled_cq(cq: *mut b::ib_cq) {
    // SAFETY: `cq` is registered, hence alive (the callers hold the registry lock; CQs are
    // removed under it before destroy); ib_core sets these fields before the CQ is used.
    unsafe {
        let polled = (*cq).uobject.is_null()
            && !(*cq).wc.is_null()
            && (*cq).poll_ctx != b::ib_poll_context_IB_POLL_DIRECT;
        if let (true, Some(handler)) = (polled, (*cq).comp_handler) {
            handler(cq, (*cq).cq_context);
        }
    }
}

/// Waits for (and cancels) ib_core's poll work of `cq` if a kick queued it: for a CQ
/// [`kick_polled_cq`] would kick whose poller is a work item (`IB_POLL_WORKQUEUE`,
/// `IB_POLL_UNBOUND_WORKQUEUE`). A softirq poller needs nothing: `irq_poll_sched` does nothing
/// once ib_free_cq has disabled it. Process context (destroy_cq's).
fn cancel_kicked_poll(cq: *mut b::ib_cq) {
    // SAFETY: `cq` is alive (destroy_cq is running on it; the registry no longer holds it, so
    // nothing else kicks it). ib_core initialised `work` for the workqueue poll contexts (the
    // union's other member is the softirq poller's), and cancel_work_sync may sleep here.
    unsafe {
        let kicked = (*cq).uobject.is_null()
            && !(*cq).wc.is_null()
            && (*cq).comp_handler.is_some()
            && matches!(
                (*cq).poll_ctx,
                b::ib_poll_context_IB_POLL_WORKQUEUE | b::ib_poll_context_IB_POLL_UNBOUND_WORKQUEUE
            );
        if kicked {
            b::cancel_work_sync(&raw mut (*cq).__bindgen_anon_1.work);
        }
    }
}

struct RegistryInner {
    ibdev: Option<ObjPtr<b::ib_device>>,
    cqs: RBTree<u32, ObjPtr<b::ib_cq>>,
    qps: RBTree<Qpn, ObjPtr<b::ib_qp>>,
    srqs: RBTree<u32, ObjPtr<b::ib_srq>>,
}

/// The live CQs, QPs and SRQs of a device by device id (QPs by QPN), so that events from the
/// device reach them. The trampolines insert objects after a successful create and remove them
/// before destroy; callbacks into ib_core run under the lock, so no event reaches a destroyed
/// object. The lock is an IRQ-safe spinlock: events and kicks come from any context (the
/// EQ's interrupt thread, a post on a dead device); ib_core's handlers called under it do not
/// sleep. A CQ poll does not take it: each kernel CQ lists its QPs with their `ib_qp`.
#[pin_data]
pub(crate) struct Registry {
    #[pin]
    inner: SpinLockIrq<RegistryInner>,
}

impl Registry {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            inner <- new_spinlock_irq!(RegistryInner {
                ibdev: None,
                cqs: RBTree::new(),
                qps: RBTree::new(),
                srqs: RBTree::new(),
            }),
        })
    }

    /// A completion event for CQ `id`: calls its completion handler.
    pub(crate) fn cq_completion(&self, id: u32) {
        let inner = self.inner.lock();
        if let Some(cq) = inner.cqs.get(&id) {
            let cq = cq.0.as_ptr();
            // SAFETY: `cq` is registered, hence alive (removed under this lock before destroy);
            // ib_core sets `comp_handler` and `cq_context` before the CQ is used.
            unsafe {
                if let Some(handler) = (*cq).comp_handler {
                    handler(cq, (*cq).cq_context);
                }
            }
        }
    }

    /// The device died: calls the completion handler of every kernel CQ that ib_core polls
    /// (see [`kick_polled_cq`]), so its poller completes what is outstanding in software.
    pub(crate) fn kick_kernel_cqs(&self) {
        let inner = self.inner.lock();
        for cq in inner.cqs.values() {
            kick_polled_cq(cq.0.as_ptr());
        }
    }

    /// Work requests were posted to a dead device: calls the completion handler of kernel CQ
    /// `id` (see [`kick_polled_cq`]) so that they complete.
    pub(crate) fn kick_kernel_cq(&self, id: u32) {
        let inner = self.inner.lock();
        if let Some(cq) = inner.cqs.get(&id) {
            kick_polled_cq(cq.0.as_ptr());
        }
    }

    /// An asynchronous event of CQ `id`.
    pub(crate) fn cq_event(&self, id: u32, event: AsyncEvent) {
        let inner = self.inner.lock();
        if let Some(cq) = inner.cqs.get(&id) {
            let cq = cq.0.as_ptr();
            let mut ev = b::ib_event::default();
            // SAFETY: `cq` is registered, hence alive; `ev` is a local the handler only reads.
            unsafe {
                ev.device = (*cq).device;
                ev.element.cq = cq;
                ev.event = event.as_raw();
                if let Some(handler) = (*cq).event_handler {
                    handler(&mut ev, (*cq).cq_context);
                }
            }
        }
    }

    /// An asynchronous event of QP `qpn`.
    pub(crate) fn qp_event(&self, qpn: Qpn, event: AsyncEvent) {
        let inner = self.inner.lock();
        if let Some(qp) = inner.qps.get(&qpn) {
            let qp = qp.0.as_ptr();
            let mut ev = b::ib_event::default();
            // SAFETY: `qp` is registered, hence alive; `ev` is a local the handler only reads.
            unsafe {
                ev.device = (*qp).device;
                ev.element.qp = qp;
                ev.event = event.as_raw();
                if let Some(handler) = (*qp).event_handler {
                    handler(&mut ev, (*qp).qp_context);
                }
            }
        }
    }

    /// The numbers of the registered QPs that belong to user contexts (ib_core's `uobject`
    /// set; kernel QPs are left out). May sleep: the list is allocated outside the lock.
    pub(crate) fn user_qps(&self) -> Result<KVec<Qpn>> {
        loop {
            let room = self.inner.lock().qps.iter().count();
            let mut qpns = KVec::with_capacity(room, GFP_KERNEL)?;
            let inner = self.inner.lock();
            if inner.qps.iter().count() > room {
                continue; // created meanwhile: allocate again
            }
            for (qpn, qp) in inner.qps.iter() {
                // SAFETY: `qp` is registered, hence alive; ib_core sets `uobject` before the
                // QP is created and never changes it.
                if unsafe { !(*qp.0.as_ptr()).uobject.is_null() } {
                    // Within the capacity reserved above: allocates nothing.
                    qpns.push(*qpn, GFP_ATOMIC)?;
                }
            }
            return Ok(qpns);
        }
    }

    /// An asynchronous event of SRQ `id`.
    pub(crate) fn srq_event(&self, id: u32, event: AsyncEvent) {
        let inner = self.inner.lock();
        if let Some(srq) = inner.srqs.get(&id) {
            let srq = srq.0.as_ptr();
            let mut ev = b::ib_event::default();
            // SAFETY: `srq` is registered, hence alive; `ev` is a local the handler only reads.
            unsafe {
                ev.device = (*srq).device;
                ev.element.srq = srq;
                ev.event = event.as_raw();
                if let Some(handler) = (*srq).event_handler {
                    handler(&mut ev, (*srq).srq_context);
                }
            }
        }
    }

    /// A port (`port` != 0) or device event, dispatched to every ib_core client.
    pub(crate) fn device_event(&self, port: u32, event: AsyncEvent) {
        let inner = self.inner.lock();
        if let Some(ibdev) = &inner.ibdev {
            let mut ev = b::ib_event {
                device: ibdev.0.as_ptr(),
                event: event.as_raw(),
                ..Default::default()
            };
            ev.element.port_num = port;
            // SAFETY: the device is registered (cleared under this lock before unregistering);
            // `ib_dispatch_event` copies the event.
            unsafe { b::ib_dispatch_event(&ev) };
        }
    }

    /// The port's state may have changed: tells ib_core's clients the state of its netdev
    /// (PORT_ACTIVE when it is up with carrier, PORT_ERR otherwise).
    pub(crate) fn port_changed(&self, port: u32) {
        let up = {
            let inner = self.inner.lock();
            let Some(ibdev) = &inner.ibdev else { return };
            super::ibdev::ib_of(ibdev.0.as_ptr())
                .netdev(port)
                .is_some_and(|n| n.is_up())
        };
        let event = if up {
            AsyncEvent::PortActive
        } else {
            AsyncEvent::PortError
        };
        self.device_event(port, event);
    }

    /// Revokes every user mapping of the device's pages (`rdma_user_mmap_disassociate`): each
    /// process's mapping is zapped, and a later touch of it gets ib_core's dummy page instead.
    /// False if the device is not (or no longer) registered. May sleep.
    pub(crate) fn revoke_user_mappings(&self) -> bool {
        let held = {
            let inner = self.inner.lock();
            // A registration reference (taken under the lock that `set_ibdev(None)` takes after
            // unregistering) makes ib_core's unregistration wait for our `ib_device_put`.
            inner.ibdev.as_ref().map(|d| d.0.as_ptr()).filter(|&ibdev| {
                // SAFETY: the device is registered (cleared under this lock after
                // unregistering), so its memory is live.
                unsafe { b::rox_shim_ib_device_try_get(ibdev) }
            })
        };
        let Some(ibdev) = held else { return false };
        // SAFETY: registered and held (above), so its uverbs client data is there; the
        // reference is dropped once done.
        unsafe {
            b::rdma_user_mmap_disassociate(ibdev);
            b::ib_device_put(ibdev);
        }
        true
    }

    pub(super) fn set_ibdev(&self, ibdev: Option<NonNull<b::ib_device>>) {
        self.inner.lock().ibdev = ibdev.map(ObjPtr);
    }

    /// Registers `obj` under `key` in the table `table` picks if `admit` says so, else EIO.
    /// `admit` is asked under the lock that [`Self::user_qps`] lists under, so a driver that
    /// stops admitting a context's objects before it lists the QPs to fail finds every QP it
    /// admitted (`cut_off.rs`). It must not sleep.
    fn insert<K: Ord, T>(
        &self,
        key: K,
        obj: *mut T,
        table: impl FnOnce(&mut RegistryInner) -> &mut RBTree<K, ObjPtr<T>>,
        admit: impl FnOnce() -> bool,
    ) -> Result {
        let obj = NonNull::new(obj).ok_or(EINVAL)?;
        // Allocated before taking the (spin) lock.
        let node = RBTreeNode::new(key, ObjPtr(obj), GFP_KERNEL)?;
        let mut inner = self.inner.lock();
        if !admit() {
            return Err(EIO);
        }
        table(&mut inner).insert(node);
        Ok(())
    }
    /// Registers CQ `id` if `admit` says so, else EIO (see [`Self::insert`]).
    pub(super) fn insert_cq(
        &self,
        id: u32,
        cq: *mut b::ib_cq,
        admit: impl FnOnce() -> bool,
    ) -> Result {
        self.insert(id, cq, |inner| &mut inner.cqs, admit)
    }
    /// CQ `id` is being destroyed (ib_free_cq has stopped its poller and calls destroy_cq).
    /// Once it is out of the registry no kick reaches it; a kick just before (a dead device's,
    /// [`Self::kick_kernel_cqs`]) may have queued ib_core's poll work after ib_free_cq
    /// cancelled it, and that work would run on the freed CQ: it is cancelled again here.
    pub(super) fn remove_cq(&self, id: u32) {
        let removed = self.inner.lock().cqs.remove(&id);
        if let Some(cq) = removed {
            cancel_kicked_poll(cq.0.as_ptr());
        }
    }
    /// Registers QP `qpn` if `admit` says so, else EIO (see [`Self::insert`]).
    pub(super) fn insert_qp(
        &self,
        qpn: Qpn,
        qp: *mut b::ib_qp,
        admit: impl FnOnce() -> bool,
    ) -> Result {
        self.insert(qpn, qp, |inner| &mut inner.qps, admit)
    }
    pub(super) fn remove_qp(&self, qpn: Qpn) {
        self.inner.lock().qps.remove(&qpn);
    }
    /// Registers SRQ `id` if `admit` says so, else EIO (see [`Self::insert`]).
    pub(super) fn insert_srq(
        &self,
        id: u32,
        srq: *mut b::ib_srq,
        admit: impl FnOnce() -> bool,
    ) -> Result {
        self.insert(id, srq, |inner| &mut inner.srqs, admit)
    }
    pub(super) fn remove_srq(&self, id: u32) {
        self.inner.lock().srqs.remove(&id);
    }
}
