// SPDX-License-Identifier: GPL-2.0
//! Safe views of the work requests kernel consumers post (ib_mad's GSI QP1, nvme-rdma,
//! xprtrdma, ...): the common part, and the part of the containing structure (`ib_ud_wr`,
//! `ib_rdma_wr`, `ib_atomic_wr`, `ib_reg_wr`) its opcode names. The keys and QP numbers ib_core
//! carries as u32 are handed out as [`Key`] and [`Qpn`].

use super::{attr::ib_flags, bindings as b, Verbs};
use crate::hw::uapi::ids::{Key, Qpn};
use core::{marker::PhantomData, ptr};
use kernel::{ffi::c_int, prelude::*};

/// The opcode of a kernel send work request (`enum ib_wr_opcode`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrOpcode {
    RdmaWrite,
    RdmaWriteWithImm,
    Send,
    SendWithImm,
    RdmaRead,
    AtomicCmpAndSwp,
    AtomicFetchAndAdd,
    LocalInv,
    BindMw,
    SendWithInv,
    Lso,
    RdmaReadWithInv,
    MaskedAtomicCmpAndSwp,
    MaskedAtomicFetchAndAdd,
    Flush,
    AtomicWrite,
    RegMr,
    RegMrIntegrity,
}

impl WrOpcode {
    fn from_raw(raw: b::ib_wr_opcode) -> Option<Self> {
        Some(match raw {
            b::ib_wr_opcode_IB_WR_RDMA_WRITE => Self::RdmaWrite,
            b::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM => Self::RdmaWriteWithImm,
            b::ib_wr_opcode_IB_WR_SEND => Self::Send,
            b::ib_wr_opcode_IB_WR_SEND_WITH_IMM => Self::SendWithImm,
            b::ib_wr_opcode_IB_WR_RDMA_READ => Self::RdmaRead,
            b::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP => Self::AtomicCmpAndSwp,
            b::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => Self::AtomicFetchAndAdd,
            b::ib_wr_opcode_IB_WR_LOCAL_INV => Self::LocalInv,
            b::ib_wr_opcode_IB_WR_BIND_MW => Self::BindMw,
            b::ib_wr_opcode_IB_WR_SEND_WITH_INV => Self::SendWithInv,
            b::ib_wr_opcode_IB_WR_LSO => Self::Lso,
            b::ib_wr_opcode_IB_WR_RDMA_READ_WITH_INV => Self::RdmaReadWithInv,
            b::ib_wr_opcode_IB_WR_MASKED_ATOMIC_CMP_AND_SWP => Self::MaskedAtomicCmpAndSwp,
            b::ib_wr_opcode_IB_WR_MASKED_ATOMIC_FETCH_AND_ADD => Self::MaskedAtomicFetchAndAdd,
            b::ib_wr_opcode_IB_WR_FLUSH => Self::Flush,
            b::ib_wr_opcode_IB_WR_ATOMIC_WRITE => Self::AtomicWrite,
            b::ib_wr_opcode_IB_WR_REG_MR => Self::RegMr,
            b::ib_wr_opcode_IB_WR_REG_MR_INTEGRITY => Self::RegMrIntegrity,
            _ => return None,
        })
    }
}

ib_flags! {
    /// Flags of a kernel send work request (`ib_send_flags`).
    SendFlags: u32 {
        FENCE = b::ib_send_flags_IB_SEND_FENCE;
        SIGNALED = b::ib_send_flags_IB_SEND_SIGNALED;
        SOLICITED = b::ib_send_flags_IB_SEND_SOLICITED;
        INLINE = b::ib_send_flags_IB_SEND_INLINE;
    }
}

/// One scatter/gather entry of a kernel work request (`ib_sge`).
#[repr(transparent)]
pub(crate) struct Sge(b::ib_sge);

impl Sge {
    /// DMA address (or, for inline sends, kernel virtual address).
    pub(crate) fn addr(&self) -> u64 {
        self.0.addr
    }
    pub(crate) fn length(&self) -> u32 {
        self.0.length
    }
    pub(crate) fn lkey(&self) -> Key {
        Key::from_raw(self.0.lkey)
    }
}

