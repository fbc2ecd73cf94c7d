//! Typed commands: each opcode's payload and completion result as a type, so a payload or a
//! result that does not belong to the opcode does not compile.

use super::super::ids::{Key, Qpn};
use super::*;

/// An admin command: its opcode, the payload it carries and what its completion's two result
/// words mean. rox-nic dispatches through it and the driver can execute through it, so a payload
/// or a result that does not belong to the opcode does not compile (nova-core's `CommandToGsp`
/// does the same for its firmware queue).
pub trait AdminCommand {
    const OPCODE: u8;
    /// The payload struct, at the start of [`AdminCmd::payload`].
    type Payload: Copy + Default;
    /// The completion's `result0`/`result1`, typed.
    type Result: ResultWords;
    /// The command's payload area holding `payload` (zeroes after it).
    fn payload(payload: Self::Payload) -> AdminPayload;
}

/// A typed result carried in an [`AdminCpl`]'s `result0` and `result1`.
pub trait ResultWords: Sized {
    fn to_words(self) -> (u32, u32);
    fn from_words(result0: u32, result1: u32) -> Self;
}

/// A result carried in `result0` alone (its `result1` is always 0): what a [`QueryAnswer`] may
/// carry, whose `result1` is the bytes written. A type says so by implementing this; one that
/// did not cannot be a query's value.
pub trait Result0Only: ResultWords {}
impl Result0Only for () {}
impl Result0Only for u32 {}
impl Result0Only for Key {}
impl Result0Only for Qpn {}

/// Commands that answer nothing but their status.
impl ResultWords for () {
    fn to_words(self) -> (u32, u32) {
        (0, 0)
    }
    fn from_words(_: u32, _: u32) -> Self {}
}

/// Commands that answer one number (an id, a key, a depth, a count): `result0`.
impl ResultWords for u32 {
    fn to_words(self) -> (u32, u32) {
        (self, 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        result0
    }
}

/// ALLOC_MW: the window's rkey.
impl ResultWords for Key {
    fn to_words(self) -> (u32, u32) {
        (self.get(), 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        Key::from_raw(result0)
    }
}

/// CREATE_QP: the new QP's number.
impl ResultWords for Qpn {
    fn to_words(self) -> (u32, u32) {
        (self.get(), 0)
    }
    fn from_words(result0: u32, _: u32) -> Self {
        Qpn::from_raw(result0)
    }
}

/// REG_MR: the new region's keys.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub lkey: Key,
    pub rkey: Key,
}
impl ResultWords for MrKeys {
    fn to_words(self) -> (u32, u32) {
        (self.lkey.get(), self.rkey.get())
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        MrKeys {
            lkey: Key::from_raw(result0),
            rkey: Key::from_raw(result1),
        }
    }
}

/// READ_MAC: the port's MAC (bytes 0..4 in `result0`, byte 0 in its low bits; 4..6 in
/// `result1`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct MacAddr(pub [u8; 6]);
impl ResultWords for MacAddr {
    fn to_words(self) -> (u32, u32) {
        let m = self.0;
        (
            u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
            u32::from_le_bytes([m[4], m[5], 0, 0]),
        )
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        let (a, b) = (result0.to_le_bytes(), result1.to_le_bytes());
        MacAddr([a[0], a[1], a[2], a[3], b[0], b[1]])
    }
}

/// QUERY_SRQ: its limit and the WQEs posted and not yet consumed.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SrqCounts {
    pub limit: u32,
    pub posted: u32,
}
impl ResultWords for SrqCounts {
    fn to_words(self) -> (u32, u32) {
        (self.limit, self.posted)
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        SrqCounts {
            limit: result0,
            posted: result1,
        }
    }
}

