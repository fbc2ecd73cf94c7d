//! Work requests as the application hands them over (`ibv_send_wr` / `ibv_recv_wr` lists and
//! the buffers they name), read through safe views: which union member a WR carries depends on
//! its opcode and QP type, so the logic (crate::qp) picks the accessor; every pointer the
//! application passes (SGE list, inline buffers, AH, window, MR) is followed only here. Keys
//! and QP numbers leave here typed (`Key`, `Qpn`): the application's u32s are converted once,
//! by these accessors.

use crate::ah::RoxAh;
use crate::sys::errno::{Result, EINVAL};
use crate::sys::ffi;
use crate::sys::objects;
use crate::wqe::BindInfo;
use core::ffi::{c_int, c_void};
use core::marker::PhantomData;
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::Sge;

/// A buffer of the application, readable for `len` bytes while `'a` lasts.
#[derive(Clone, Copy)]
pub struct UserBuf<'a> {
    addr: *const u8,
    len: usize,
    _buf: PhantomData<&'a [u8]>,
}

impl<'a> UserBuf<'a> {
    /// # Safety
    /// `addr` is readable for `len` bytes during `'a` (`len` 0: any address).
    pub unsafe fn new(addr: *const c_void, len: usize) -> Self {
        UserBuf {
            addr: addr.cast(),
            len,
            _buf: PhantomData,
        }
    }

    #[cfg(test)]
    pub fn from_slice(bytes: &'a [u8]) -> Self {
        // SAFETY: a slice is readable for its length while borrowed.
        unsafe { Self::new(bytes.as_ptr().cast(), bytes.len()) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Copy the whole buffer into `dst` (exactly as long).
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len);
        if self.len == 0 {
            return;
        }
        // SAFETY: the source is readable for `len` bytes (constructor's contract), `dst` is a
        // distinct writable slice of that length (application memory never aliases a `&mut`
        // of librox's).
        unsafe { core::ptr::copy_nonoverlapping(self.addr, dst.as_mut_ptr(), self.len) };
    }
}

/// An application's work request of type `W` (`ibv_send_wr` or `ibv_recv_wr`).
pub struct AppWr<'a, W>(&'a W);

pub type SendWr<'a> = AppWr<'a, ffi::ibv_send_wr>;
pub type RecvWr<'a> = AppWr<'a, ffi::ibv_recv_wr>;

/// A memory window as a BIND_MW work request names it.
#[derive(Clone, Copy, Debug)]
pub struct MwView {
    pub mw_type: ffi::ibv_mw_type,
    pub rkey: Key,
}

impl MwView {
    /// `None` for a null window.
    ///
    /// # Safety
    /// `mw` is null or a live window.
    pub unsafe fn of(mw: *const ffi::ibv_mw) -> Option<Self> {
        // SAFETY: per the contract.
        unsafe { mw.as_ref() }.map(|mw| MwView {
            mw_type: mw.type_,
            rkey: Key::from_raw(mw.rkey),
        })
    }
}

/// An `ibv_mw_bind_info` read (its MR's lkey followed).
///
/// # Safety
/// `info.mr` is null or a live MR.
pub unsafe fn bind_info(info: &ffi::ibv_mw_bind_info) -> BindInfo {
    BindInfo {
        // SAFETY: per the contract.
        mr_lkey: unsafe { info.mr.as_ref() }.map(|mr| Key::from_raw(mr.lkey)),
        addr: info.addr,
        length: info.length,
        access: info.mw_access_flags,
    }
}

/// An application's SGE as a queue entry carries it.
fn queue_sge(sge: &ffi::ibv_sge) -> Sge {
    Sge {
        addr: sge.addr,
        length: sge.length,
        lkey: Key::from_raw(sge.lkey),
    }
}

/// The application's SGEs `sges` as queue entries.
fn queue_sges(sges: &[ffi::ibv_sge]) -> impl ExactSizeIterator<Item = Sge> + '_ {
    sges.iter().map(queue_sge)
}

/// The scatter/gather list of `num_sge` entries at `sg_list`: EINVAL for a negative count,
/// more than `max` entries or a null list.
///
/// # Safety
/// `sg_list` holds `num_sge` readable entries during `'a` when not null.
unsafe fn sg_list<'a>(
    sg_list: *const ffi::ibv_sge,
    num_sge: c_int,
    max: u32,
) -> Result<&'a [ffi::ibv_sge]> {
    let n = u32::try_from(num_sge).map_err(|_| EINVAL)?;
    if n > max {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { core::slice::from_raw_parts(sg_list, n as usize) })
}

