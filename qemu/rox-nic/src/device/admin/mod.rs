//! Admin command execution (runs on the data-path thread, which owns every object): the
//! dispatch, the device and port commands, and what every object family's commands share
//! (doorbell slots, object numbers). The families: `mr` (regions, windows, ODP), `cq`, `srq`,
//! `qp` (QPs and multicast).

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

mod cq;
mod mr;
mod qp;
mod srq;

pub(super) use super::doorbell::DbObject;
use super::state::Hw;
use crate::dma::{as_bytes, from_bytes, Pod};
use crate::roce::Engine;
use core::mem::size_of;
use cq::{create_cq, destroy_cq, resize_cq};
use mr::{alloc_mw, dealloc_mw, dereg_mr, odp_update, reg_mr};
use qp::{attach_mcast, create_qp, destroy_qp, detach_mcast, modify_qp, query_qp};
use rox_uapi::ids::Qpn;
use srq::{create_srq, destroy_srq, modify_srq, query_srq};
use std::sync::atomic::Ordering;

/// A command's outcome: its typed result ([`AdminCommand::Result`]) or an `ADMIN_STATUS_*`.
pub(super) type AdminResult<T = ()> = Result<T, u8>;

/// Decodes the payload `C` carries and runs `exec` on it; the result words are `C`'s.
fn run<C: AdminCommand>(
    payload: &[u8],
    exec: impl FnOnce(&C::Payload) -> AdminResult<C::Result>,
) -> AdminResult<(u32, u32)>
where
    C::Payload: Pod,
{
    exec(&from_bytes::<C::Payload>(payload)).map(ResultWords::to_words)
}

