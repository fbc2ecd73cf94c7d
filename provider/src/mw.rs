//! Memory windows. Allocated and freed through rox.ko (plain uverbs commands; the device keeps
//! the window and its binding; crate::sys::pd). Type 1 windows are bound with `ibv_bind_mw`: a
//! BIND_MW WQE on the QP's send queue whose new rkey is the window's rkey with the next
//! variant ([`next_rkey`]; `ibv_mw.rkey` takes it at once; a failed bind completes with
//! IBV_WC_MW_BIND_ERR). Type 2 windows are bound with IBV_WR_BIND_MW work requests (crate::qp,
//! crate::qp_ex) and ended with LOCAL_INV or a peer's SEND_WITH_INV.

#![deny(unsafe_code)]

use crate::context::ContextHw;
use crate::qp::{post_one, RoxQp};
use crate::sys::errno::{Result, EINVAL};
use crate::sys::ffi;
use crate::sys::wr::MwView;
use crate::wqe::{self, BindInfo};
use rox_uapi::ids::Key;
use rox_uapi::verbs;

/// `ibv_bind_mw` of a type 1 window `mw` (an `ibv_mw_bind` of `wr_id`, `send_flags` and
/// `info`): posts the BIND_MW WQE and returns the window's new rkey.
pub fn bind(
    qp: &RoxQp,
    hw: &ContextHw,
    mw: MwView,
    wr_id: u64,
    send_flags: u32,
    info: &BindInfo,
) -> Result<Key> {
    if mw.mw_type != ffi::IBV_MW_TYPE_1 {
        return Err(EINVAL);
    }
    let new_rkey = next_rkey(mw.rkey);
    post_one(qp, hw, wr_id, |sq, index| {
        let mut w = wqe::new_wqe(sq, verbs::WR_BIND_MW, send_flags, index)?;
        w.seg = wqe::bind_seg(mw.rkey, new_rkey, info)?;
        Ok(w)
    })?;
    Ok(new_rkey)
}

/// The rkey a type 1 window takes at its next bind (`ibv_inc_rkey`): the same window with the
/// next variant, wrapping.
pub(crate) fn next_rkey(rkey: Key) -> Key {
    rkey.with_variant(rkey.variant().wrapping_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_rkey_moves_the_variant_on_and_keeps_the_window() {
        assert_eq!(
            next_rkey(Key::from_raw(0x8000_01fe)),
            Key::from_raw(0x8000_01ff)
        );
        assert_eq!(
            next_rkey(Key::from_raw(0x8000_01ff)),
            Key::from_raw(0x8000_0100),
            "the variant wraps inside its byte"
        );
    }
}
