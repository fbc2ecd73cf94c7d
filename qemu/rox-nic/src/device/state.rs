//! The device's objects as the data-path thread owns them (CQs, EQs, SRQs, QPs, the GID table,
//! the protection table, counters) in one [`Hw`], and the questions about them every part asks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rox_uapi::admin::*;
use rox_uapi::ids::Qpn;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use super::counters::DeviceCounters;
use super::datapath::sched::TxScheduler;
use super::deferred::Deferred;
use super::doorbell::DoorbellsUsed;
use super::mem::MemTable;
use super::ring::Ring;
use super::spare_sges::SpareSges;
use super::Shared;
use crate::dma::GuestMemory;
use crate::roce::id_map::IdMap;
use crate::roce::wire::FlushIcrc;
use crate::roce::Gid;

#[derive(Debug)]
pub struct Cq {
    pub ring: Ring,
    pub eqn: u32,
    pub db_page: u32,
    pub db_slot: u32,
    /// Device producer index (free-running).
    pub pi: u32,
    pub arm_seq: u32,
    /// 0, CQ_ARM_NEXT or CQ_ARM_SOLICITED.
    pub armed: u32,
    /// Overflowed or unreachable: no more CQEs.
    pub error: bool,
    /// QPs using this CQ.
    pub users: u32,
}

#[derive(Debug)]
pub struct Eq {
    pub base: u64,
    pub depth: u32,
    pub pi: u32,
    /// Consumer index reported by the driver (mod 2^31).
    pub ci: u32,
    pub armed: bool,
}

#[derive(Debug)]
pub struct Srq {
    pub pd: u32,
    pub ring: Ring,
    pub db_page: u32,
    pub db_slot: u32,
    pub ci: u32,
    pub limit: u32,
    pub users: u32,
    pub error: bool,
    /// An XRC SRQ: its XRC domain and the CQ of its receive completions (`xrcd` 0: not XRC).
    pub xrcd: u32,
    pub cq: u32,
}

/// A QP's work queues as the device fetches them: rings, doorbell slot, indices, CQs and SRQ.
/// Its attributes and state are not here: they live once, in the engine's transport context
/// ([`crate::roce::Engine::query_qp`]), which the admin path, the data path and the engine's
/// roles all use.
#[derive(Debug)]
pub struct QpQueues {
    pub qpn: Qpn,
    pub qp_type: u8,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: u32,
    pub sq: Ring,
    pub rq: Option<Ring>,
    pub db_page: u32,
    pub db_slot: u32,
    pub sq_sig_all: bool,
    /// Next SQ WQE the device fetches.
    pub sq_ci: u32,
    /// Next RQ WQE the device consumes.
    pub rq_ci: u32,
    /// Last RQ producer index seen (to tell the engine about new receives).
    pub rq_pi_seen: u32,
    /// Stopped consuming its queues after a device-detected error (wild index, bad WQE).
    pub broken: bool,
}

/// Everything the engine's environment touches.
pub struct Hw {
    pub shared: Arc<Shared>,
    pub mem: Arc<GuestMemory>,
    pub epoch: Instant,
    pub mac: [u8; 6],
    pub gids: GidTable,
    /// Memory regions and windows: every access on behalf of a work request is checked
    /// there.
    pub mem_table: MemTable,
    pub next_mw: u32,
    pub cqs: IdMap<u32, Cq>,
    pub qps: IdMap<Qpn, QpQueues>,
    pub srqs: IdMap<u32, Srq>,
    pub eqs: Vec<Option<Eq>>,
    /// The doorbell slots in use, and their pages.
    pub doorbells_used: DoorbellsUsed,
    /// Work the engine's calls left for the data path, in order (see [`Deferred`]).
    pub deferred: VecDeque<Deferred>,
    /// `PORT_ACTIVE` or `PORT_DOWN`, as the driver last reported its netdev's link.
    pub port_state: u8,
    /// Packets received and dropped while the port was down.
    pub rx_port_down_drops: u64,
    /// The device has a port: packets to other GIDs go out on it (packets to its own GIDs
    /// never reach the wire either way).
    pub has_port: bool,
    /// The ICRC of the FLUSH requests it sends ([`crate::device::DeviceConfig::flush_icrc`]).
    pub flush_icrc: FlushIcrc,
    /// Multicast groups: group GID -> attached QPNs, in attach order.
    pub mcast: HashMap<Gid, Vec<Qpn>>,
    pub stats: Stats,
    /// What only the device layer counts (QUERY_COUNTERS).
    pub counters: DeviceCounters,
    /// Next MR key index to try (`alloc_key` in admin.rs).
    pub next_mr_index: u32,
    pub next_cq: u32,
    /// Next QPN to try (`next_id` in admin.rs).
    pub next_qpn: u32,
    pub next_srq: u32,
    /// The port's transmit scheduler, which the requester asks before every packet.
    pub tx_sched: TxScheduler,
    /// Emptied SGE lists of retired WRs, reused by the next WRs decoded.
    pub spare_sges: SpareSges,
}

