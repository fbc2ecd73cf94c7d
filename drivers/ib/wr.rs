// SPDX-License-Identifier: GPL-2.0
//! Safe views of the work requests kernel consumers post (ib_mad's GSI QP1).

use super::{bindings as b, Verbs};
use core::{marker::PhantomData, ptr};
use kernel::ffi::c_int;

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
    pub(crate) remote_qpn: u32,
    pub(crate) remote_qkey: u32,
}

impl<'a, V: Verbs> SendWr<'a, V> {
    pub(crate) fn wr_id(&self) -> u64 {
        // SAFETY: both members of the union are 64-bit values; any bit pattern is a valid u64.
        unsafe { self.raw.__bindgen_anon_1.wr_id }
    }
    /// `ib_wr_opcode`.
    pub(crate) fn opcode(&self) -> u32 {
        self.raw.opcode
    }
    /// `ib_send_flags`.
    pub(crate) fn send_flags(&self) -> u32 {
        self.raw.send_flags as u32
    }
    /// Immediate data (network order).
    pub(crate) fn imm_data(&self) -> u32 {
        // SAFETY: both members of the union are 32-bit values.
        unsafe { self.raw.ex.imm_data }
    }
    pub(crate) fn sges(&self) -> &'a [b::ib_sge] {
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
                ah: super::device::Obj::<b::ib_ah, V::Ah>::data_of(ud.ah),
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            })
        }
    }
    /// Remote address and rkey of an RDMA WRITE/READ request.
    pub(crate) fn rdma(&self) -> Option<(u64, u32)> {
        match self.raw.opcode {
            b::ib_wr_opcode_IB_WR_RDMA_WRITE
            | b::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | b::ib_wr_opcode_IB_WR_RDMA_READ
                if !self.is_ud =>
            {
                // SAFETY: ib_core's contract: RDMA requests are the `wr` member (first) of an
                // `ib_rdma_wr`.
                let rdma = unsafe { &*ptr::from_ref(self.raw).cast::<b::ib_rdma_wr>() };
                Some((rdma.remote_addr, rdma.rkey))
            }
            _ => None,
        }
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
    pub(crate) fn sges(&self) -> &'a [b::ib_sge] {
        sge_slice(self.raw.sg_list, self.raw.num_sge)
    }
}

fn sge_slice<'a>(list: *const b::ib_sge, num: c_int) -> &'a [b::ib_sge] {
    if list.is_null() || num <= 0 {
        return &[];
    }
    // SAFETY: a work request's `sg_list` holds `num_sge` entries, alive during the post call.
    unsafe { core::slice::from_raw_parts(list, num as usize) }
}
