//! Target `admin`: arbitrary admin commands into a real device through the test kit's
//! [`TestDriver`] (BAR0 registers, the admin ring in guest memory, completions with owner bits).
//!
//! The input is a list of records `[opcode][links][len][links × (from, at)][len payload bytes]`
//! (payload zero-extended to 120 bytes). Each of the (up to 3) links copies the `result0` of
//! command `from` (a handle, key or QPN the device chose) to payload offset `at`, so the
//! fuzzer can name objects whose numbers are random. Every address the device could
//! write (a query's response, a ring) that falls in the driver's own rings is moved into the
//! arena: a guest that points the device at its own admin ring only hurts itself.
//!
//! Invariants: every command completes with its own id and opcode and a defined status
//! (`BAD_OPCODE` for unknown opcodes); the device never goes fatal on commands; afterwards it
//! still answers: READ_MAC gives its MAC, QUERY_DEVICE succeeds, and a new CQ and QP can be
//! made and destroyed.

use rox_uapi::admin::*;
use rox_uapi::queue::PageList;
use rox_uapi::regs::{ROX_PAGE_SIZE, STATUS_FATAL};
use rox_uapi::verbs::*;

use crate::device::DeviceConfig;
use crate::dma::as_bytes;
use crate::testkit::{page_query, payload, TestDriver, COMP_EQ, RAM_BASE};

const MAC: [u8; 6] = [2, 0, 0, 0xf0, 0, 1];
/// Guest memory the fuzzer's addresses point into (far from the driver's rings).
pub const ARENA: u64 = RAM_BASE + (64 << 20);
pub const ARENA_PAGES: u64 = 256;
/// The driver's rings live in the first pages of RAM: addresses there are moved to the arena.
const PROTECTED: std::ops::Range<u64> = RAM_BASE..RAM_BASE + (1 << 20);
const MAX_COMMANDS: usize = 64;
const MAX_LINKS: u8 = 3;
/// The doorbell page of the objects made after the input.
const PROBE_DB_PAGE: u32 = rox_uapi::regs::DB_PAGE_COUNT - 1;
/// The doorbell page of the seed session's objects. Not 1: where `db_page` is the high half of
/// an 8-aligned word (CreateSrqCmd, CreateQpCmd), page 1 after a small number reads as an
/// address in the driver's rings, and [`keep_off_driver_rings`] would move it.
const SESSION_DB_PAGE: u32 = 2;
const PAGE: u64 = ROX_PAGE_SIZE as u64;

/// One command of an input.
#[derive(Clone, Debug)]
pub struct Command {
    pub opcode: u8,
    pub payload: [u8; ADMIN_PAYLOAD_SIZE],
    /// Copy `result0` of command `.0` into the payload at offset `.1`.
    pub links: Vec<(u8, u8)>,
}

/// Decodes an input; what does not form a whole record is ignored.
pub fn decode(mut data: &[u8]) -> Vec<Command> {
    let mut out = Vec::new();
    while let [opcode, links, len, rest @ ..] = data {
        let n = usize::from(links % (MAX_LINKS + 1));
        if rest.len() < 2 * n {
            break;
        }
        let (link_bytes, rest) = rest.split_at(2 * n);
        let links = link_bytes.chunks_exact(2).map(|l| (l[0], l[1])).collect();
        let len = usize::from(*len).min(ADMIN_PAYLOAD_SIZE).min(rest.len());
        let mut p = [0u8; ADMIN_PAYLOAD_SIZE];
        p[..len].copy_from_slice(&rest[..len]);
        out.push(Command {
            opcode: *opcode,
            payload: p,
            links,
        });
        data = &rest[len..];
        if out.len() == MAX_COMMANDS {
            break;
        }
    }
    out
}

/// Encodes commands as an input (for seeds).
pub fn encode(cmds: &[Command]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in cmds {
        let len = c.payload.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        out.push(c.opcode);
        out.push(c.links.len() as u8);
        out.push(len as u8);
        for &(from, at) in &c.links {
            out.extend_from_slice(&[from, at]);
        }
        out.extend_from_slice(&c.payload[..len]);
    }
    out
}

/// A device with the arena laid out: its first page is a level-1 page list of the arena's
/// pages (so any command may name `ARENA` as a page list), the rest zero.
fn device() -> TestDriver {
    let mut cfg = DeviceConfig::new(MAC);
    cfg.idle_after = std::time::Duration::from_millis(1);
    let d = TestDriver::in_process(cfg);
    for i in 0..ARENA_PAGES {
        d.ram
            .write(ARENA + i * 8, &(ARENA + i * PAGE).to_le_bytes());
    }
    d
}

