//! Chrome trace-event JSON of WQE traces, as Perfetto (ui.perfetto.dev) and chrome://tracing
//! open it: a process per device, a thread (track) per QP, one complete event ("X") per WQE
//! from its doorbell to its CQE with every stage as an argument, and an instant event ("i")
//! per record (packets, responses, retransmissions, CQEs, events, interrupts). Times are
//! microseconds from the earliest record of all the dumps.

use serde_json::{json, Value};

use super::lives::{lives, Life, Stage};
use super::record::{Dump, Kind, Record, NO_SYNDROME, WAIT_IDLE};
use super::report::{opcode_name, wr_opcode_name};

/// The track of events that belong to no QP (EQEs, interrupts).
pub const DEVICE_TRACK: u32 = 0;

/// The trace-event document of `dumps` (device `i` is `names[i]`, pid `i + 1`).
pub fn export(dumps: &[Dump], names: &[String]) -> Value {
    let t0 = dumps
        .iter()
        .flat_map(|d| d.records.first())
        .map(|r| r.ts_ns)
        .min()
        .unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1000.0;
    let mut events = Vec::new();
    for (device, dump) in dumps.iter().enumerate() {
        let pid = device + 1;
        let name = names
            .get(device)
            .cloned()
            .unwrap_or(format!("device {device}"));
        events.push(meta(pid, None, "process_name", &name));
        let mut qpns: Vec<u32> = dump.records.iter().map(track_of).collect();
        qpns.sort_unstable();
        qpns.dedup();
        for q in qpns {
            let track = if q == DEVICE_TRACK {
                "device (EQ, MSI-X)".to_string()
            } else {
                format!("QP {q:#x}")
            };
            events.push(meta(pid, Some(q), "thread_name", &track));
        }
        for r in &dump.records {
            events.push(instant(pid, r, us(r.ts_ns)));
        }
    }
    for l in lives(dumps) {
        events.push(slice(
            &l,
            us(l.doorbell),
            (l.end() - l.doorbell) as f64 / 1000.0,
        ));
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

fn meta(pid: usize, tid: Option<u32>, what: &str, name: &str) -> Value {
    json!({
        "ph": "M", "pid": pid, "tid": tid.unwrap_or(DEVICE_TRACK),
        "name": what, "args": { "name": name },
    })
}

/// The QP track a record belongs on.
fn track_of(r: &Record) -> u32 {
    match r.kind() {
        Some(Kind::Eqe | Kind::Interrupt | Kind::Wait | Kind::Wake) | None => DEVICE_TRACK,
        Some(_) => r.qpn,
    }
}

fn instant(pid: usize, r: &Record, ts: f64) -> Value {
    let kind = r.kind();
    let (name, args) = match kind {
        Some(Kind::Doorbell) => ("doorbell", json!({ "pi": r.a, "new_wqes": r.b })),
        Some(Kind::WqeFetch) => (
            "fetch",
            json!({ "index": r.a, "bytes": r.b, "opcode": wr_opcode_name(r.op),
                    "wr_id": r.wr_id }),
        ),
        Some(Kind::WqeStart) => (
            "psns",
            json!({ "first_psn": r.a, "count": r.b, "wr_id": r.wr_id }),
        ),
        Some(Kind::FrameOut) => (
            "frame out",
            json!({ "psn": r.a, "opcode": opcode_name(r.op), "payload": r.b }),
        ),
        Some(Kind::FrameIn) => (
            "frame in",
            json!({ "psn": r.a, "opcode": opcode_name(r.op), "payload": r.b }),
        ),
        Some(Kind::ResponseIn) => (
            "response in",
            json!({ "psn": r.a, "opcode": opcode_name(r.op),
                    "syndrome": (r.b != NO_SYNDROME).then_some(r.b) }),
        ),
        Some(Kind::Retransmit) => ("retransmit", json!({ "from_psn": r.a, "reason": r.b })),
        Some(Kind::Cqe) => (
            "cqe",
            json!({ "wr_id": r.wr_id, "status": r.a, "cq": r.b, "wc_opcode": r.op,
                    "recv": r.flags != 0 }),
        ),
        Some(Kind::Eqe) => ("eqe", json!({ "eq": r.a, "type": r.op, "handle": r.qpn })),
        Some(Kind::Interrupt) => ("interrupt", json!({ "vector": r.a })),
        Some(Kind::Wait) => (
            "wait",
            json!({ "waited_us": r.a, "asked_us": (r.b != u32::MAX).then_some(r.b),
                    "idle": r.flags & WAIT_IDLE != 0 }),
        ),
        Some(Kind::Wake) => ("wake", json!({})),
        None => ("unknown", json!({ "kind": r.kind })),
    };
    json!({
        "ph": "i", "s": "t", "pid": pid, "tid": track_of(r), "ts": ts,
        "name": name, "cat": "record", "args": args,
    })
}

fn slice(l: &Life, ts: f64, dur: f64) -> Value {
    let mut stages = serde_json::Map::new();
    for s in Stage::ALL {
        if let Some(ns) = l.stage_ns(s) {
            stages.insert(format!("{}_us", s.name()), json!(ns as f64 / 1000.0));
        }
    }
    json!({
        "ph": "X", "pid": l.device + 1, "tid": l.qpn, "ts": ts, "dur": dur,
        "cat": "wqe",
        "name": format!("{} {} B", wr_opcode_name(l.wr_opcode), l.bytes),
        "args": {
            "wr_id": l.wr_id, "sq_index": l.index, "bytes": l.bytes,
            "first_psn": l.psns.map(|p| p.0), "psns": l.psns.map(|p| p.1),
            "frames": l.frames, "retransmits": l.retransmits,
            "status": l.status, "completed": l.cqe.is_some(),
            "stages": stages,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::lives::tests::two_writes;
    use super::*;

    fn events_named<'a>(doc: &'a Value, ph: &str) -> Vec<&'a Value> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == ph)
            .collect()
    }

    #[test]
    fn one_slice_per_wqe_on_its_qp_track_and_an_instant_per_record() {
        let dump = two_writes();
        let doc = export(std::slice::from_ref(&dump), &["rox0".into()]);
        let slices = events_named(&doc, "X");
        assert_eq!(slices.len(), 2);
        for s in &slices {
            assert_eq!(s["pid"], 1);
            assert_eq!(s["tid"], 5);
            assert_eq!(s["name"], "RDMA_WRITE 8192 B");
        }
        assert_eq!(slices[1]["args"]["wr_id"], 11);
        assert_eq!(slices[1]["args"]["retransmits"], 1);
        assert_eq!(slices[1]["ts"], 0.0, "t0 is the first record");
        assert_eq!(slices[1]["dur"], 1.6);
        assert_eq!(slices[1]["args"]["stages"]["CQE->interrupt_us"], 0.2);
        assert_eq!(events_named(&doc, "i").len(), dump.records.len());
        let tracks: Vec<String> = events_named(&doc, "M")
            .iter()
            .map(|m| m["args"]["name"].as_str().unwrap().to_string())
            .collect();
        assert!(tracks.contains(&"rox0".to_string()));
        assert!(tracks.contains(&"QP 0x5".to_string()));
        assert!(doc["displayTimeUnit"].is_string());
        // It is JSON a viewer can load: serialises and parses back the same.
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), doc);
    }

    #[test]
    fn no_records_give_an_empty_but_valid_document() {
        let doc = export(&[Dump::default()], &[]);
        assert_eq!(events_named(&doc, "X").len(), 0);
        assert_eq!(events_named(&doc, "M").len(), 1, "the device's name only");
    }
}