impl<'a> SendWr<'a> {
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    pub fn opcode(&self) -> ffi::ibv_wr_opcode {
        self.0.opcode
    }

    pub fn send_flags(&self) -> u32 {
        self.0.send_flags
    }

    /// Immediate data (network order), for the `*_WITH_IMM` opcodes.
    pub fn imm_data(&self) -> u32 {
        // SAFETY: both members of this union are u32s at offset 0: any value is valid.
        unsafe { self.0.__bindgen_anon_1.imm_data }
    }

    /// The rkey to invalidate, for LOCAL_INV / SEND_WITH_INV.
    pub fn invalidate_rkey(&self) -> Key {
        // SAFETY: as for `imm_data`.
        Key::from_raw(unsafe { self.0.__bindgen_anon_1.invalidate_rkey })
    }

    /// The remote XRC SRQ of an XRC initiator's WR (`qp_type.xrc.remote_srqn`).
    pub fn xrc_remote_srqn(&self) -> u32 {
        // SAFETY: the member of an XRC initiator's WR (the caller's choice by QP type); an
        // integer.
        unsafe { self.0.qp_type.xrc.remote_srqn }
    }

    /// (remote address, rkey) of an RDMA WR (WRITE, READ).
    pub fn rdma(&self) -> (u64, Key) {
        // SAFETY: the member of an RDMA WR (the caller's choice by opcode); integers.
        let r = unsafe { self.0.wr.rdma };
        (r.remote_addr, Key::from_raw(r.rkey))
    }

    /// (remote address, rkey, compare/add, swap) of an atomic WR.
    pub fn atomic(&self) -> (u64, Key, u64, u64) {
        // SAFETY: the member of an atomic WR (the caller's choice by opcode); integers.
        let a = unsafe { self.0.wr.atomic };
        (a.remote_addr, Key::from_raw(a.rkey), a.compare_add, a.swap)
    }

    /// (AH, remote QPN, remote Q_Key) of a UD WR; the AH is `None` when null. The QPN is the
    /// application's word as given, unchecked (as the device receives it).
    pub fn ud(&self) -> (Option<&'a RoxAh>, Qpn, u32) {
        // SAFETY: the member of a UD QP's WR (the caller's choice by QP type); a pointer and
        // integers.
        let ud = unsafe { self.0.wr.ud };
        // SAFETY: a non-null AH of a UD WR is one librox made (the constructor's contract).
        let ah = (!ud.ah.is_null()).then(|| unsafe { objects::ah(ud.ah) });
        (ah, Qpn::from_raw(ud.remote_qpn), ud.remote_qkey)
    }

    /// (window, new rkey, binding) of a BIND_MW WR; `None` for a null window.
    pub fn bind_mw(&self) -> Option<(MwView, Key, BindInfo)> {
        // SAFETY: the member of a BIND_MW WR (the caller's choice by opcode).
        let b = unsafe { &self.0.__bindgen_anon_2.bind_mw };
        // SAFETY: the window and MR of a BIND_MW WR are live (the constructor's contract).
        let mw = unsafe { MwView::of(b.mw) }?;
        // SAFETY: as above.
        Some((mw, Key::from_raw(b.rkey), unsafe {
            bind_info(&b.bind_info)
        }))
    }

    /// The application's SGE list (at most `max` entries, else EINVAL).
    fn app_sg_list(&self, max: u32) -> Result<&'a [ffi::ibv_sge]> {
        // SAFETY: the list holds num_sge entries (the constructor's contract).
        unsafe { sg_list(self.0.sg_list, self.0.num_sge, max) }
    }

    /// The SGE list (at most `max` entries, else EINVAL).
    pub fn sges(&self, max: u32) -> Result<impl ExactSizeIterator<Item = Sge> + 'a> {
        self.app_sg_list(max).map(queue_sges)
    }

    /// The buffers of an `IBV_SEND_INLINE` WR (its SGEs, read by address, no lkey).
    pub fn inline_bufs(&self) -> Result<impl Iterator<Item = UserBuf<'a>> + Clone> {
        Ok(self.app_sg_list(u32::MAX)?.iter().map(|s| {
            // SAFETY: an inline WR's SGEs name readable buffers (the constructor's contract).
            unsafe { UserBuf::new(s.addr as usize as *const c_void, s.length as usize) }
        }))
    }
}