/// `admin_commands! { Type = OPCODE, union_field: Payload => Result; ... }`: one marker type
/// per opcode.
macro_rules! admin_commands {
    ($( $(#[$meta:meta])* $name:ident = $op:ident, $field:ident: $payload:ty => $result:ty; )*) => {
        $(
            $(#[$meta])*
            pub struct $name;
            impl AdminCommand for $name {
                const OPCODE: u8 = $op;
                type Payload = $payload;
                type Result = $result;
                fn payload(payload: $payload) -> AdminPayload {
                    let mut area = AdminPayload { raw: [0; ADMIN_PAYLOAD_SIZE] };
                    area.$field = payload;
                    area
                }
            }
        )*
    };
}

admin_commands! {
    /// Writes [`DeviceAttr`] (its first `resp_len` bytes) to `resp_addr`.
    QueryDevice = ADMIN_OP_QUERY_DEVICE, query: QueryCmd => QueryAnswer<()>;
    /// Writes [`PortAttr`] of port `index` (its first `resp_len` bytes) to `resp_addr`.
    QueryPort = ADMIN_OP_QUERY_PORT, query: QueryCmd => QueryAnswer<()>;
    SetGid = ADMIN_OP_SET_GID, set_gid: SetGidCmd => ();
    ReadMac = ADMIN_OP_READ_MAC, none: NoPayload => MacAddr;
    SetPortState = ADMIN_OP_SET_PORT_STATE, set_port_state: SetPortStateCmd => ();
    RegMr = ADMIN_OP_REG_MR, reg_mr: RegMrCmd => MrKeys;
    /// key = its lkey.
    DeregMr = ADMIN_OP_DEREG_MR, key: KeyCmd => ();
    AllocMw = ADMIN_OP_ALLOC_MW, alloc_mw: AllocMwCmd => Key;
    /// key = any rkey of the window.
    DeallocMw = ADMIN_OP_DEALLOC_MW, key: KeyCmd => ();
    OdpUpdate = ADMIN_OP_ODP_UPDATE, odp_update: OdpUpdateCmd => ();
    /// Answers the CQ id.
    CreateCq = ADMIN_OP_CREATE_CQ, create_cq: CreateCqCmd => u32;
    /// handle = CQ id.
    DestroyCq = ADMIN_OP_DESTROY_CQ, handle: HandleCmd => ();
    /// Answers the new depth.
    ResizeCq = ADMIN_OP_RESIZE_CQ, resize_cq: ResizeCqCmd => u32;
    CreateQp = ADMIN_OP_CREATE_QP, create_qp: CreateQpCmd => Qpn;
    /// Answers the QP's new state (`verbs::QPS_*`).
    ModifyQp = ADMIN_OP_MODIFY_QP, modify_qp: ModifyQpCmd => u32;
    /// index = QPN; writes [`QpAttr`] (its first `resp_len` bytes) to `resp_addr`, answers
    /// the QP state.
    QueryQp = ADMIN_OP_QUERY_QP, query: QueryCmd => QueryAnswer<u32>;
    DestroyQp = ADMIN_OP_DESTROY_QP, qp: QpnCmd => ();
    AttachMcast = ADMIN_OP_ATTACH_MCAST, mcast: McastCmd => ();
    DetachMcast = ADMIN_OP_DETACH_MCAST, mcast: McastCmd => ();
    /// Answers the SRQ id.
    CreateSrq = ADMIN_OP_CREATE_SRQ, create_srq: CreateSrqCmd => u32;
    ModifySrq = ADMIN_OP_MODIFY_SRQ, modify_srq: ModifySrqCmd => ();
    /// handle = SRQ id.
    QuerySrq = ADMIN_OP_QUERY_SRQ, handle: HandleCmd => SrqCounts;
    /// handle = SRQ id.
    DestroySrq = ADMIN_OP_DESTROY_SRQ, handle: HandleCmd => ();
    /// Writes [`Stats`] (its first `resp_len` bytes) to `resp_addr`, answers STATS_COUNT (how
    /// many the device has).
    QueryStats = ADMIN_OP_QUERY_STATS, query: QueryCmd => QueryAnswer<u32>;
}

/// What a query answers: its own result in `result0` (`R` uses that word alone: the QP state,
/// a count, or nothing) and in `result1` the bytes of its response it wrote (at most the
/// command's `resp_len`).
///
/// Only an `R` that is [`Result0Only`] makes a `QueryAnswer<R>` that is a [`ResultWords`], so
/// an `R` that also uses `result1` (e.g. [`MrKeys`]) is refused where the query is declared,
/// and its second word cannot be dropped unseen
/// (`a_query_answer_carries_only_a_result0_value`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct QueryAnswer<R> {
    pub value: R,
    pub written: u32,
}
impl<R: Result0Only> ResultWords for QueryAnswer<R> {
    fn to_words(self) -> (u32, u32) {
        let (result0, result1) = self.value.to_words();
        // `Result0Only` is the type's claim; a value that broke it would lose its second word.
        debug_assert_eq!(result1, 0, "a Result0Only value used result1");
        (result0, self.written)
    }
    fn from_words(result0: u32, result1: u32) -> Self {
        QueryAnswer {
            value: R::from_words(result0, 0),
            written: result1,
        }
    }
}

/// A command that writes a response structure to [`QueryCmd::resp_addr`]: which one, and how
/// much of it a driver needs.
pub trait AdminQuery: AdminCommand<Payload = QueryCmd> {
    type Response: Copy;
    /// The query's name in messages (its `ADMIN_OP_*` without the prefix).
    const NAME: &'static str;
    /// The fewest bytes of the response a device may write into a buffer at least this long
    /// (`QueryAnswer::written`): the prefix that holds every field the driver reads and cannot
    /// take as zero. rox.ko refuses an answer of fewer (EIO, naming the query and both
    /// lengths), as it refuses one of more than its buffer. 0 for the counter queries: a
    /// counter the device lacks reads as 0.
    const REQUIRED_LEN: usize;
}
impl AdminQuery for QueryDevice {
    type Response = DeviceAttr;
    const NAME: &'static str = "QUERY_DEVICE";
    /// rox.ko reads every field, the last (`max_total_mcast_qp_attach`) included, and a zero
    /// limit or capability would be taken as the device's. Pinned to that field, not to the
    /// struct's size: a field appended later must not make rox.ko refuse every device that
    /// predates it (raising the floor is a choice, made here).
    const REQUIRED_LEN: usize = core::mem::offset_of!(DeviceAttr, max_total_mcast_qp_attach) + 4;
}
impl AdminQuery for QueryPort {
    type Response = PortAttr;
    const NAME: &'static str = "QUERY_PORT";
    /// rox.ko reads `max_mtu`, `active_width` and `active_speed`, the last of them at byte 15
    /// (the state comes from the netdev, the MAC from READ_MAC).
    const REQUIRED_LEN: usize = core::mem::offset_of!(PortAttr, active_speed) + 1;
}
impl AdminQuery for QueryQp {
    type Response = QpAttr;
    const NAME: &'static str = "QUERY_QP";
    /// rox.ko reads every field up to the address vector (`ah`), the last (pinned to it, as
    /// QUERY_DEVICE's floor is).
    const REQUIRED_LEN: usize =
        core::mem::offset_of!(QpAttr, ah) + core::mem::size_of::<AddrVector>();
}
impl AdminQuery for QueryStats {
    type Response = Stats;
    const NAME: &'static str = "QUERY_STATS";
    const REQUIRED_LEN: usize = 0;
}
// A floor past the end of its response would make rox.ko refuse every device (the counter
// queries' floor is 0).
const _: () = {
    use core::mem::size_of;
    assert!(QueryDevice::REQUIRED_LEN <= size_of::<DeviceAttr>());
    assert!(QueryPort::REQUIRED_LEN <= size_of::<PortAttr>());
    assert!(QueryQp::REQUIRED_LEN <= size_of::<QpAttr>());
    // What every ROX_VERSION 2 device writes: raising a floor past it refuses them all.
    assert!(QueryDevice::REQUIRED_LEN == 144);
    assert!(QueryPort::REQUIRED_LEN == 16);
    assert!(QueryQp::REQUIRED_LEN == 72);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_answers_its_value_in_result0_and_the_bytes_written_in_result1() {
        let answer = QueryAnswer {
            value: 7u32,
            written: 296,
        };
        assert_eq!(answer.to_words(), (7, 296));
        assert_eq!(QueryAnswer::<u32>::from_words(7, 296), answer);
        let none = QueryAnswer::<()>::from_words(0, 40);
        assert_eq!((none.written, none.to_words()), (40, (0, 40)));
    }

    /// Whether a type is a [`ResultWords`], as a value: `Probe`'s inherent constant (there when
    /// its bound holds) shadows the trait's default `false`. Concrete types only.
    struct Probe<T>(core::marker::PhantomData<T>);
    trait Fallback {
        const IS: bool = false;
    }
    impl<T> Fallback for Probe<T> {}
    impl<T: ResultWords> Probe<T> {
        const IS: bool = true;
    }
    macro_rules! is_result_words {
        ($t:ty) => {
            <Probe<$t>>::IS
        };
    }

    /// The rule the doc of [`QueryAnswer`] states, as values that must be true rather than a
    /// build that must fail (a `compile_fail` doctest passes on any error, and stable rustdoc
    /// checks no error code): the probe answers true for the answers the queries use, false
    /// for one whose value needs `result1`, and true for that value alone.
    #[test]
    fn a_query_answer_carries_only_a_result0_value() {
        // Evaluated when the tests build (clippy wants constant asserts there): a false one
        // fails `cargo test` with the assert's text.
        const {
            assert!(is_result_words!(QueryAnswer<()>));
            assert!(is_result_words!(QueryAnswer<u32>));
            assert!(is_result_words!(MrKeys));
            assert!(!is_result_words!(QueryAnswer<MrKeys>));
            assert!(!is_result_words!(QueryAnswer<SrqCounts>));
            assert!(!is_result_words!(QueryAnswer<MacAddr>));
        }
    }
}