/// A send work request of a kernel consumer.
pub(crate) struct SendWr<'a, V: Verbs> {
    pub(super) raw: &'a b::ib_send_wr,
    /// Posted to a UD or GSI QP: the request is an `ib_ud_wr`.
    pub(super) is_ud: bool,
    pub(super) _verbs: PhantomData<V>,
}

/// The datagram part of a send work request to a UD/GSI QP.
pub(crate) struct UdWr<'a, V: Verbs> {
    pub(crate) ah: &'a V::Ah,
    pub(crate) remote_qpn: Qpn,
    pub(crate) remote_qkey: u32,
}

impl<'a, V: Verbs> SendWr<'a, V> {
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: both members of the union are 64-bit values; any bit pattern is a valid u64.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }
    /// The opcode; None for a number this driver does not know.
    pub(crate) fn opcode(&self) -> Option<WrOpcode> {
        WrOpcode::from_raw(self.raw.opcode)
    }
    pub(crate) fn send_flags(&self) -> SendFlags {
        SendFlags::from_bits(self.raw.send_flags as u32)
    }
    /// Immediate data (network order).
    pub(crate) fn imm_data(&self) -> u32 {
        // SAFETY: both members of the union are 32-bit values.
        unsafe { self.raw.ex.imm_data }
    }
    pub(crate) fn sges(&self) -> &'a [Sge] {
        sge_slice(self.raw.sg_list, self.raw.num_sge)
    }
    pub(crate) fn ud(&self) -> Option<UdWr<'a, V>> {
        if !self.is_ud {
            return None;
        }
        // SAFETY: ib_core's contract: every WR posted to a UD/GSI QP is the `wr` member (first)
        // of an `ib_ud_wr`, whose AH belongs to this device and outlives the call.
        unsafe {
            let ud = &*ptr::from_ref(self.raw).cast::<b::ib_ud_wr>();
            if ud.ah.is_null() {
                return None;
            }
            Some(UdWr {
                ah: super::obj::Obj::<b::ib_ah, V::Ah>::data_of(ud.ah),
                remote_qpn: Qpn::from_raw(ud.remote_qpn),
                remote_qkey: ud.remote_qkey,
            })
        }
    }
    /// Remote address and rkey of an RDMA WRITE/READ request.
    pub(crate) fn rdma(&self) -> Option<(u64, Key)> {
        match self.raw.opcode {
            b::ib_wr_opcode_IB_WR_RDMA_WRITE
            | b::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | b::ib_wr_opcode_IB_WR_RDMA_READ
                if !self.is_ud =>
            {
                // SAFETY: ib_core's contract: RDMA requests are the `wr` member (first) of an
                // `ib_rdma_wr`.
                let rdma = unsafe { &*ptr::from_ref(self.raw).cast::<b::ib_rdma_wr>() };
                Some((rdma.remote_addr, Key::from_raw(rdma.rkey)))
            }
            _ => None,
        }
    }
}

/// The atomic part of an `IB_WR_ATOMIC_CMP_AND_SWP` / `IB_WR_ATOMIC_FETCH_AND_ADD` request.
pub(crate) struct AtomicWr {
    pub(crate) remote_addr: u64,
    pub(crate) rkey: Key,
    /// CMP_AND_SWP: the compare value; FETCH_AND_ADD: the value to add.
    pub(crate) compare_add: u64,
    /// CMP_AND_SWP: the swap value.
    pub(crate) swap: u64,
}

/// The fast registration of an `IB_WR_REG_MR` request: the MR (its driver data and the
/// mapping `ib_map_mr_sg` gave it), the key it gets and the access it grants.
pub(crate) struct RegWr<'a, V: Verbs> {
    pub(crate) mr: &'a V::Mr,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    /// The page size `ib_map_mr_sg` mapped the MR with.
    pub(crate) page_size: u32,
    /// The MR's key with the variant the consumer chose (`ib_update_fast_reg_key`).
    pub(crate) key: Key,
    /// `ib_access_flags`.
    pub(crate) access: u32,
}

