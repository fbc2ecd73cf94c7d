// SPDX-License-Identifier: GPL-2.0
//! The verbs of a driver in safe Rust ([`Verbs`]) and the types they take and return. ib_core
//! reaches them through the trampolines of [`super::ops`].

use super::{
    attr::{
        AhAttr, DeviceAttr, IbQpRef, MrAdvice, PortAttr, PortImmutable, QpAttr, QpCap, QpInitAttr,
        SrqAttr, SrqAttrMask, WcOut,
    },
    mmap::UcontextRef,
    registry::Registry,
    wr::{RecvWr, SendWr},
    IbDev, Udata,
};
use crate::hw::uapi::ids::{Key, Qpn};
/// What `process_mad` did with a MAD, and the MAD size (the PerfMgt answers live in uapi/).
pub(crate) use crate::hw::uapi::pma::{Answer as MadAnswer, MAD_SIZE};
use kernel::prelude::*;

/// Initial attributes of a CQ.
pub(crate) struct CqInit {
    /// Requested number of CQEs.
    pub(crate) cqe: u32,
    pub(crate) comp_vector: u32,
}

/// Initial attributes of a QP, with the objects it attaches to.
pub(crate) struct QpInit<'a, V: Verbs> {
    /// `enum ib_qp_type`, numbered as uapi's `verbs::QPT_*` where rox knows the type.
    pub(crate) qp_type: u32,
    /// In: requested capacities; out: actual ones.
    pub(crate) cap: &'a mut QpCap,
    pub(crate) sq_sig_all: bool,
    /// The port of GSI QPs (unused by RC/UC/UD).
    #[allow(dead_code)]
    pub(crate) port: u32,
    /// None only for an XRC target QP (its SRQs' PDs protect what it touches).
    pub(crate) pd: Option<&'a V::Pd>,
    /// None for an XRC target QP (its receives complete on its SRQs' CQs).
    pub(crate) send_cq: Option<&'a V::Cq>,
    /// None for XRC QPs (an initiator receives nothing).
    pub(crate) recv_cq: Option<&'a V::Cq>,
    pub(crate) srq: Option<&'a V::Srq>,
    /// An XRC target QP's domain number; `XRCD_NONE` otherwise.
    pub(crate) xrcd: u32,
    /// ib_core's QP being created, for the work completions of a kernel QP.
    pub(crate) ib_qp: IbQpRef,
}

/// What a created object tells ib_core about itself.
pub(crate) struct Created<T, Id = u32> {
    pub(crate) data: T,
    /// The device's id of the object (CQ id, SRQ id; a QP's [`Qpn`]): events name objects by
    /// it.
    pub(crate) id: Id,
    /// CQ: the actual number of CQEs. QP: unused.
    pub(crate) size: u32,
}

/// The user memory of `reg_user_mr`: `length` bytes at the process's virtual address `start`,
/// which the device and remote peers address as `iova`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserRange {
    pub(crate) start: u64,
    pub(crate) length: u64,
    pub(crate) iova: u64,
}

/// A memory region: its data plus the keys ib_core reports.
pub(crate) struct RegisteredMr<T> {
    pub(crate) data: T,
    pub(crate) lkey: Key,
    pub(crate) rkey: Key,
}