/// Moves every 8-aligned address in the driver's rings into the arena.
fn keep_off_driver_rings(p: &mut [u8; ADMIN_PAYLOAD_SIZE]) {
    for word in p.chunks_exact_mut(8) {
        let v = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        if PROTECTED.contains(&v) {
            word.copy_from_slice(&(v - RAM_BASE + ARENA).to_le_bytes());
        }
    }
}

/// The body of the target.
pub fn run(data: &[u8]) {
    let mut d = device();
    execute(&mut d, &decode(data));
    still_answers(&mut d);
}

/// Runs `cmds` in order, checking each completion's invariants; answers their statuses.
fn execute(d: &mut TestDriver, cmds: &[Command]) -> Vec<u8> {
    let mut results: Vec<u32> = Vec::new();
    let mut statuses = Vec::new();
    for (i, c) in cmds.iter().enumerate() {
        let mut p = c.payload;
        for &(from, at) in &c.links {
            if let Some(r) = results.get(usize::from(from)) {
                let at = usize::from(at) % (ADMIN_PAYLOAD_SIZE - 3);
                p[at..at + 4].copy_from_slice(&r.to_le_bytes());
            }
        }
        keep_off_driver_rings(&mut p);
        let cpl = d.admin(c.opcode, AdminPayload { raw: p });
        assert_eq!(
            cpl.opcode, c.opcode,
            "command {i}: completion of another opcode"
        );
        assert!(
            cpl.status <= ADMIN_STATUS_BAD_DOORBELL,
            "command {i}: undefined status {}",
            cpl.status
        );
        if !is_known(c.opcode) {
            assert_eq!(cpl.status, ADMIN_STATUS_BAD_OPCODE, "command {i}");
        }
        if cpl.status != ADMIN_STATUS_SUCCESS {
            assert_eq!(
                (cpl.result0, cpl.result1),
                (0, 0),
                "command {i}: results of a failure"
            );
        }
        assert_eq!(
            d.read_reg(rox_uapi::regs::REG_STATUS) & STATUS_FATAL,
            0,
            "command {i}: fatal"
        );
        results.push(cpl.result0);
        statuses.push(cpl.status);
    }
    statuses
}

fn is_known(op: u8) -> bool {
    matches!(
        op,
        ADMIN_OP_QUERY_DEVICE
            | ADMIN_OP_QUERY_PORT
            | ADMIN_OP_SET_GID
            | ADMIN_OP_READ_MAC
            | ADMIN_OP_SET_PORT_STATE
            | ADMIN_OP_REG_MR
            | ADMIN_OP_DEREG_MR
            | ADMIN_OP_ALLOC_MW
            | ADMIN_OP_DEALLOC_MW
            | ADMIN_OP_ODP_UPDATE
            | ADMIN_OP_CREATE_CQ
            | ADMIN_OP_DESTROY_CQ
            | ADMIN_OP_RESIZE_CQ
            | ADMIN_OP_CREATE_QP
            | ADMIN_OP_MODIFY_QP
            | ADMIN_OP_QUERY_QP
            | ADMIN_OP_DESTROY_QP
            | ADMIN_OP_ATTACH_MCAST
            | ADMIN_OP_DETACH_MCAST
            | ADMIN_OP_CREATE_SRQ
            | ADMIN_OP_MODIFY_SRQ
            | ADMIN_OP_QUERY_SRQ
            | ADMIN_OP_DESTROY_SRQ
            | ADMIN_OP_QUERY_STATS
            | ADMIN_OP_QUERY_COUNTERS
    )
}