impl<'a> RecvWr<'a> {
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The SGE list (at most `max` entries, else EINVAL).
    pub fn sges(&self, max: u32) -> Result<impl ExactSizeIterator<Item = Sge> + 'a> {
        // SAFETY: the list holds num_sge entries (the constructor's contract).
        unsafe { sg_list(self.0.sg_list, self.0.num_sge, max) }.map(queue_sges)
    }
}

/// A list of `len` `T`s of the application (`ibv_wr_set_sge_list`'s SGEs,
/// `ibv_wr_set_inline_data_list`'s buffers), read only when used.
#[derive(Clone, Copy)]
pub struct AppSlice<'a, T> {
    ptr: *const T,
    len: usize,
    _list: PhantomData<&'a [T]>,
}

impl<'a, T> AppSlice<'a, T> {
    /// # Safety
    /// `ptr` is null or holds `len` readable `T`s during `'a`; for `ibv_data_buf`s, each
    /// buffer is readable for its length during `'a` too.
    pub unsafe fn new(ptr: *const T, len: usize) -> Self {
        AppSlice {
            ptr,
            len,
            _list: PhantomData,
        }
    }

    /// The entries; EINVAL for a null list of some entries.
    pub fn get(&self) -> Result<&'a [T]> {
        match self.len {
            0 => Ok(&[]),
            _ if self.ptr.is_null() => Err(EINVAL),
            // SAFETY: `len` readable entries (the constructor's contract).
            len => Ok(unsafe { core::slice::from_raw_parts(self.ptr, len) }),
        }
    }
}

impl<'a> AppSlice<'a, ffi::ibv_sge> {
    /// The SGEs (`ibv_wr_set_sge_list`); EINVAL for a null list of some entries.
    pub fn sges(&self) -> Result<impl ExactSizeIterator<Item = Sge> + 'a> {
        self.get().map(queue_sges)
    }
}

impl<'a> AppSlice<'a, ffi::ibv_data_buf> {
    /// The buffers; EINVAL for a null list of some buffers.
    pub fn bufs(&self) -> Result<impl Iterator<Item = UserBuf<'a>> + Clone> {
        Ok(self.get()?.iter().map(|b| {
            // SAFETY: each buffer of the list is readable (the constructor's contract).
            unsafe { UserBuf::new(b.addr.cast_const(), b.length) }
        }))
    }
}

/// Work request types chained through `next`.
pub trait Linked {
    fn next_wr(&self) -> *mut Self;
}
impl Linked for ffi::ibv_send_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}
impl Linked for ffi::ibv_recv_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}

/// An application's list of work requests: yields each WR's address (for `*bad_wr`) and a view
/// of it.
pub struct WrList<'a, W> {
    cur: *mut W,
    _list: PhantomData<&'a W>,
}

impl<'a, W> WrList<'a, W> {
    /// # Safety
    /// `first` is null or the head of a null-terminated list of the application's WRs, valid
    /// during `'a` as libibverbs' post calls require: each WR's SGE list holds `num_sge`
    /// entries, an inline WR's buffers are readable, a UD WR's AH was made by librox, a BIND_MW
    /// WR's window and MR are live.
    pub unsafe fn new(first: *mut W) -> Self {
        WrList {
            cur: first,
            _list: PhantomData,
        }
    }
}

impl<W> WrList<'_, W> {
    /// The first WR of the list (what `*bad_wr` names when the whole list is refused).
    pub fn head(&self) -> *mut W {
        self.cur
    }
}

impl<'a, W: Linked + 'a> Iterator for WrList<'a, W> {
    type Item = (*mut W, AppWr<'a, W>);
    fn next(&mut self) -> Option<Self::Item> {
        let at = self.cur;
        // SAFETY: a WR of the list (the constructor's contract).
        let wr = unsafe { at.as_ref() }?;
        self.cur = wr.next_wr();
        Some((at, AppWr(wr)))
    }
}

/// Test views of a formatted segment (the member the test wrote).
#[cfg(test)]
pub mod seg {
    use rox_uapi::queue::{RdmaSeg, SqSeg, UdSeg};

    pub fn rdma(seg: &SqSeg) -> RdmaSeg {
        // SAFETY: tests read the member they formatted; integers.
        unsafe { seg.rdma }
    }

    pub fn ud(seg: &SqSeg) -> UdSeg {
        // SAFETY: as above.
        unsafe { seg.ud }
    }
}