/// The verbs of a driver, in safe Rust. ib_core calls them through the trampolines of
/// [`super::ops`]; objects are the driver's own types, stored next to ib_core's structures.
pub(crate) trait Verbs: Sized + 'static {
    /// The driver's per-device state (lives at least as long as the registration).
    type Dev<'a>: Sync + 'a;
    type Ucontext: Send + Sync;
    type Pd: Send + Sync;
    type Cq: Send + Sync + DeviceId;
    type Qp: Send + Sync;
    type Srq: Send + Sync + DeviceId;
    type Ah: Send + Sync;
    type Mr: Send + Sync;
    type Mw: Send + Sync;
    /// The driver's data of an on-demand paging region (see [`super::umem_odp::UmemOdp`]).
    type Odp: Send + Sync;

    /// Pages `[first, first + count)` of an on-demand paging region lose their CPU mapping:
    /// the device must not use them once this returns. Called by the mmu notifier with the
    /// umem's mutex held; may sleep.
    fn odp_invalidate(dev: &Self::Dev<'_>, odp: &Self::Odp, first: usize, count: usize);

    /// Where the wrapper keeps the objects events are routed to.
    fn registry<'a>(dev: &'a Self::Dev<'_>) -> &'a Registry;

    /// Names of the port counters (`rdma statistic`), in the order `read_counters` fills them.
    const COUNTER_NAMES: &'static [&'static CStr];
    /// Reads the counters into `values` (`COUNTER_NAMES.len()` entries).
    fn read_counters(dev: &Self::Dev<'_>, values: &mut [u64]) -> Result;
    /// Answers management datagram `mad` for `port` into `out` (ib_core's `process_mad`:
    /// the performance management agent behind sysfs `counters/`), or leaves it to ib_core's
    /// MAD layer.
    fn process_mad(
        dev: &Self::Dev<'_>,
        port: u32,
        mad: &[u8; MAD_SIZE],
        out: &mut [u8; MAD_SIZE],
    ) -> Result<MadAnswer>;

    fn query_device(dev: &Self::Dev<'_>, udata: &mut Udata<'_>) -> Result<DeviceAttr>;
    fn query_port(dev: &Self::Dev<'_>, ib: IbDev<'_>, port: u32) -> Result<PortAttr>;
    fn get_port_immutable(dev: &Self::Dev<'_>, port: u32) -> Result<PortImmutable>;
    fn set_gid(dev: &Self::Dev<'_>, index: u32, gid: Option<&[u8; 16]>) -> Result;

    fn alloc_ucontext(
        dev: &Self::Dev<'_>,
        uctx: UcontextRef<'_>,
        udata: &mut Udata<'_>,
    ) -> Result<Self::Ucontext>;
    fn dealloc_ucontext(dev: &Self::Dev<'_>, uctx: &Self::Ucontext);
    /// Whether a CQ, QP or SRQ just created for `uctx` (None: a kernel consumer's) may be
    /// registered; a refused one is destroyed and its create fails with EIO. Asked under the
    /// registry's (spin) lock, ordered against [`Registry::user_qps`]: must not sleep.
    fn admits(dev: &Self::Dev<'_>, uctx: Option<&Self::Ucontext>) -> bool;
    /// A process maps device page `pfn` (an entry of one of its contexts): `map` does it. The
    /// driver refuses a page it has revoked since the entry was made, and runs `map` under
    /// whatever lock orders it with that revocation.
    fn map_user_page(dev: &Self::Dev<'_>, pfn: u64, map: impl FnOnce() -> Result) -> Result;

    fn alloc_pd(dev: &Self::Dev<'_>, udata: &mut Udata<'_>) -> Result<Self::Pd>;
    fn dealloc_pd(dev: &Self::Dev<'_>, pd: &Self::Pd);

    /// A memory window of `mw_type` (`enum ib_mw_type`) in `pd`: its rkey and the driver's data.
    fn alloc_mw(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        mw_type: u32,
        udata: &mut Udata<'_>,
    ) -> Result<(Key, Self::Mw)>;
    fn dealloc_mw(dev: &Self::Dev<'_>, mw: &Self::Mw);

    fn reg_user_mr(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        pd: &Self::Pd,
        range: UserRange,
        access: u32,
        udata: &mut Udata<'_>,
    ) -> Result<RegisteredMr<Self::Mr>>;
    fn get_dma_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        access: u32,
    ) -> Result<RegisteredMr<Self::Mr>>;
    fn dereg_mr(dev: &Self::Dev<'_>, mr: &Self::Mr);
    /// A fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`) of up to `max_num_sg` pages:
    /// no access until an `IB_WR_REG_MR` binds pages to it.
    fn alloc_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        max_num_sg: u32,
    ) -> Result<RegisteredMr<Self::Mr>>;
    /// `ib_map_mr_sg` starts: the MR's page list is emptied.
    fn mr_clear_pages(mr: &Self::Mr) -> Result;
    /// `ib_map_mr_sg`: appends the DMA address of one page to the MR's page list (ENOMEM when
    /// it is full). May run in any context.
    fn mr_set_page(mr: &Self::Mr, addr: u64) -> Result;
    /// ibv_advise_mr: make the ranges `(addr, length, lkey)` of on-demand paging regions of
    /// `pd` present; `flush`: before returning.
    fn advise_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        advice: MrAdvice,
        flush: bool,
        sges: &[(u64, u32, Key)],
    ) -> Result;

    fn create_cq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        init: &CqInit,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Cq>>;
    fn destroy_cq(dev: &Self::Dev<'_>, cq: &Self::Cq);
    /// Resizes a CQ to hold at least `cqe` entries; returns the new number of entries.
    fn resize_cq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        cq: &Self::Cq,
        cqe: u32,
        udata: &mut Udata<'_>,
    ) -> Result<u32>;

    fn create_qp(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        init: QpInit<'_, Self>,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Qp, Qpn>>;
    fn modify_qp(
        dev: &Self::Dev<'_>,
        qp: &Self::Qp,
        attr: &QpAttr,
        mask: u32,
        udata: &mut Udata<'_>,
    ) -> Result;
    fn query_qp(dev: &Self::Dev<'_>, qp: &Self::Qp) -> Result<(QpAttr, QpInitAttr)>;
    fn destroy_qp(dev: &Self::Dev<'_>, qp: &Self::Qp);

    fn create_srq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        pd: &Self::Pd,
        attr: &mut SrqAttr,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Srq>>;
    fn modify_srq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        srq: &Self::Srq,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        udata: &mut Udata<'_>,
    ) -> Result;
    fn query_srq(dev: &Self::Dev<'_>, srq: &Self::Srq) -> Result<SrqAttr>;
    fn destroy_srq(dev: &Self::Dev<'_>, srq: &Self::Srq);

    /// Kernel QPs (ib_mad's GSI QP1): queue one send work request (rung by `ring_sq`).
    fn post_send(dev: &Self::Dev<'_>, qp: &Self::Qp, wr: &SendWr<'_, Self>) -> Result;
    /// Tells the device about the send WRs queued since the last call.
    fn ring_sq(dev: &Self::Dev<'_>, qp: &Self::Qp);
    /// Kernel QPs: queue one receive work request (rung by `ring_rq`).
    fn post_recv(dev: &Self::Dev<'_>, qp: &Self::Qp, wr: &RecvWr<'_>) -> Result;
    fn ring_rq(dev: &Self::Dev<'_>, qp: &Self::Qp);
    /// Kernel SRQs: queue one receive work request (rung by `ring_srq`).
    fn post_srq_recv(dev: &Self::Dev<'_>, srq: &Self::Srq, wr: &RecvWr<'_>) -> Result;
    fn ring_srq(dev: &Self::Dev<'_>, srq: &Self::Srq);
    /// Kernel CQs: moves up to `wc.len()` completions into `wc`, returns how many.
    fn poll_cq(dev: &Self::Dev<'_>, cq: &Self::Cq, wc: &mut WcOut<'_>) -> Result<usize>;
    /// Kernel CQs: arms the CQ; returns whether completions may have been missed.
    fn req_notify_cq(dev: &Self::Dev<'_>, cq: &Self::Cq, solicited_only: bool) -> Result<bool>;

    fn create_ah(dev: &Self::Dev<'_>, attr: &AhAttr, udata: &mut Udata<'_>) -> Result<Self::Ah>;
    fn query_ah(dev: &Self::Dev<'_>, ah: &Self::Ah) -> Result<AhAttr>;
    fn destroy_ah(dev: &Self::Dev<'_>, ah: &Self::Ah);

    /// UD QP `qpn` joins multicast group `gid` (ib_core checked both).
    fn attach_mcast(dev: &Self::Dev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result;
    /// QP `qpn` leaves multicast group `gid`.
    fn detach_mcast(dev: &Self::Dev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result;
}

/// The device id a created object was registered under, kept behind the driver's data.
pub(crate) trait DeviceId {
    fn device_id(&self) -> u32;
}
