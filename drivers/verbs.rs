// SPDX-License-Identifier: GPL-2.0
//! The verbs of rox: device, port and GID queries, user contexts (doorbell page and wake page
//! mappings), protection domains and address handles; CQs, QPs, SRQs and MRs live in their own
//! files. All safe Rust over `crate::ib`.

use crate::{
    counters,
    cq::{self, Cq},
    dev::{RoxDev, RoxVerbs},
    hw::{
        regs,
        uapi::{
            admin,
            ids::{Key, Qpn},
            udata as ud, verbs,
        },
    },
    ib::{
        mmap::UcontextRef, AhAttr, CqInit, Created, DeviceAttr, DeviceCapFlags, IbDev, MadAnswer,
        MrAdvice, PortAttr, PortImmutable, QpAttr, QpInit, QpInitAttr, RecvWr, RegisteredMr,
        Registry, SendWr, SrqAttr, SrqAttrMask, Udata, UserRange, Verbs, WcOut, MAD_SIZE,
    },
    mcast,
    mr::{self, Mr},
    mw, odp,
    qp::{self, Qp},
    srq::{self, Srq},
    ucontext::{self, Ucontext},
};
use kernel::prelude::*;

/// ib_core's device capability flags for the device's `regs::CAP_*`: FLUSH (placement type
/// GLOBAL only: rox has no persistent memory), ATOMIC WRITE, SRQ resize and memory windows
/// (type 1 and 2B) when the device does them, as
/// ib_core's MR access check (`ib_check_mr_access`) and libibverbs' users expect; XRC always
/// (every rox device has XRC domains, SRQs and QPs; libfabric's verbs provider offers its
/// XRC endpoints only on a device that says so).
fn device_cap_flags(caps: u32) -> DeviceCapFlags {
    let mut flags = DeviceCapFlags::RC_RNR_NAK_GEN;
    if caps & regs::CAP_FLUSH != 0 {
        flags |= DeviceCapFlags::FLUSH_GLOBAL;
    }
    if caps & regs::CAP_ATOMIC_WRITE != 0 {
        flags |= DeviceCapFlags::ATOMIC_WRITE;
    }
    if caps & regs::CAP_SRQ_RESIZE != 0 {
        flags |= DeviceCapFlags::SRQ_RESIZE;
    }
    // Fast registration (alloc_mr / IB_WR_REG_MR / LOCAL_INV / SEND_WITH_INV), which
    // nvme-rdma and xprtrdma require.
    flags |= DeviceCapFlags::MEM_MGT_EXTENSIONS | DeviceCapFlags::XRC;
    if caps & regs::CAP_MW != 0 {
        flags |= DeviceCapFlags::MEM_WINDOW | DeviceCapFlags::MEM_WINDOW_TYPE_2B;
    }
    flags
}

/// The protection domains rox reports it can hold (PDs are numbers in the driver only).
const MAX_PD: u32 = 1 << 16;
/// The address handles rox reports it can hold (AHs are kept in the driver only).
const MAX_AH: u32 = 1 << 16;

/// Bytes RoCEv2 adds around a payload on an IPv6 fabric (the larger header): IPv6 header, UDP
/// header, BTH, ICRC.
const ROCEV2_OVERHEAD: u32 = 40 + 8 + 12 + 4;

pub(crate) struct Pd {
    pdn: u32,
}

impl Pd {
    pub(crate) fn pdn(&self) -> u32 {
        self.pdn
    }
}

/// An address handle: the device's form of the address (UD WQEs carry it).
pub(crate) struct Ah {
    av: admin::AddrVector,
}

impl Ah {
    pub(crate) fn av(&self) -> &admin::AddrVector {
        &self.av
    }
}

/// The largest IB MTU whose RoCEv2 packets fit in `netdev_mtu`.
fn active_mtu(netdev_mtu: u32) -> u8 {
    let payload = netdev_mtu.saturating_sub(ROCEV2_OVERHEAD);
    let mut mtu = verbs::MTU_256;
    for candidate in [
        verbs::MTU_512,
        verbs::MTU_1024,
        verbs::MTU_2048,
        verbs::MTU_4096,
    ] {
        if verbs::mtu_bytes(candidate) <= payload {
            mtu = candidate;
        }
    }
    mtu
}