/// After the input: the device answers, and new objects can still be made.
fn still_answers(d: &mut TestDriver) {
    let mac = d.run::<ReadMac>(NoPayload::default());
    assert_eq!(mac.0, MAC, "READ_MAC");
    let resp = d.ram.alloc(PAGE, PAGE);
    d.admin_ok(ADMIN_OP_QUERY_DEVICE, page_query(0, resp));
    // The input may hold any doorbell slot: take the first free one of the last page.
    let ring = d.ram.alloc(4 * PAGE, PAGE);
    let create = |d: &mut TestDriver, op: u8, fill: &dyn Fn(u32) -> AdminPayload| {
        for slot in 0..=MAX_COMMANDS as u32 {
            let cpl = d.admin(op, fill(slot));
            if cpl.status != ADMIN_STATUS_BAD_DOORBELL {
                assert_eq!(
                    cpl.status, ADMIN_STATUS_SUCCESS,
                    "opcode {op:#x} after the input"
                );
                return cpl.result0;
            }
        }
        panic!("no free doorbell slot");
    };
    let mut page = |addr: u64| d.page_list(addr, PAGE);
    let (cq_ring, sq, rq) = (page(ring), page(ring + PAGE), page(ring + 2 * PAGE));
    let cq = create(d, ADMIN_OP_CREATE_CQ, &|slot| {
        payload(&CreateCqCmd {
            ring: cq_ring,
            log_depth: 4,
            eqn: COMP_EQ,
            db_page: PROBE_DB_PAGE,
            db_slot: slot,
            ..Default::default()
        })
    });
    let qpn = create(d, ADMIN_OP_CREATE_QP, &|slot| {
        payload(&CreateQpCmd {
            qp_type: rox_uapi::verbs::QPT_RC,
            log_sq_depth: 4,
            log_rq_depth: 5,
            pd: 1,
            send_cq: cq,
            recv_cq: cq,
            srq: SRQ_NONE,
            db_page: PROBE_DB_PAGE,
            db_slot: slot,
            sq,
            rq,
            ..Default::default()
        })
    });
    for (opcode, handle, what) in [
        (ADMIN_OP_DESTROY_QP, qpn, "destroy the new QP"),
        (ADMIN_OP_DESTROY_CQ, cq, "destroy the new CQ"),
    ] {
        let cpl = d.admin(
            opcode,
            payload(&HandleCmd {
                handle,
                reserved: 0,
            }),
        );
        assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "{what}");
    }
}

fn cmd<T: crate::dma::Pod>(opcode: u8, v: &T) -> Command {
    let mut p = [0u8; ADMIN_PAYLOAD_SIZE];
    p[..size_of::<T>()].copy_from_slice(as_bytes(v));
    Command {
        opcode,
        payload: p,
        links: Vec::new(),
    }
}

/// A query of `index` (the port for QUERY_PORT and QUERY_COUNTERS; 0 for the others, and
/// QUERY_QP's QPN is linked) into a page of the arena.
fn query(opcode: u8, index: u8) -> Command {
    cmd(
        opcode,
        &QueryCmd {
            index: index.into(),
            resp_len: PAGE as u32,
            resp_addr: ARENA + 200 * PAGE,
        },
    )
}

fn linked(mut c: Command, links: &[(u8, u8)]) -> Command {
    c.links = links.to_vec();
    c
}

fn arena_pages(first: u64, n: u32) -> PageList {
    PageList {
        addr: ARENA + first * 8,
        npages: n,
        page_shift: rox_uapi::regs::ROX_PAGE_SHIFT as u8,
        level: rox_uapi::queue::PBL_LEVEL_1,
        reserved: 0,
    }
}

/// A driver's session: queries, an MR, a window, CQs, an SRQ, QPs walked through their
/// states, and teardown; and each known opcode once with an empty payload.
pub fn seeds() -> Vec<Vec<u8>> {
    let session = session();
    let mut out = vec![encode(&session), encode(&session[..9])];
    let every: Vec<Command> = (0..=0x60u8)
        .filter(|&op| is_known(op))
        .map(|op| cmd(op, &NoPayload::default()))
        .collect();
    out.push(encode(&every));
    out
}

