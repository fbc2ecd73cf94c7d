//! Admin command execution (runs on the data-path thread, which owns every object).

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use super::qp_state::check_modify;
use super::region::{
    pages_cover, region_access_valid, region_fits, FastRegState, Mr, Mw, ODP_PTE_FAILED,
};
use super::ring::{load_page_list, load_ring, posted_entries};
use super::state::{Cq, Hw, Qp, Srq, FIRST_QPN};
use crate::dma::{as_bytes, from_bytes, Pod};
use crate::roce::{AddressVector, Engine, Mtu, QpConfig, QpModify, QpState, QpType};
use core::mem::size_of;
use rox_uapi::ids::{Key, Qpn};

/// A command's outcome: its typed result ([`AdminCommand::Result`]) or an `ADMIN_STATUS_*`.
type AdminResult<T = ()> = Result<T, u8>;

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

/// The capabilities the device reports (REG_CAPS and DeviceAttr::caps): all it defines.
pub const DEVICE_CAPS: u32 = DeviceCaps::ALL.bits();

/// Execute one admin command and build its completion.
pub fn execute(hw: &mut Hw, engine: &mut Engine, cmd: &AdminCmd) -> AdminCpl {
    let payload = &as_bytes(cmd)[size_of::<AdminCmdHdr>()..];
    let r = match cmd.hdr.opcode {
        QueryDevice::OPCODE => run::<QueryDevice>(payload, |c| query_device(hw, c)),
        QueryPort::OPCODE => run::<QueryPort>(payload, |c| query_port(hw, c)),
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
        QueryQp::OPCODE => run::<QueryQp>(payload, |c| query_qp(hw, engine, c)),
        DestroyQp::OPCODE => run::<DestroyQp>(payload, |c| destroy_qp(hw, engine, c.qpn)),
        AttachMcast::OPCODE => run::<AttachMcast>(payload, |c| attach_mcast(hw, c)),
        DetachMcast::OPCODE => run::<DetachMcast>(payload, |c| detach_mcast(hw, c)),
        CreateSrq::OPCODE => run::<CreateSrq>(payload, |c| create_srq(hw, c)),
        ModifySrq::OPCODE => run::<ModifySrq>(payload, |c| modify_srq(hw, c)),
        QuerySrq::OPCODE => run::<QuerySrq>(payload, |c| query_srq(hw, c.handle)),
        DestroySrq::OPCODE => run::<DestroySrq>(payload, |c| destroy_srq(hw, c.handle)),
        QueryStats::OPCODE => run::<QueryStats>(payload, |c| query_stats(hw, engine, c)),
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

fn query_device(hw: &mut Hw, q: &QueryCmd) -> AdminResult {
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
        caps: DEVICE_CAPS,
        max_mw: if DEVICE_CAPS & CAP_MW != 0 {
            DEV_MAX_MW
        } else {
            0
        },
        max_mcast_grp: DEV_MAX_MCAST_GRP,
        max_mcast_qp_attach: DEV_MAX_MCAST_QP_ATTACH,
        max_total_mcast_qp_attach: DEV_MAX_TOTAL_MCAST_QP_ATTACH,
    };
    write_resp(hw, q.resp_addr, as_bytes(&attr))?;
    Ok(())
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

fn query_port(hw: &mut Hw, q: &QueryCmd) -> AdminResult {
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
    write_resp(hw, q.resp_addr, as_bytes(&attr))?;
    Ok(())
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
    let slot = hw
        .gids
        .get_mut(c.index as usize)
        .ok_or(ADMIN_STATUS_BAD_PARAM)?;
    match c.valid {
        0 => *slot = None,
        1 if c.gid_type == GID_TYPE_ROCE_UDP_ENCAP => *slot = Some(c.gid),
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    }
    Ok(())
}

fn reg_mr(hw: &mut Hw, c: &RegMrCmd) -> AdminResult<MrKeys> {
    if c.flags & MR_FLAG_FAST_REG != 0 {
        return alloc_fast_reg_mr(hw, c);
    }
    if !region_access_valid(c.access)
        || c.flags & !(MR_FLAG_PHYSICAL | MR_FLAG_ON_DEMAND) != 0
        || c.flags == MR_FLAG_PHYSICAL | MR_FLAG_ON_DEMAND
        || !region_fits(c.iova, c.length)
    {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mrs.len() >= DEV_MAX_MR as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let physical = c.flags & MR_FLAG_PHYSICAL != 0;
    let odp = c.flags & MR_FLAG_ON_DEMAND != 0;
    let (pages, page_shift) = if physical {
        (Vec::new(), 0)
    } else if odp {
        // Every page starts not present; the driver maps them with ODP_UPDATE.
        let pl = &c.pbl;
        if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&pl.page_shift)
            || pl.npages == 0
            || pl.npages > DEV_MAX_PBL_PAGES
        {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if !pages_cover(
            c.offset_in_first_page.into(),
            c.length,
            pl.npages,
            pl.page_shift,
        ) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        (vec![0; pl.npages as usize], pl.page_shift as u32)
    } else {
        let pages = load_page_list(&hw.mem, &c.pbl)?;
        if !pages_cover(
            c.offset_in_first_page.into(),
            c.length,
            c.pbl.npages,
            c.pbl.page_shift,
        ) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        (pages, c.pbl.page_shift as u32)
    };
    let key = alloc_key(hw);
    hw.mem_table.mrs.insert(
        key.index(),
        Mr {
            key,
            pd: c.pd,
            access: c.access,
            iova: c.iova,
            length: c.length,
            offset: c.offset_in_first_page as u64,
            pages,
            page_shift,
            physical,
            odp,
            fast_reg: None,
        },
    );
    Ok(MrKeys {
        lkey: key,
        rkey: key,
    })
}

/// Allocates a fast-registration region of `pbl.npages` pages capacity in `pd`: no pages, key
/// invalid until a `WR_REG_MR` binds some (the other fields of the command are ignored).
fn alloc_fast_reg_mr(hw: &mut Hw, c: &RegMrCmd) -> AdminResult<MrKeys> {
    if c.flags != MR_FLAG_FAST_REG || c.pbl.npages == 0 || c.pbl.npages > DEV_MAX_FAST_REG_PAGES {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mrs.len() >= DEV_MAX_MR as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let key = alloc_key(hw);
    hw.mem_table.mrs.insert(
        key.index(),
        Mr {
            key,
            pd: c.pd,
            access: 0,
            iova: 0,
            length: 0,
            offset: 0,
            pages: Vec::new(),
            page_shift: u32::from(PAGE_SHIFT_MIN),
            physical: false,
            odp: false,
            fast_reg: Some(FastRegState {
                capacity: c.pbl.npages,
                valid: false,
            }),
        },
    );
    Ok(MrKeys {
        lkey: key,
        rkey: key,
    })
}

/// Maps, unmaps or fails pages of an on-demand region. Admin commands run between data-path
/// passes, so once this returns no access uses an unmapped page.
fn odp_update(hw: &mut Hw, c: &OdpUpdateCmd) -> AdminResult {
    let mr = hw
        .mem_table
        .mr(c.key)
        .map_err(|_| ADMIN_STATUS_BAD_HANDLE)?;
    if !mr.odp {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    let first = c.first_page as usize;
    let end = first
        .checked_add(c.npages as usize)
        .filter(|&end| end <= mr.pages.len() && c.npages != 0)
        .ok_or(ADMIN_STATUS_BAD_PARAM)?;
    let psize = 1u64 << mr.page_shift;
    let new: Vec<u64> = match c.op {
        ODP_OP_MAP => {
            if c.npages > ODP_MAX_UPDATE_PAGES {
                return Err(ADMIN_STATUS_BAD_PARAM);
            }
            let mut bytes = vec![0u8; c.npages as usize * 8];
            hw.mem
                .read(c.pages, &mut bytes)
                .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
            let mut new = Vec::with_capacity(c.npages as usize);
            for (i, b) in bytes.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes(b.try_into().expect("8"));
                if e & ODP_PTE_PRESENT == 0 {
                    new.push(mr.pages[first + i]);
                    continue;
                }
                let addr = e & !ODP_PTE_FLAGS;
                if addr & (psize - 1) != 0 {
                    return Err(ADMIN_STATUS_BAD_PARAM);
                }
                hw.mem
                    .check_access(addr, psize, e & ODP_PTE_WRITE != 0)
                    .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
                new.push(e & ODP_PTE_FLAGS | addr);
            }
            new
        }
        ODP_OP_UNMAP => vec![0; c.npages as usize],
        ODP_OP_FAIL => vec![ODP_PTE_FAILED; c.npages as usize],
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    };
    let mr = hw
        .mem_table
        .mrs
        .get_mut(&c.key.index())
        .expect("looked up above");
    mr.pages[first..end].copy_from_slice(&new);
    Ok(())
}

/// Forgets an MR. Windows bound to it are unbound (their rkeys reach nothing any more) rather
/// than making the deregistration fail as rxe does: a dereg at process teardown cannot fail.
/// An ordinary MR is named by its lkey; a fast-registration region, valid or not, by any key
/// of its index (the consumer may have changed the variant without the driver knowing).
fn dereg_mr(hw: &mut Hw, lkey: Key) -> AdminResult {
    // A window's key names no MR, whatever its index.
    let index = lkey.index();
    let named = !lkey.is_window()
        && hw
            .mem_table
            .mrs
            .get(&index)
            .is_some_and(|mr| mr.key == lkey || mr.fast_reg.is_some());
    if !named {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    hw.mem_table.mrs.remove(&index);
    hw.mem_table.unbind_windows_into(index);
    Ok(())
}

fn alloc_mw(hw: &mut Hw, c: &AllocMwCmd) -> AdminResult<Key> {
    if !matches!(c.mw_type, MW_TYPE_1 | MW_TYPE_2) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mws.len() >= DEV_MAX_MW as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let mws = &hw.mem_table.mws;
    let index = next_id(&mut hw.next_mw, 1, |i| {
        i > Key::MAX_INDEX || mws.contains_key(&i)
    });
    // The first rkey's key part is random too; binds change it (librox increments it for type
    // 1 windows, the binder chooses it for type 2).
    let rkey = Key::window(index, random_key_part());
    hw.mem_table.mws.insert(
        index,
        Mw {
            pd: c.pd,
            mw_type: c.mw_type,
            rkey,
            binding: None,
        },
    );
    Ok(rkey)
}

fn dealloc_mw(hw: &mut Hw, rkey: Key) -> AdminResult {
    if !rkey.is_window() {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    hw.mem_table
        .mws
        .remove(&rkey.index())
        .map(|_| ())
        .ok_or(ADMIN_STATUS_BAD_HANDLE)
}

/// A fresh MR key: the next free index (counting up, so a freed index is reused last) over a
/// random key part, as HCAs and rxe make them: a peer holding one rkey cannot guess another
/// MR's, nor a later registration's at a reused index.
fn alloc_key(hw: &mut Hw) -> Key {
    // Index 0 is never used.
    loop {
        let index = hw.next_mr_index;
        hw.next_mr_index = if index >= Key::MAX_INDEX {
            1
        } else {
            index + 1
        };
        if !hw.mem_table.mrs.contains_key(&index) {
            return Key::region(index, random_key_part());
        }
    }
}

/// The variable low byte of a new key ([`Key::variant`]), from a generator seeded by the OS.
fn random_key_part() -> u8 {
    rand::random::<u8>()
}

/// Take a doorbell slot for a new object and zero it: every object's indices start at 0.
fn claim_doorbell(hw: &mut Hw, page: u32, slot: u32) -> Result<(), u8> {
    if page >= DB_PAGE_COUNT
        || slot as usize >= DB_SLOTS_PER_PAGE
        || hw.doorbells_used.contains_key(&(page, slot))
    {
        return Err(ADMIN_STATUS_BAD_DOORBELL);
    }
    hw.doorbells_used.insert((page, slot), ());
    hw.shared.doorbells.store_a(page, slot, 0);
    hw.shared.doorbells.store_b(page, slot, 0);
    Ok(())
}

/// The next unused number from `next` on, wrapping to `first` past 24 bits (QPNs, and CQ, SRQ
/// and window numbers, which are as wide).
fn next_id(next: &mut u32, first: u32, used: impl Fn(u32) -> bool) -> u32 {
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

fn create_cq(hw: &mut Hw, c: &CreateCqCmd) -> AdminResult<u32> {
    if c.eqn == EQ_ADMIN_ASYNC || c.eqn >= MAX_EQS {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.cqs.len() >= DEV_MAX_CQ as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let ring = load_ring(
        &hw.mem,
        &c.ring,
        c.log_depth,
        CQE_SHIFT,
        DEV_MAX_LOG_CQ_DEPTH,
    )?;
    claim_doorbell(hw, c.db_page, c.db_slot)?;
    let cqs = &hw.cqs;
    let id = next_id(&mut hw.next_cq, 1, |id| cqs.contains_key(&id));
    hw.cqs.insert(
        id,
        Cq {
            ring,
            eqn: c.eqn,
            db_page: c.db_page,
            db_slot: c.db_slot,
            pi: 0,
            arm_seq: 0,
            armed: 0,
            error: false,
            users: 0,
        },
    );
    Ok(id)
}

/// Moves a CQ to a new ring. It is refused if the new ring cannot hold the completions the
/// CQ already owes: its unconsumed CQEs plus every send WR posted to a QP that completes into
/// it (taken by the engine or still in the SQ) — those complete whatever happens next, and a
/// smaller ring would overrun.
fn resize_cq(hw: &mut Hw, engine: &Engine, c: &ResizeCqCmd) -> AdminResult<u32> {
    let cq = hw.cqs.get(&c.cq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let ring = load_ring(
        &hw.mem,
        &c.ring,
        c.log_depth,
        CQE_SHIFT,
        DEV_MAX_LOG_CQ_DEPTH,
    )?;
    let ci = hw.shared.doorbells.slot(cq.db_page, cq.db_slot).a;
    let pending = cq.pi.wrapping_sub(ci);
    let owed: u64 = hw
        .qps
        .values()
        .filter(|qp| qp.send_cq == c.cq)
        .map(|qp| {
            let pi = hw.shared.doorbells.slot(qp.db_page, qp.db_slot).a;
            let unfetched = posted_entries(pi, qp.sq_ci, qp.sq.depth).unwrap_or(0);
            u64::from(unfetched) + engine.sq_outstanding(qp.qpn) as u64
        })
        .sum();
    if cq.error || pending > cq.ring.depth || u64::from(pending) + owed > u64::from(ring.depth) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    // Unconsumed CQEs move to the same indices; every other slot is made not valid for the
    // next index that will land on it, so the new ring reads empty beyond the producer index.
    for k in 0..ring.depth {
        let index = ci.wrapping_add(k);
        let mut cqe = if k < pending {
            hw.mem
                .read_obj::<Cqe>(cq.ring.entry_addr(index))
                .map_err(|_| ADMIN_STATUS_BAD_DMA)?
        } else {
            Cqe::default()
        };
        let valid = owner_for(index, ring.depth);
        cqe.owner = if k < pending { valid } else { valid ^ 1 };
        hw.mem
            .write_entry_owner_last(ring.entry_addr(index), &cqe)
            .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
    }
    let depth = ring.depth;
    hw.cqs.get_mut(&c.cq).expect("looked up above").ring = ring;
    Ok(depth)
}

fn destroy_cq(hw: &mut Hw, id: u32) -> AdminResult {
    let cq = hw.cqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if cq.users != 0 {
        return Err(ADMIN_STATUS_BUSY);
    }
    let cq = hw.cqs.remove(&id).expect("present");
    hw.doorbells_used.remove(&(cq.db_page, cq.db_slot));
    Ok(())
}

fn create_srq(hw: &mut Hw, c: &CreateSrqCmd) -> AdminResult<u32> {
    if hw.srqs.len() >= DEV_MAX_SRQ as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let ring = load_ring(
        &hw.mem,
        &c.ring,
        c.log_depth,
        RQ_WQE_SHIFT,
        DEV_MAX_LOG_WQ_DEPTH,
    )?;
    if c.limit > ring.depth {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    claim_doorbell(hw, c.db_page, c.db_slot)?;
    let srqs = &hw.srqs;
    let id = next_id(&mut hw.next_srq, 1, |id| srqs.contains_key(&id));
    hw.srqs.insert(
        id,
        Srq {
            pd: c.pd,
            ring,
            db_page: c.db_page,
            db_slot: c.db_slot,
            ci: 0,
            limit: c.limit,
            users: 0,
            error: false,
        },
    );
    Ok(id)
}

fn modify_srq(hw: &mut Hw, c: &ModifySrqCmd) -> AdminResult {
    let srq = hw.srqs.get(&c.srq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if c.attr_mask & !(SRQ_ATTR_LIMIT | SRQ_ATTR_MAX_WR) != 0 {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    // Resize: the new ring must hold every WQE posted and not yet taken; software copied
    // them to the same indices, so reading goes on at `ci` in the new ring.
    let new_ring = if c.attr_mask & SRQ_ATTR_MAX_WR != 0 {
        let ring = load_ring(
            &hw.mem,
            &c.ring,
            c.log_depth,
            RQ_WQE_SHIFT,
            DEV_MAX_LOG_WQ_DEPTH,
        )?;
        let pi = hw.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
        let posted = pi.wrapping_sub(srq.ci);
        if srq.error || posted > srq.ring.depth || posted > ring.depth {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        Some(ring)
    } else {
        None
    };
    let depth = new_ring.as_ref().map_or(srq.ring.depth, |r| r.depth);
    let limit = if c.attr_mask & SRQ_ATTR_LIMIT != 0 {
        c.limit
    } else {
        srq.limit
    };
    if limit > depth {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let srq = hw.srqs.get_mut(&c.srq).expect("looked up above");
    if let Some(ring) = new_ring {
        srq.ring = ring;
    }
    srq.limit = limit;
    Ok(())
}

fn query_srq(hw: &mut Hw, id: u32) -> AdminResult<SrqCounts> {
    let srq = hw.srqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let pi = hw.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
    Ok(SrqCounts {
        limit: srq.limit,
        posted: pi.wrapping_sub(srq.ci).min(srq.ring.depth),
    })
}

fn destroy_srq(hw: &mut Hw, id: u32) -> AdminResult {
    let srq = hw.srqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if srq.users != 0 {
        return Err(ADMIN_STATUS_BUSY);
    }
    let srq = hw.srqs.remove(&id).expect("present");
    hw.doorbells_used.remove(&(srq.db_page, srq.db_slot));
    Ok(())
}

fn qp_type_of(t: u8) -> Option<QpType> {
    match t {
        QPT_RC => Some(QpType::Rc),
        QPT_UC => Some(QpType::Uc),
        QPT_UD | QPT_GSI => Some(QpType::Ud),
        _ => None,
    }
}

fn create_qp(hw: &mut Hw, engine: &mut Engine, c: &CreateQpCmd) -> AdminResult<Qpn> {
    let qp_type = qp_type_of(c.qp_type).ok_or(ADMIN_STATUS_BAD_PARAM)?;
    if hw.qps.len() >= DEV_MAX_QP as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    if c.qp_type == QPT_GSI && hw.qps.contains_key(&Qpn::GSI) {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    if !hw.cqs.contains_key(&c.send_cq) || !hw.cqs.contains_key(&c.recv_cq) {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    if c.srq != SRQ_NONE {
        let srq = hw.srqs.get(&c.srq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if srq.pd != c.pd {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
    }
    let sq = load_ring(
        &hw.mem,
        &c.sq,
        c.log_sq_depth,
        SQ_WQE_SHIFT,
        DEV_MAX_LOG_WQ_DEPTH,
    )?;
    let rq = if c.srq == SRQ_NONE {
        Some(load_ring(
            &hw.mem,
            &c.rq,
            c.log_rq_depth,
            RQ_WQE_SHIFT,
            DEV_MAX_LOG_WQ_DEPTH,
        )?)
    } else {
        None
    };
    claim_doorbell(hw, c.db_page, c.db_slot)?;
    let qpn = if c.qp_type == QPT_GSI {
        Qpn::GSI
    } else {
        let qps = &hw.qps;
        let first = FIRST_QPN.get();
        Qpn::from_raw(next_id(&mut hw.next_qpn, first, |n| {
            qps.contains_key(&Qpn::from_raw(n))
        }))
    };
    let cfg = QpConfig {
        qpn,
        qp_type,
        pd: c.pd,
        uses_srq: c.srq != SRQ_NONE,
    };
    if engine.create_qp(cfg).is_err() {
        hw.doorbells_used.remove(&(c.db_page, c.db_slot));
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    for cq in [c.send_cq, c.recv_cq] {
        hw.cqs.get_mut(&cq).expect("checked").users += 1;
    }
    if let Some(srq) = hw.srqs.get_mut(&c.srq) {
        srq.users += 1;
    }
    hw.qps.insert(
        qpn,
        Qp {
            qpn,
            qp_type: c.qp_type,
            pd: c.pd,
            send_cq: c.send_cq,
            recv_cq: c.recv_cq,
            srq: c.srq,
            sq,
            rq,
            db_page: c.db_page,
            db_slot: c.db_slot,
            sq_sig_all: c.sq_sig_all != 0,
            sq_ci: 0,
            rq_ci: 0,
            rq_pi_seen: 0,
            attr: QpAttr {
                qp_state: QPS_RESET,
                port_num: PORT_NUM,
                ..Default::default()
            },
            broken: false,
        },
    );
    Ok(qpn)
}

fn state_of(s: QpState) -> u8 {
    s as u8
}

/// A state the device stored (always a valid one; anything else reads as ERR).
fn qp_state_enum(s: u8) -> QpState {
    QpState::from_u8(s).unwrap_or(QpState::Err)
}

/// The current state: the engine may have moved the QP to ERR by itself.
pub fn current_state(hw: &Hw, engine: &Engine, qpn: Qpn) -> u8 {
    let mine = hw.qps.get(&qpn).map(|q| q.attr.qp_state).unwrap_or(QPS_ERR);
    match engine.qp_state(qpn) {
        Some(s) if state_of(s) == QPS_ERR => QPS_ERR,
        Some(s) if state_of(s) == QPS_SQE => QPS_SQE,
        _ => mine,
    }
}

fn modify_qp(hw: &mut Hw, engine: &mut Engine, c: &ModifyQpCmd) -> AdminResult<u32> {
    let qp = hw.qps.get(&c.qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let qp_type = qp.qp_type;
    let cur = current_state(hw, engine, c.qpn);
    let m = c.attr_mask;
    let a = &c.attr;
    let next = check_modify(qp_type, cur, m, a, DEV_MAX_RD_ATOMIC, &hw.gid_valid())
        .map_err(|e| e.status())?;
    let sgid = if m & QP_AV != 0 {
        hw.gids[a.ah.sgid_index as usize]
    } else {
        None
    };
    let mut md = QpModify {
        state: Some(qp_state_enum(next)),
        ..Default::default()
    };
    if m & QP_PATH_MTU != 0 {
        md.path_mtu = Mtu::from_u8(a.path_mtu);
    }
    if m & QP_DEST_QPN != 0 {
        md.dest_qpn = Some(a.dest_qp_num);
    }
    if m & QP_RQ_PSN != 0 {
        md.rq_psn = Some(a.rq_psn);
    }
    if m & QP_SQ_PSN != 0 {
        md.sq_psn = Some(a.sq_psn);
    }
    if m & QP_TIMEOUT != 0 {
        md.timeout = Some(a.timeout);
    }
    if m & QP_RETRY_CNT != 0 {
        md.retry_cnt = Some(a.retry_cnt);
    }
    if m & QP_RNR_RETRY != 0 {
        md.rnr_retry = Some(a.rnr_retry);
    }
    if m & QP_MIN_RNR_TIMER != 0 {
        md.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if m & QP_MAX_QP_RD_ATOMIC != 0 {
        md.max_rd_atomic = Some(a.max_rd_atomic);
    }
    if m & QP_MAX_DEST_RD_ATOMIC != 0 {
        md.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    if m & QP_QKEY != 0 {
        md.qkey = Some(a.qkey);
    }
    if m & QP_ACCESS_FLAGS != 0 {
        md.access_flags = Some(a.qp_access_flags);
    }
    if let Some(sgid) = sgid {
        md.av = Some(AddressVector {
            dgid: a.ah.dgid,
            sgid,
            traffic_class: a.ah.traffic_class,
            hop_limit: a.ah.hop_limit,
            flow_label: a.ah.flow_label,
            dmac: a.ah.dmac,
        });
    }
    engine
        .modify_qp(hw, c.qpn, &md)
        .map_err(|_| ADMIN_STATUS_BAD_STATE)?;
    let qp = hw.qps.get_mut(&c.qpn).expect("checked");
    let at = &mut qp.attr;
    macro_rules! keep {
        ($bit:expr, $($f:ident).+) => {
            if m & $bit != 0 {
                at.$($f).+ = a.$($f).+;
            }
        };
    }
    keep!(QP_PATH_MTU, path_mtu);
    keep!(QP_TIMEOUT, timeout);
    keep!(QP_RETRY_CNT, retry_cnt);
    keep!(QP_RNR_RETRY, rnr_retry);
    keep!(QP_MIN_RNR_TIMER, min_rnr_timer);
    keep!(QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
    keep!(QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    keep!(QP_PKEY_INDEX, pkey_index);
    keep!(QP_PORT, port_num);
    keep!(QP_ACCESS_FLAGS, qp_access_flags);
    keep!(QP_QKEY, qkey);
    keep!(QP_RQ_PSN, rq_psn);
    keep!(QP_SQ_PSN, sq_psn);
    keep!(QP_DEST_QPN, dest_qp_num);
    keep!(QP_AV, ah);
    if next == QPS_SQD && cur != QPS_SQD {
        // The notification request belongs to this RTS -> SQD transition only.
        at.en_sqd_async_notify = if m & QP_EN_SQD_ASYNC_NOTIFY != 0 {
            a.en_sqd_async_notify
        } else {
            0
        };
    }
    at.qp_state = next;
    // Entering ERR, the engine reported LAST_WQE for a QP with an SRQ.
    if next == QPS_RESET {
        // RESET empties the work queues: the slot and all indices start again at 0 (software
        // resets its producer indices to 0 too, as after create).
        hw.shared.doorbells.store_a(qp.db_page, qp.db_slot, 0);
        hw.shared.doorbells.store_b(qp.db_page, qp.db_slot, 0);
        qp.sq_ci = 0;
        qp.rq_ci = 0;
        qp.rq_pi_seen = 0;
        qp.broken = false;
        qp.attr = QpAttr {
            qp_state: QPS_RESET,
            port_num: PORT_NUM,
            ..Default::default()
        };
    }
    Ok(next as u32)
}

fn query_qp(hw: &mut Hw, engine: &mut Engine, q: &QueryCmd) -> AdminResult<u32> {
    // index = QPN: a word wider than 24 bits names no QP.
    let qpn = Qpn::from_raw(q.index);
    let qp = hw.qps.get(&qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let mut attr = qp.attr;
    attr.qp_state = current_state(hw, engine, qpn);
    attr.cur_qp_state = attr.qp_state;
    attr.sq_draining = u8::from(engine.sq_draining(qpn));
    write_resp(hw, q.resp_addr, as_bytes(&attr))?;
    Ok(attr.qp_state as u32)
}

fn destroy_qp(hw: &mut Hw, engine: &mut Engine, qpn: Qpn) -> AdminResult {
    let qp = hw.qps.remove(&qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let _ = engine.destroy_qp(qpn);
    hw.doorbells_used.remove(&(qp.db_page, qp.db_slot));
    for cq in [qp.send_cq, qp.recv_cq] {
        if let Some(cq) = hw.cqs.get_mut(&cq) {
            cq.users -= 1;
        }
    }
    if let Some(srq) = hw.srqs.get_mut(&qp.srq) {
        srq.users -= 1;
    }
    // A type 2 window bound to the QP dies with it: a later QP that reuses the number must
    // not inherit the binding.
    for mw in hw.mem_table.mws.values_mut() {
        if mw.binding.is_some_and(|b| b.qpn == Some(qpn)) {
            mw.binding = None;
        }
    }
    // So do its multicast attachments (ib_core detaches first; this covers any other driver).
    hw.mcast.retain(|_, members| {
        members.retain(|&m| m != qpn);
        !members.is_empty()
    });
    Ok(())
}

fn attach_mcast(hw: &mut Hw, c: &McastCmd) -> AdminResult {
    let qp = hw.qps.get(&c.qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if qp.qp_type != QPT_UD || !is_multicast_gid(&c.gid) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let total = hw.mcast_attachments();
    let groups = hw.mcast.len();
    match hw.mcast.get_mut(&c.gid) {
        Some(members) if members.contains(&c.qpn) => {}
        Some(members) => {
            if members.len() >= DEV_MAX_MCAST_QP_ATTACH as usize
                || total >= DEV_MAX_TOTAL_MCAST_QP_ATTACH as usize
            {
                return Err(ADMIN_STATUS_NO_RESOURCES);
            }
            members.push(c.qpn);
        }
        None => {
            if groups >= DEV_MAX_MCAST_GRP as usize
                || total >= DEV_MAX_TOTAL_MCAST_QP_ATTACH as usize
            {
                return Err(ADMIN_STATUS_NO_RESOURCES);
            }
            hw.mcast.insert(c.gid, vec![c.qpn]);
        }
    }
    Ok(())
}

fn detach_mcast(hw: &mut Hw, c: &McastCmd) -> AdminResult {
    let members = hw.mcast.get_mut(&c.gid).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let at = members
        .iter()
        .position(|&m| m == c.qpn)
        .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    members.remove(at);
    if members.is_empty() {
        hw.mcast.remove(&c.gid);
    }
    Ok(())
}

fn query_stats(hw: &mut Hw, engine: &mut Engine, q: &QueryCmd) -> AdminResult<u32> {
    let es = engine.stats();
    let mut s = hw.stats;
    s[STAT_RX_PACKETS] = es.rx_packets;
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
    let bytes: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_resp(hw, q.resp_addr, &bytes)?;
    Ok(STATS_COUNT as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{payload, TestDriver};
    use crate::DeviceConfig;

    #[test]
    fn mr_keys_have_a_random_key_part_under_a_unique_index() {
        let mut d = TestDriver::new(DeviceConfig::new([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        let buf = d.ram.alloc(4096, 4096);
        let keys: Vec<Key> = (0..32)
            .map(|_| d.reg_mr(7, buf, 4096, ACCESS_LOCAL_WRITE).expect("reg_mr"))
            .collect();
        let words: Vec<u32> = keys.iter().map(|k| k.get()).collect();
        let mut indices: Vec<u32> = keys.iter().map(|k| k.index()).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), keys.len(), "one index per MR: {words:x?}");
        assert!(keys.iter().all(|k| !k.is_window() && k.index() != 0));
        // A counter gives 31 successors in a row; 32 random bytes give about 0.1.
        let successors = words.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(successors <= 3, "sequential keys: {words:x?}");
        // A deregistered key is gone.
        let old = keys[0];
        let cmd = KeyCmd {
            key: old,
            reserved: 0,
        };
        assert_eq!(
            d.admin(ADMIN_OP_DEREG_MR, payload(&cmd)).status,
            ADMIN_STATUS_SUCCESS
        );
        assert_eq!(
            d.admin(ADMIN_OP_DEREG_MR, payload(&cmd)).status,
            ADMIN_STATUS_BAD_HANDLE
        );
    }
}