/// Decodes query `C`'s [`QueryCmd`], runs `exec` on it (its value and whole response) and
/// writes the prefix of the response that fits the driver's buffer (`resp_len`): the one rule
/// of every query (uapi `admin` module doc). A `resp_len` of 0 (an older driver's reserved
/// word) is refused before `exec` runs.
fn run_query<C, R>(
    hw: &mut Hw,
    payload: &[u8],
    exec: impl FnOnce(&mut Hw, &QueryCmd) -> AdminResult<(R, C::Response)>,
) -> AdminResult<(u32, u32)>
where
    C: AdminQuery<Result = QueryAnswer<R>>,
    C::Response: Pod,
    R: Result0Only,
{
    let q = from_bytes::<QueryCmd>(payload);
    if q.resp_len == 0 {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let (value, response) = exec(hw, &q)?;
    let bytes = as_bytes(&response);
    let written = bytes.len().min(q.resp_len as usize);
    write_resp(hw, q.resp_addr, &bytes[..written])?;
    let written = written as u32; // at most `resp_len`, a u32
    Ok(QueryAnswer { value, written }.to_words())
}

/// The capabilities every device reports (REG_CAPS and DeviceAttr::caps): all it defines but
/// `CAP_POSTED_WAKE`, which only a device with a companion has (`Shared::caps`).
pub const DEVICE_CAPS: u32 = DeviceCaps::ALL.bits() & !CAP_POSTED_WAKE;

/// Execute one admin command and build its completion.
pub fn execute(hw: &mut Hw, engine: &mut Engine, cmd: &AdminCmd) -> AdminCpl {
    let payload = &as_bytes(cmd)[size_of::<AdminCmdHdr>()..];
    let r = match cmd.hdr.opcode {
        QueryDevice::OPCODE => run_query::<QueryDevice, _>(hw, payload, query_device),
        QueryPort::OPCODE => run_query::<QueryPort, _>(hw, payload, query_port),
        SetGid::OPCODE => run::<SetGid>(payload, |c| set_gid(hw, c)),
        ReadMac::OPCODE => run::<ReadMac>(payload, |_| Ok(MacAddr(hw.mac))),
        RegMr::OPCODE => run::<RegMr>(payload, |c| reg_mr(hw, c)),
        DeregMr::OPCODE => run::<DeregMr>(payload, |c| dereg_mr(hw, c.key)),
        AllocMw::OPCODE => run::<AllocMw>(payload, |c| alloc_mw(hw, c)),
        DeallocMw::OPCODE => run::<DeallocMw>(payload, |c| dealloc_mw(hw, c.key)),
        OdpUpdate::OPCODE => run::<OdpUpdate>(payload, |c| odp_update(hw, c)),
        CreateCq::OPCODE => run::<CreateCq>(payload, |c| create_cq(hw, c)),
        DestroyCq::OPCODE => run::<DestroyCq>(payload, |c| destroy_cq(hw, c.handle)),
        ResizeCq::OPCODE => run::<ResizeCq>(payload, |c| resize_cq(hw, engine, c)),
        CreateQp::OPCODE => run::<CreateQp>(payload, |c| create_qp(hw, engine, c)),
        ModifyQp::OPCODE => run::<ModifyQp>(payload, |c| modify_qp(hw, engine, c)),
        QueryQp::OPCODE => run_query::<QueryQp, _>(hw, payload, |hw, c| query_qp(hw, engine, c)),
        DestroyQp::OPCODE => run::<DestroyQp>(payload, |c| destroy_qp(hw, engine, c.qpn)),
        AttachMcast::OPCODE => run::<AttachMcast>(payload, |c| attach_mcast(hw, c)),
        DetachMcast::OPCODE => run::<DetachMcast>(payload, |c| detach_mcast(hw, c)),
        CreateSrq::OPCODE => run::<CreateSrq>(payload, |c| create_srq(hw, c)),
        ModifySrq::OPCODE => run::<ModifySrq>(payload, |c| modify_srq(hw, c)),
        QuerySrq::OPCODE => run::<QuerySrq>(payload, |c| query_srq(hw, c.handle)),
        DestroySrq::OPCODE => run::<DestroySrq>(payload, |c| destroy_srq(hw, c.handle)),
        QueryStats::OPCODE => run_query::<QueryStats, _>(hw, payload, |hw, _| {
            Ok((STATS_COUNT as u32, query_stats(hw, engine)))
        }),
        QueryCounters::OPCODE => {
            run_query::<QueryCounters, _>(hw, payload, |hw, c| query_counters(hw, engine, c))
        }
        SetPortState::OPCODE => run::<SetPortState>(payload, |c| set_port_state(hw, c)),
        _ => Err(ADMIN_STATUS_BAD_OPCODE),
    };
    let (status, (result0, result1)) = match r {
        Ok(res) => (ADMIN_STATUS_SUCCESS, res),
        Err(status) => {
            log::debug!(
                "admin opcode {:#x} failed with status {status}",
                cmd.hdr.opcode
            );
            (status, (0, 0))
        }
    };
    AdminCpl {
        cmd_id: cmd.hdr.cmd_id,
        status,
        opcode: cmd.hdr.opcode,
        result0,
        result1,
        ..Default::default()
    }
}

fn write_resp(hw: &Hw, addr: u64, bytes: &[u8]) -> Result<(), u8> {
    hw.mem.write(addr, bytes).map_err(|_| ADMIN_STATUS_BAD_DMA)
}

fn query_device(hw: &mut Hw, _: &QueryCmd) -> AdminResult<((), DeviceAttr)> {
    let guid = mac_to_guid(hw.mac);
    let attr = DeviceAttr {
        fw_ver: DEV_FW_VERSION,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: DEV_MAX_MR_SIZE,
        page_size_cap: DEV_PAGE_SIZE_CAP,
        max_qp: DEV_MAX_QP,
        max_qp_wr: 1 << DEV_MAX_LOG_WQ_DEPTH,
        max_send_sge: SQ_MAX_SGE,
        max_recv_sge: RQ_MAX_SGE,
        max_sge_rd: SQ_MAX_SGE,
        max_cq: DEV_MAX_CQ,
        max_cqe: 1 << DEV_MAX_LOG_CQ_DEPTH,
        max_mr: DEV_MAX_MR,
        max_qp_rd_atom: DEV_MAX_RD_ATOMIC as u32,
        max_qp_init_rd_atom: DEV_MAX_RD_ATOMIC as u32,
        max_srq: DEV_MAX_SRQ,
        max_srq_wr: 1 << DEV_MAX_LOG_WQ_DEPTH,
        max_srq_sge: RQ_MAX_SGE,
        max_inline_data: SQ_MAX_INLINE,
        local_ca_ack_delay: DEV_LOCAL_CA_ACK_DELAY,
        vendor_id: PCI_VENDOR_ID as u32,
        vendor_part_id: PCI_DEVICE_ID as u32,
        hw_ver: DEV_HW_VERSION,
        num_comp_eqs: MAX_EQS - 1,
        num_db_pages: DB_PAGE_COUNT,
        atomic_cap: ATOMIC_CAP_HCA,
        caps: hw.shared.caps(),
        max_mw: if DEVICE_CAPS & CAP_MW != 0 {
            DEV_MAX_MW
        } else {
            0
        },
        max_mcast_grp: DEV_MAX_MCAST_GRP,
        max_mcast_qp_attach: DEV_MAX_MCAST_QP_ATTACH,
        max_total_mcast_qp_attach: DEV_MAX_TOTAL_MCAST_QP_ATTACH,
    };
    Ok(((), attr))
}

/// EUI-64 from a MAC, as RoCE devices derive their node GUID.
fn mac_to_guid(mac: [u8; 6]) -> u64 {
    const EUI64_UL_BIT: u8 = 0x02;
    /// The two bytes EUI-64 inserts between the OUI and the NIC-specific half of a MAC.
    const EUI64_FILLER: [u8; 2] = [0xff, 0xfe];
    u64::from_be_bytes([
        mac[0] ^ EUI64_UL_BIT,
        mac[1],
        mac[2],
        EUI64_FILLER[0],
        EUI64_FILLER[1],
        mac[3],
        mac[4],
        mac[5],
    ])
}

fn query_port(hw: &mut Hw, q: &QueryCmd) -> AdminResult<((), PortAttr)> {
    if q.index != PORT_NUM as u32 {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    const IB_WIDTH_4X: u8 = 2;
    const IB_SPEED_EDR: u8 = 32;
    let attr = PortAttr {
        state: hw.port_state,
        max_mtu: MTU_4096,
        active_mtu: MTU_4096,
        phys_state: if hw.port_state == PORT_ACTIVE {
            PHYS_STATE_LINK_UP
        } else {
            PHYS_STATE_DISABLED
        },
        gid_tbl_len: GID_TABLE_LEN,
        max_msg_sz: MAX_MSG_SIZE,
        pkey_tbl_len: 1,
        active_width: IB_WIDTH_4X,
        active_speed: IB_SPEED_EDR,
        mac: hw.mac,
        reserved: [0; 2],
    };
    Ok(((), attr))
}

/// The driver reports its netdev's link state; a change is an async PORT_CHANGE event.
fn set_port_state(hw: &mut Hw, c: &SetPortStateCmd) -> AdminResult {
    if c.port != u32::from(PORT_NUM) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let state = match u8::try_from(c.state) {
        Ok(s @ (PORT_ACTIVE | PORT_DOWN)) => s,
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    };
    if state != hw.port_state {
        hw.port_state = state;
        hw.async_event(EQE_TYPE_PORT_CHANGE, u32::from(PORT_NUM), u32::from(state));
    }
    Ok(())
}

fn set_gid(hw: &mut Hw, c: &SetGidCmd) -> AdminResult {
    let gid = match c.valid {
        0 => None,
        1 if c.gid_type == GID_TYPE_ROCE_UDP_ENCAP => Some(c.gid),
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    };
    if !hw.gids.set(c.index as usize, gid) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    Ok(())
}

/// Take a doorbell slot for new object `object` and zero it: every object's indices start
/// at 0.
pub(super) fn claim_doorbell(
    hw: &mut Hw,
    page: u32,
    slot: u32,
    object: DbObject,
) -> Result<(), u8> {
    if !hw.doorbells_used.claim(page, slot, object) {
        return Err(ADMIN_STATUS_BAD_DOORBELL);
    }
    hw.shared.doorbells.store_a(page, slot, 0);
    hw.shared.doorbells.store_b(page, slot, 0);
    Ok(())
}

/// The next unused number from `next` on, wrapping to `first` past 24 bits (QPNs, and CQ, SRQ
/// and window numbers, which are as wide).
pub(super) fn next_id(next: &mut u32, first: u32, used: impl Fn(u32) -> bool) -> u32 {
    loop {
        let id = *next;
        *next = if Qpn::new(next.wrapping_add(1)).is_none() {
            first
        } else {
            *next + 1
        };
        if !used(id) {
            return id;
        }
    }
}

/// The QUERY_STATS counters: the device's own, with the engine's folded in.
fn query_stats(hw: &mut Hw, engine: &mut Engine) -> Stats {
    let es = engine.stats();
    let mut s = hw.stats;
    s[STAT_RX_ICRC_ERRORS] = es.rx_icrc_errors;
    s[STAT_RX_DROPPED] = es.rx_malformed
        + es.rx_no_qp
        + es.rx_qkey_violations
        + es.rx_bad_pkey
        + es.rx_no_recv_wr
        + es.rx_wrong_source
        + hw.rx_port_down_drops;
    s[STAT_RETRANSMITS] = es.retransmit_timeouts + es.nak_rewinds;
    s[STAT_TIMEOUTS] = es.retransmit_timeouts;
    s[STAT_NAKS_SENT] = es.naks_sent + es.rnr_naks_sent;
    s[STAT_ACKS_SENT] = es.acks_sent;
    s[STAT_DUP_REQUESTS] = es.rx_duplicates;
    s[STAT_RX_UNKNOWN_QP] = es.rx_no_qp;
    s[STAT_RX_BAD_KEY] = es.rx_bad_pkey + es.rx_qkey_violations;
    s[STAT_RX_CNP_DROPPED] = es.rx_cnp_dropped;
    s[STAT_WAKES_TRAPPED] = hw.shared.wakes_trapped.load(Ordering::Relaxed);
    s
}

/// QUERY_COUNTERS of port `q.index` (the device has one port, `PORT_NUM`).
fn query_counters(
    hw: &mut Hw,
    engine: &mut Engine,
    q: &QueryCmd,
) -> AdminResult<(u32, PortCounters)> {
    if q.index != u32::from(PORT_NUM) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let counters = super::counters::port_counters(hw, engine);
    Ok((size_of::<PortCounters>() as u32, counters))
}