impl<'a, V: Verbs> SendWr<'a, V> {
    /// The rkey a SEND_WITH_INV or LOCAL_INV request invalidates.
    pub(crate) fn invalidate_rkey(&self) -> Key {
        // SAFETY: both members of the union are 32-bit values.
        let word = unsafe { self.raw.ex.invalidate_rkey };
        Key::from_raw(word)
    }

    pub(crate) fn atomic(&self) -> Option<AtomicWr> {
        match self.raw.opcode {
            b::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP
            | b::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD
                if !self.is_ud =>
            {
                // SAFETY: ib_core's contract: atomic requests are the `wr` member (first) of an
                // `ib_atomic_wr`.
                let a = unsafe { &*ptr::from_ref(self.raw).cast::<b::ib_atomic_wr>() };
                Some(AtomicWr {
                    remote_addr: a.remote_addr,
                    rkey: Key::from_raw(a.rkey),
                    compare_add: a.compare_add,
                    swap: a.swap,
                })
            }
            _ => None,
        }
    }

    pub(crate) fn reg(&self) -> Option<RegWr<'a, V>> {
        if self.raw.opcode != b::ib_wr_opcode_IB_WR_REG_MR || self.is_ud {
            return None;
        }
        // SAFETY: ib_core's contract: REG_MR requests are the `wr` member (first) of an
        // `ib_reg_wr` whose MR belongs to this device and stays alive during the call. Every
        // MR of a `V` device is made by `obj::new_mr` (reg_user_mr, get_dma_mr, alloc_mr),
        // hence an `Obj<ib_mr, V::Mr>` with initialised data; whether it is a
        // fast-registration MR is the driver's check.
        unsafe {
            let reg = &*ptr::from_ref(self.raw).cast::<b::ib_reg_wr>();
            if reg.mr.is_null() {
                return None;
            }
            let mr = &*reg.mr;
            Some(RegWr {
                mr: super::obj::Obj::<b::ib_mr, V::Mr>::data_of(reg.mr),
                iova: mr.iova,
                length: mr.length,
                page_size: mr.page_size,
                key: Key::from_raw(reg.key),
                access: reg.access as u32,
            })
        }
    }

    /// `IB_SEND_INLINE`: copies the bytes the SGEs name (kernel virtual addresses, as the
    /// verbs define for inline sends) into `out`; returns how many. EINVAL if they do not fit.
    pub(crate) fn copy_inline(&self, out: &mut [u8]) -> Result<usize> {
        let mut len = 0usize;
        for sge in self.sges() {
            let n = sge.length() as usize;
            let dst = out
                .get_mut(len..len.checked_add(n).ok_or(EINVAL)?)
                .ok_or(EINVAL)?;
            if n > 0 {
                // SAFETY: ib_core's contract for `IB_SEND_INLINE`: each SGE's `addr` is a kernel
                // virtual address of `length` readable bytes, valid during the post call (the
                // device never sees it: the bytes are copied into the WQE here).
                let src =
                    unsafe { core::slice::from_raw_parts(sge.addr() as usize as *const u8, n) };
                dst.copy_from_slice(src);
            }
            len += n;
        }
        Ok(len)
    }
}

/// A receive work request of a kernel consumer.
pub(crate) struct RecvWr<'a> {
    pub(super) raw: &'a b::ib_recv_wr,
}

impl<'a> RecvWr<'a> {
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: both members of the union are 64-bit values.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }
    pub(crate) fn sges(&self) -> &'a [Sge] {
        sge_slice(self.raw.sg_list, self.raw.num_sge)
    }
}

fn sge_slice<'a>(list: *const b::ib_sge, num: c_int) -> &'a [Sge] {
    if list.is_null() || num <= 0 {
        return &[];
    }
    // SAFETY: a work request's `sg_list` holds `num_sge` entries, alive during the post call;
    // `Sge` is `repr(transparent)` over `ib_sge`.
    unsafe { core::slice::from_raw_parts(list.cast::<Sge>(), num as usize) }
}