/// The objects a session makes: two CQs, an SRQ and an RC QP on arena pages, and GID 0.
fn session_objects() -> ([CreateCqCmd; 2], CreateSrqCmd, CreateQpCmd, SetGidCmd) {
    let cq = CreateCqCmd {
        ring: arena_pages(1, 1),
        log_depth: 7,
        eqn: COMP_EQ,
        db_page: SESSION_DB_PAGE,
        db_slot: 0,
        ..Default::default()
    };
    let recv_cq = CreateCqCmd {
        ring: arena_pages(2, 1),
        db_slot: 3,
        ..cq
    };
    let srq = CreateSrqCmd {
        pd: 1,
        log_depth: 5,
        limit: 2,
        db_page: SESSION_DB_PAGE,
        db_slot: 2,
        ring: arena_pages(3, 1),
        ..Default::default()
    };
    let qp = CreateQpCmd {
        qp_type: QPT_RC,
        log_sq_depth: 4,
        log_rq_depth: 5,
        pd: 1,
        db_page: SESSION_DB_PAGE,
        db_slot: 1,
        sq: arena_pages(4, 1),
        rq: arena_pages(5, 1),
        ..Default::default()
    };
    let mut gid = SetGidCmd {
        index: 0,
        gid_type: GID_TYPE_ROCE_UDP_ENCAP,
        valid: 1,
        ..Default::default()
    };
    gid.gid[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
    ([cq, recv_cq], srq, qp, gid)
}

/// A driver's session: queries, an MR, a window, two CQs, an SRQ, a QP walked to RTS, and
/// teardown; links name the objects the device numbered. The QP's two CQs differ: CQ numbers
/// 1 and 1 side by side form the word 0x1_0000_0001, an address in the driver's rings to
/// [`keep_off_driver_rings`].
fn session() -> Vec<Command> {
    let ([cq, recv_cq], srq, qp, gid) = session_objects();
    let to = |state: u8, mask: u32| ModifyQpCmd {
        qpn: Default::default(),
        attr_mask: mask,
        attr: QpAttr {
            qp_state: state,
            port_num: PORT_NUM,
            path_mtu: MTU_1024,
            qp_access_flags: ACCESS_REMOTE_WRITE,
            ah: AddrVector {
                dgid: gid.gid,
                hop_limit: 64,
                ..Default::default()
            },
            ..Default::default()
        },
    };
    vec![
        query(ADMIN_OP_QUERY_DEVICE, 0),
        query(ADMIN_OP_QUERY_PORT, PORT_NUM),
        cmd(ADMIN_OP_SET_GID, &gid),
        cmd(
            ADMIN_OP_REG_MR,
            &RegMrCmd {
                pd: 1,
                access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
                iova: ARENA + 16 * PAGE,
                length: 8 * PAGE,
                pbl: arena_pages(16, 8),
                offset_in_first_page: 0,
                flags: 0,
            },
        ),
        cmd(
            ADMIN_OP_ALLOC_MW,
            &AllocMwCmd {
                pd: 1,
                mw_type: 2,
                reserved: [0; 3],
            },
        ),
        cmd(ADMIN_OP_CREATE_CQ, &cq),
        cmd(ADMIN_OP_CREATE_SRQ, &srq),
        cmd(ADMIN_OP_CREATE_CQ, &recv_cq),
        linked(cmd(ADMIN_OP_CREATE_QP, &qp), &[(5, 8), (7, 12), (6, 16)]),
        linked(
            cmd(
                ADMIN_OP_MODIFY_QP,
                &to(
                    QPS_INIT,
                    QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                ),
            ),
            &[(8, 0)],
        ),
        linked(
            cmd(
                ADMIN_OP_MODIFY_QP,
                &to(
                    QPS_RTR,
                    QP_STATE
                        | QP_AV
                        | QP_PATH_MTU
                        | QP_DEST_QPN
                        | QP_RQ_PSN
                        | QP_MAX_DEST_RD_ATOMIC
                        | QP_MIN_RNR_TIMER,
                ),
            ),
            &[(8, 0), (8, 40)],
        ),
        linked(
            cmd(
                ADMIN_OP_MODIFY_QP,
                &to(
                    QPS_RTS,
                    QP_STATE
                        | QP_SQ_PSN
                        | QP_TIMEOUT
                        | QP_RETRY_CNT
                        | QP_RNR_RETRY
                        | QP_MAX_QP_RD_ATOMIC,
                ),
            ),
            &[(8, 0)],
        ),
        linked(query(ADMIN_OP_QUERY_QP, 0), &[(8, 0)]),
        linked(cmd(ADMIN_OP_QUERY_SRQ, &HandleCmd::default()), &[(6, 0)]),
        query(ADMIN_OP_QUERY_STATS, 0),
        query(ADMIN_OP_QUERY_COUNTERS, PORT_NUM),
        linked(
            cmd(
                ADMIN_OP_RESIZE_CQ,
                &ResizeCqCmd {
                    cq: 0,
                    log_depth: 8,
                    reserved: [0; 3],
                    ring: arena_pages(8, 2),
                },
            ),
            &[(5, 0)],
        ),
        linked(cmd(ADMIN_OP_DESTROY_QP, &QpnCmd::default()), &[(8, 0)]),
        linked(cmd(ADMIN_OP_DESTROY_SRQ, &HandleCmd::default()), &[(6, 0)]),
        linked(cmd(ADMIN_OP_DESTROY_CQ, &HandleCmd::default()), &[(7, 0)]),
        linked(cmd(ADMIN_OP_DESTROY_CQ, &HandleCmd::default()), &[(5, 0)]),
        linked(cmd(ADMIN_OP_DEALLOC_MW, &KeyCmd::default()), &[(4, 0)]),
        linked(cmd(ADMIN_OP_DEREG_MR, &KeyCmd::default()), &[(3, 0)]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed reaches every command of a session (a failed CREATE leaves the commands that
    /// link to it refused, and the fuzzer starts from less).
    #[test]
    fn every_command_of_the_session_seed_succeeds() {
        let statuses = execute(&mut device(), &session());
        assert_eq!(statuses, vec![ADMIN_STATUS_SUCCESS; session().len()]);
    }

    #[test]
    fn records_round_trip() {
        for s in seeds() {
            assert_eq!(encode(&decode(&s)), s);
        }
    }
}