impl Verbs for RoxVerbs {
    type Dev<'a> = RoxDev<'a>;
    type Ucontext = Ucontext;
    type Pd = Pd;
    type Cq = Cq;
    type Qp = Qp;
    type Srq = Srq;
    type Ah = Ah;
    type Mr = Mr;
    type Mw = mw::Mw;
    type Odp = odp::OdpState;

    fn odp_invalidate(dev: &RoxDev<'_>, odp: &odp::OdpState, first: usize, count: usize) {
        odp::odp_invalidate(dev, odp, first, count)
    }

    fn registry<'a>(dev: &'a RoxDev<'_>) -> &'a Registry {
        dev.registry()
    }

    const COUNTER_NAMES: &'static [&'static CStr] = &counters::COUNTER_NAMES;

    fn read_counters(dev: &RoxDev<'_>, values: &mut [u64]) -> Result {
        counters::read_counters(dev, values)
    }

    fn process_mad(
        dev: &RoxDev<'_>,
        port: u32,
        mad: &[u8; MAD_SIZE],
        out: &mut [u8; MAD_SIZE],
    ) -> Result<MadAnswer> {
        counters::process_mad(dev, port, mad, out)
    }

    fn query_device(dev: &RoxDev<'_>, udata: &mut Udata<'_>) -> Result<DeviceAttr> {
        udata.expect_no_input()?;
        let hw = &dev.attr;
        let attr = DeviceAttr {
            fw_ver: hw.fw_ver,
            sys_image_guid: hw.sys_image_guid,
            max_mr_size: hw.max_mr_size,
            page_size_cap: hw.page_size_cap,
            vendor_id: hw.vendor_id,
            vendor_part_id: hw.vendor_part_id,
            hw_ver: hw.hw_ver,
            max_qp: hw.max_qp,
            max_qp_wr: hw.max_qp_wr,
            device_cap_flags: device_cap_flags(hw.caps),
            max_send_sge: hw.max_send_sge,
            max_recv_sge: hw.max_recv_sge,
            max_sge_rd: hw.max_sge_rd,
            max_cq: hw.max_cq,
            max_cqe: hw.max_cqe,
            max_mr: hw.max_mr,
            max_mw: hw.max_mw,
            max_pd: MAX_PD,
            max_qp_rd_atom: hw.max_qp_rd_atom,
            max_qp_init_rd_atom: hw.max_qp_init_rd_atom,
            max_res_rd_atom: hw.max_qp_rd_atom * hw.max_qp,
            atomic_hca: hw.atomic_cap == admin::ATOMIC_CAP_HCA,
            max_ah: MAX_AH,
            max_srq: hw.max_srq,
            max_srq_wr: hw.max_srq_wr,
            max_srq_sge: hw.max_srq_sge,
            max_pkeys: 1,
            max_mcast_grp: hw.max_mcast_grp,
            max_mcast_qp_attach: hw.max_mcast_qp_attach,
            max_total_mcast_qp_attach: hw.max_total_mcast_qp_attach,
            local_ca_ack_delay: hw.local_ca_ack_delay as u8,
            max_fast_reg_page_list_len: admin::DEV_MAX_FAST_REG_PAGES,
            odp: (hw.caps & regs::CAP_ODP != 0).then(odp::odp_caps),
        };
        udata.respond_empty()?;
        Ok(attr)
    }

    fn query_port(dev: &RoxDev<'_>, ib: IbDev<'_>, port: u32) -> Result<PortAttr> {
        if port != u32::from(admin::PORT_NUM) {
            return Err(EINVAL);
        }
        let hw = &dev.port;
        let netdev = ib.netdev(port);
        let max_mtu = hw.max_mtu.clamp(verbs::MTU_256, verbs::MTU_4096);
        let netdev_mtu = netdev.as_ref().map_or(0, |n| n.mtu());
        Ok(PortAttr {
            active: netdev.as_ref().is_some_and(|n| n.is_up()),
            max_mtu,
            active_mtu: active_mtu(netdev_mtu).min(max_mtu),
            phys_mtu: netdev_mtu,
            gid_tbl_len: admin::GID_TABLE_LEN,
            cm_sup: true,
            max_msg_sz: verbs::MAX_MSG_SIZE,
            pkey_tbl_len: 1,
            active_width: hw.active_width,
            active_speed: hw.active_speed.into(),
        })
    }

    fn get_port_immutable(_dev: &RoxDev<'_>, port: u32) -> Result<PortImmutable> {
        if port != u32::from(admin::PORT_NUM) {
            return Err(EINVAL);
        }
        Ok(PortImmutable {
            pkey_tbl_len: 1,
            gid_tbl_len: admin::GID_TABLE_LEN,
        })
    }

    fn set_gid(dev: &RoxDev<'_>, index: u32, gid: Option<&[u8; 16]>) -> Result {
        if index >= admin::GID_TABLE_LEN {
            return Err(EINVAL);
        }
        let cmd = admin::SetGidCmd {
            index,
            gid_type: verbs::GID_TYPE_ROCE_UDP_ENCAP,
            valid: gid.is_some().into(),
            reserved: 0,
            gid: gid.copied().unwrap_or_default(),
        };
        dev.run::<admin::SetGid>(cmd)
    }

    fn alloc_ucontext(
        dev: &RoxDev<'_>,
        uctx: UcontextRef<'_>,
        udata: &mut Udata<'_>,
    ) -> Result<Ucontext> {
        ucontext::alloc(dev, uctx, udata)
    }

    fn map_user_page(dev: &RoxDev<'_>, pfn: u64, map: impl FnOnce() -> Result) -> Result {
        ucontext::map_user_page(dev, pfn, map)
    }

    fn dealloc_ucontext(dev: &RoxDev<'_>, uctx: &Ucontext) {
        ucontext::dealloc(dev, uctx)
    }

    fn admits(dev: &RoxDev<'_>, uctx: Option<&Ucontext>) -> bool {
        uctx.is_none_or(|uctx| !uctx.is_cut_off(dev))
    }

    fn alloc_pd(dev: &RoxDev<'_>, udata: &mut Udata<'_>) -> Result<Pd> {
        udata.expect_no_input()?;
        udata.respond_empty()?;
        Ok(Pd {
            pdn: dev.alloc_pdn(),
        })
    }

    fn dealloc_pd(_dev: &RoxDev<'_>, _pd: &Pd) {}

    fn alloc_mw(
        dev: &RoxDev<'_>,
        pd: &Pd,
        mw_type: u32,
        udata: &mut Udata<'_>,
    ) -> Result<(Key, mw::Mw)> {
        mw::alloc_mw(dev, pd.pdn, mw_type, udata)
    }

    fn dealloc_mw(dev: &RoxDev<'_>, mw: &mw::Mw) {
        mw::dealloc_mw(dev, mw)
    }

    fn reg_user_mr(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        pd: &Pd,
        range: UserRange,
        access: u32,
        udata: &mut Udata<'_>,
    ) -> Result<RegisteredMr<Mr>> {
        mr::reg_user_mr(dev, ib, pd.pdn, range, access, udata)
    }

    fn get_dma_mr(dev: &RoxDev<'_>, pd: &Pd, access: u32) -> Result<RegisteredMr<Mr>> {
        mr::get_dma_mr(dev, pd.pdn, access)
    }

    fn dereg_mr(dev: &RoxDev<'_>, mr: &Mr) {
        mr::dereg_mr(dev, mr)
    }

    fn alloc_mr(dev: &RoxDev<'_>, pd: &Pd, max_num_sg: u32) -> Result<RegisteredMr<Mr>> {
        mr::alloc_fast_reg_mr(dev, pd.pdn, max_num_sg)
    }

    fn mr_clear_pages(mr: &Mr) -> Result {
        mr.clear_pages()
    }

    fn mr_set_page(mr: &Mr, addr: u64) -> Result {
        mr.set_page(addr)
    }

    fn advise_mr(
        dev: &RoxDev<'_>,
        pd: &Pd,
        advice: MrAdvice,
        _flush: bool,
        sges: &[(u64, u32, Key)],
    ) -> Result {
        // Prefetching is done before returning, asked to or not (allowed: the asynchronous
        // form is best effort).
        odp::odp_prefetch(dev, pd.pdn, advice, sges)
    }

    fn create_cq(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Ucontext>,
        init: &CqInit,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Cq>> {
        cq::create(dev, ib, uctx, init, udata)
    }

    fn destroy_cq(dev: &RoxDev<'_>, cq: &Cq) {
        cq::destroy(dev, cq)
    }

    fn resize_cq(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        cq: &Cq,
        cqe: u32,
        udata: &mut Udata<'_>,
    ) -> Result<u32> {
        cq::resize(dev, ib, cq, cqe, udata)
    }

    fn create_qp(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Ucontext>,
        init: QpInit<'_, Self>,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Qp, Qpn>> {
        qp::create(dev, ib, uctx, init, udata)
    }

    fn modify_qp(
        dev: &RoxDev<'_>,
        qp: &Qp,
        attr: &QpAttr,
        mask: u32,
        udata: &mut Udata<'_>,
    ) -> Result {
        qp::modify(dev, qp, attr, mask, udata)
    }

    fn query_qp(dev: &RoxDev<'_>, qp: &Qp) -> Result<(QpAttr, QpInitAttr)> {
        qp::query(dev, qp)
    }

    fn destroy_qp(dev: &RoxDev<'_>, qp: &Qp) {
        qp::destroy(dev, qp)
    }

    fn create_srq(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Ucontext>,
        pd: &Pd,
        attr: &mut SrqAttr,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Srq>> {
        srq::create(dev, ib, uctx, pd.pdn, attr, udata)
    }

    fn modify_srq(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        srq: &Srq,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        udata: &mut Udata<'_>,
    ) -> Result {
        srq::modify(dev, ib, srq, attr, mask, udata)
    }

    fn query_srq(dev: &RoxDev<'_>, srq: &Srq) -> Result<SrqAttr> {
        srq::query(dev, srq)
    }

    fn destroy_srq(dev: &RoxDev<'_>, srq: &Srq) {
        srq::destroy(dev, srq)
    }

    fn post_send(dev: &RoxDev<'_>, qp: &Qp, wr: &SendWr<'_, Self>) -> Result {
        qp::post_send(dev, qp, wr)
    }

    fn ring_sq(dev: &RoxDev<'_>, qp: &Qp) {
        qp::ring_sq(dev, qp)
    }

    fn post_recv(dev: &RoxDev<'_>, qp: &Qp, wr: &RecvWr<'_>) -> Result {
        qp::post_recv(dev, qp, wr)
    }

    fn ring_rq(dev: &RoxDev<'_>, qp: &Qp) {
        qp::ring_rq(dev, qp)
    }

    fn post_srq_recv(dev: &RoxDev<'_>, srq: &Srq, wr: &RecvWr<'_>) -> Result {
        srq::post_recv(dev, srq, wr)
    }

    fn ring_srq(dev: &RoxDev<'_>, srq: &Srq) {
        srq::ring(dev, srq)
    }

    fn poll_cq(dev: &RoxDev<'_>, cq: &Cq, wc: &mut WcOut<'_>) -> Result<usize> {
        cq::poll(dev, cq, wc)
    }

    fn req_notify_cq(dev: &RoxDev<'_>, cq: &Cq, solicited_only: bool) -> Result<bool> {
        cq::arm(dev, cq, solicited_only)
    }

    fn create_ah(_dev: &RoxDev<'_>, attr: &AhAttr, udata: &mut Udata<'_>) -> Result<Ah> {
        if !attr.roce || u32::from(attr.sgid_index) >= admin::GID_TABLE_LEN {
            return Err(EINVAL);
        }
        udata.expect_no_input()?;
        let av = qp::addr_vector(attr);
        // User AHs (`rdma_create_user_ah` resolved `roce.dmac`): librox puts the MAC in its UD
        // WQEs. Kernel AHs have no udata; the kernel data path reads `av` itself.
        if udata.is_user() {
            udata.respond(&ud::CreateAhResp {
                dmac: av.dmac,
                hop_limit: av.hop_limit,
                reserved: 0,
            })?;
        }
        Ok(Ah { av })
    }

    fn query_ah(_dev: &RoxDev<'_>, ah: &Ah) -> Result<AhAttr> {
        Ok(qp::ah_attr(&ah.av))
    }

    fn destroy_ah(_dev: &RoxDev<'_>, _ah: &Ah) {}

    fn attach_mcast(dev: &RoxDev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result {
        mcast::attach(dev, qpn, gid)
    }

    fn detach_mcast(dev: &RoxDev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result {
        mcast::detach(dev, qpn, gid)
    }
}
