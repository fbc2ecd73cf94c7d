//! Typed views of the verbs enums the transport engine speaks in.
//!
//! The numbers and their typed enums are defined once, in `rox_uapi::verbs` (= libibverbs
//! numbering); the engine matches on the enums exhaustively.

/// The typed verbs enums live in uapi (one definition); the engine uses them from here.
pub use rox_uapi::verbs::{Mtu, QpState, QpType, WcOpcode, WcStatus, WrOpcode};

/// Access flags of MRs and QPs.
pub use rox_uapi::verbs::{
    ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
/// FLUSH placement types and levels.
pub use rox_uapi::verbs::{
    FLUSH_LEVEL_MR, FLUSH_LEVEL_RANGE, FLUSH_TYPES_ALL, FLUSH_TYPE_GLOBAL, FLUSH_TYPE_PERSISTENT,
};
/// Completion flags (u8 in uapi; the engine's [`super::Completion::wc_flags`] holds them).
pub use rox_uapi::verbs::{WC_FLAG_GRH, WC_FLAG_WITH_IMM, WC_FLAG_WITH_INV};
