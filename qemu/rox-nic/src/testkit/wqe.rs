//! Work request builders: the WQEs a test posts.

use super::*;

pub fn recv_wqe(wr_id: u64, sges: &[Sge]) -> RqWqe {
    let mut w = RqWqe {
        wr_id,
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    w.sge[..sges.len()].copy_from_slice(sges);
    w
}

/// One scatter/gather element (`lkey` names the MR).
pub fn sge(addr: u64, length: u32, lkey: Key) -> Sge {
    Sge { addr, length, lkey }
}

/// A send WQE with SGEs.
pub fn send_wqe(wr_id: u64, opcode: u8, flags: u8, sges: &[Sge]) -> SqWqe {
    let mut w = SqWqe::new(wr_id, opcode, flags);
    w.num_sge = sges.len() as u8;
    for (i, s) in sges.iter().enumerate() {
        w.data[i * size_of::<Sge>()..(i + 1) * size_of::<Sge>()].copy_from_slice(as_bytes(s));
    }
    w
}

/// A send WQE with inline payload.
pub fn inline_wqe(wr_id: u64, opcode: u8, flags: u8, bytes: &[u8]) -> SqWqe {
    let mut w = send_wqe(wr_id, opcode, flags | WQE_FLAG_INLINE, &[]);
    w.inline_len = bytes.len() as u32;
    w.data[..bytes.len()].copy_from_slice(bytes);
    w
}

pub fn with_rdma(mut w: SqWqe, remote_addr: u64, rkey: Key) -> SqWqe {
    w.seg = SqSeg::remote(remote_addr, rkey);
    w
}

/// A signaled RDMA WQE of `opcode` (WRITE, READ, ...) with one SGE, to `remote_addr` through
/// `rkey`.
pub fn rdma_wqe(wr_id: u64, opcode: u8, sge: Sge, remote_addr: u64, rkey: Key) -> SqWqe {
    with_rdma(
        send_wqe(wr_id, opcode, WQE_FLAG_SIGNALED, &[sge]),
        remote_addr,
        rkey,
    )
}

pub fn with_atomic(
    mut w: SqWqe,
    remote_addr: u64,
    rkey: Key,
    compare_add: u64,
    swap: u64,
) -> SqWqe {
    w.seg = SqSeg::atomic(remote_addr, rkey, compare_add, swap);
    w
}

pub fn with_ud(mut w: SqWqe, dgid: [u8; 16], dest_qpn: Qpn, qkey: u32) -> SqWqe {
    w.seg = SqSeg {
        ud: UdSeg {
            dgid,
            dest_qpn,
            qkey,
            hop_limit: 64,
            dmac: test_mac(&dgid),
            ..Default::default()
        },
    };
    w
}

/// A signaled UD WQE (`wr_id`, `opcode`) gathering `sge`, to QP `dest_qpn` at `dgid` with
/// `qkey`.
pub fn ud_wqe(wr_id: u64, opcode: u8, sge: Sge, dgid: [u8; 16], dest_qpn: Qpn, qkey: u32) -> SqWqe {
    with_ud(
        send_wqe(wr_id, opcode, WQE_FLAG_SIGNALED, &[sge]),
        dgid,
        dest_qpn,
        qkey,
    )
}
