//! The one queue of work the engine's calls leave behind (as rxe's packet and task queues):
//! packets it sent, async events, QPs whose queues turned out broken. The env only appends (it
//! must not call back into the engine); the data path drains the queue in order after every
//! engine call site and routes each item: a packet to the device's own loopback, the port or
//! nowhere, an event to EQ 0, a QP to the fatal path.

use rox_uapi::ids::Qpn;

use crate::port::frame::Mac;
use crate::roce::Gid;

#[derive(Debug)]
pub enum Deferred {
    /// A RoCEv2 IP packet the engine sent to `dgid`, in a frame to `dmac` if it leaves.
    Transmit {
        dgid: Gid,
        dmac: Mac,
        packet: crate::roce::wire::Packet,
    },
    /// An async event (`EQE_TYPE_*`) of a QP, posted after the admin command or pass that
    /// caused it (a modify's own completion comes first).
    Event { event_type: u8, qpn: Qpn },
    /// A QP whose receive queue turned out unusable while the engine took a WQE from it
    /// (`VENDOR_ERR_*` why): made fatal once the engine call has returned.
    FatalQp { qpn: Qpn, why: u8 },
}