/// The first QPN handed to ordinary QPs (0 and 1 are SMI/GSI).
pub const FIRST_QPN: Qpn = Qpn::new(2).unwrap();

impl Hw {
    pub fn new(shared: Arc<Shared>, mac: [u8; 6]) -> Hw {
        let mem = shared.mem();
        Hw {
            shared,
            mem,
            epoch: Instant::now(),
            mac,
            gids: GidTable::default(),
            mem_table: MemTable::default(),
            next_mw: 1,
            cqs: IdMap::default(),
            qps: IdMap::default(),
            srqs: IdMap::default(),
            eqs: (0..MAX_EQS).map(|_| None).collect(),
            doorbells_used: DoorbellsUsed::default(),
            deferred: VecDeque::new(),
            port_state: PORT_ACTIVE,
            rx_port_down_drops: 0,
            has_port: false,
            flush_icrc: FlushIcrc::Iba,
            mcast: HashMap::new(),
            stats: [0; STATS_COUNT],
            counters: DeviceCounters::default(),
            next_mr_index: 1,
            next_cq: 1,
            next_qpn: FIRST_QPN.get(),
            next_srq: 1,
            tx_sched: TxScheduler::new(false),
            spare_sges: SpareSges::default(),
        }
    }

    pub fn port_up(&self) -> bool {
        self.port_state == PORT_ACTIVE
    }

    /// `gid` is in this device's GID table.
    pub fn is_own_gid(&self, gid: &Gid) -> bool {
        self.gids.contains(gid)
    }

    /// `gid` is a multicast group with at least one QP of this device attached.
    pub fn has_mcast_group(&self, gid: &Gid) -> bool {
        self.mcast.contains_key(gid)
    }

    /// QP attachments over all groups.
    pub fn mcast_attachments(&self) -> usize {
        self.mcast.values().map(Vec::len).sum()
    }

    pub fn gid_valid(&self) -> Vec<bool> {
        self.gids.entries.iter().map(|g| g.is_some()).collect()
    }
}

/// The device's GID table, and which entries are valid, bit by index: the check every packet
/// sent and received makes ([`Hw::is_own_gid`]) compares only those (it compared all 16
/// entries per packet sent to another device).
#[derive(Debug, Default)]
pub struct GidTable {
    entries: [Option<Gid>; GID_TABLE_LEN as usize],
    valid: u32,
}

// `GidTable::valid` has a bit per entry.
const _: () = assert!(GID_TABLE_LEN <= u32::BITS);

impl GidTable {
    /// Entry `index` (None: invalid, or no such index).
    pub fn get(&self, index: usize) -> Option<Gid> {
        self.entries.get(index).copied().flatten()
    }

    /// Sets entry `index` (None: invalid); false if there is no such index.
    pub fn set(&mut self, index: usize, gid: Option<Gid>) -> bool {
        let Some(entry) = self.entries.get_mut(index) else {
            return false;
        };
        *entry = gid;
        let bit = 1 << index;
        if gid.is_some() {
            self.valid |= bit;
        } else {
            self.valid &= !bit;
        }
        true
    }

    /// `gid` is a valid entry.
    pub fn contains(&self, gid: &Gid) -> bool {
        let mut valid = self.valid;
        while valid != 0 {
            let index = valid.trailing_zeros() as usize;
            if self.entries[index].as_ref() == Some(gid) {
                return true;
            }
            valid &= valid - 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gid_table_finds_exactly_its_valid_entries() {
        let gid = |n: u8| -> Gid { [n; 16] };
        let mut table = GidTable::default();
        assert!(
            !table.contains(&gid(0)),
            "an empty table holds not even the zero GID"
        );
        assert!(table.set(0, Some(gid(1))));
        assert!(table.set(15, Some(gid(2))));
        assert!(!table.set(16, Some(gid(3))), "no entry 16");
        assert!(table.contains(&gid(1)) && table.contains(&gid(2)));
        assert!(!table.contains(&gid(3)));
        assert_eq!(table.get(15), Some(gid(2)));
        assert_eq!(table.get(16), None);
        // Replaced and invalidated entries are gone.
        assert!(table.set(0, Some(gid(4))));
        assert!(table.set(15, None));
        assert!(!table.contains(&gid(1)) && !table.contains(&gid(2)));
        assert!(table.contains(&gid(4)));
        assert_eq!(table.get(15), None);
    }
}
