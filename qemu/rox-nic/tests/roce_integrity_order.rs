//! The publication order of the device's data path, across threads as the guest sees it: a
//! "device" thread places a payload and then the CQE that announces it through the real
//! functions (`GuestMemory::write`, `GuestMemory::write_entry_owner_last`), into a memfd that a
//! "guest" thread maps at another address (as QEMU and the guest kernel do). The guest thread
//! polls the owner byte as librox does (an acquire load), then checks that the CQE and the
//! payload it names are whole, and returns the slot through a consumer index (the CQ doorbell
//! word: a release store the device reads with acquire before it reuses the slot).
//!
//! The control case writes the owner byte before the payload (the order a missing fence or a
//! reordering compiler would produce) and must be caught: it shows the checker can fail.
//! `ROX_ORDER_ITERATIONS=N` runs more iterations.

use rox_nic::dma::{from_bytes, GuestMemory, MappedRegion};
use rox_nic::sys::shm::{sealed_memfd, SharedMapping};
use rox_uapi::queue::{owner_for, Cqe, CQE_SIZE};
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IOVA: u64 = 0x4000_0000;
const DEPTH: u32 = 64;
const PAYLOAD: usize = 1024;
const RING_BYTES: usize = DEPTH as usize * CQE_SIZE;
const SIZE: usize = RING_BYTES + DEPTH as usize * PAYLOAD;

/// The payload of message `seq`: every byte depends on `seq`, so a stale slot never passes.
fn payload_byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i as u8).wrapping_mul(31)
}

fn memfd() -> File {
    sealed_memfd(c"rox-order-test", SIZE as u64).expect("memfd")
}

/// The guest's view: its own shared mapping of the same memory (the sys layer's, as the cable's
/// peer maps its rings).
struct GuestView(SharedMapping);

impl GuestView {
    fn map(file: &File) -> GuestView {
        GuestView(SharedMapping::map(file, SIZE).expect("mmap"))
    }

    fn owner(&self, ci: u32) -> &AtomicU8 {
        self.0
            .atomic_u8((ci % DEPTH) as usize * CQE_SIZE + CQE_SIZE - 1)
    }

    fn cqe(&self, ci: u32) -> Cqe {
        let mut bytes = [0u8; CQE_SIZE];
        assert!(self.0.read((ci % DEPTH) as usize * CQE_SIZE, &mut bytes));
        from_bytes(&bytes)
    }

    fn payload(&self, slot: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; PAYLOAD];
        assert!(self
            .0
            .read(RING_BYTES + slot as usize * PAYLOAD, &mut bytes));
        bytes
    }
}

/// How the device thread publishes one completion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// rox-nic's order: payload, CQE body, owner byte (release).
    Device,
    /// Broken on purpose: owner byte first, then (once the guest has looked) body and payload.
    OwnerFirst,
}

/// Runs `n` completions; returns how many the guest found stale or torn.
fn run(n: u64, publish: Publish) -> u64 {
    let file = memfd();
    let mem =
        GuestMemory::default().with_region(MappedRegion::map(&file, 0, IOVA, SIZE as u64).unwrap());
    let guest = GuestView::map(&file);
    let ci = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (ci, stop) = (ci.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut bad = 0u64;
            for seq in 0..n {
                let index = seq as u32;
                let mut spins = 0u32;
                while guest.owner(index).load(Ordering::Acquire) != owner_for(index, DEPTH) {
                    if stop.load(Ordering::Relaxed) {
                        return bad;
                    }
                    spins += 1;
                    if spins % 256 == 0 {
                        std::thread::yield_now();
                    }
                }
                let cqe = guest.cqe(index);
                let data = guest.payload(index % DEPTH);
                let whole = cqe.wr_id == seq
                    && cqe.byte_len == PAYLOAD as u32
                    && data
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == payload_byte(seq, i));
                bad += u64::from(!whole);
                // Done with the slot: the CQ doorbell's consumer index (librox: release).
                ci.store(index.wrapping_add(1), Ordering::Release);
            }
            bad
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    for seq in 0..n {
        let pi = seq as u32;
        // The device never overwrites an unconsumed CQE (hw.rs write_cqe reads the consumer
        // index, acquire, before each write).
        let mut spins = 0u32;
        while pi.wrapping_sub(ci.load(Ordering::Acquire)) >= DEPTH {
            spins += 1;
            if spins % 256 == 0 {
                std::thread::yield_now();
            }
            assert!(Instant::now() < deadline, "consumer stuck at {seq}");
        }
        let slot = pi % DEPTH;
        let payload: Vec<u8> = (0..PAYLOAD).map(|i| payload_byte(seq, i)).collect();
        let cqe = Cqe {
            wr_id: seq,
            byte_len: PAYLOAD as u32,
            owner: owner_for(pi, DEPTH),
            ..Default::default()
        };
        let payload_at = IOVA + RING_BYTES as u64 + u64::from(slot) * PAYLOAD as u64;
        let cqe_at = IOVA + u64::from(slot) * CQE_SIZE as u64;
        match publish {
            Publish::Device => {
                mem.write(payload_at, &payload).unwrap();
                mem.write_entry_owner_last(cqe_at, &cqe).unwrap();
            }
            Publish::OwnerFirst => {
                mem.write(cqe_at + CQE_SIZE as u64 - 1, &[cqe.owner])
                    .unwrap();
                // The window a reordered store would open, held until the guest has looked (or
                // 5 ms): the guest then reads what the slot held before.
                let t = Instant::now();
                while ci.load(Ordering::Acquire) == pi && t.elapsed() < Duration::from_millis(5) {
                    std::thread::yield_now();
                }
                mem.write(payload_at, &payload).unwrap();
                mem.write_entry_owner_last(cqe_at, &cqe).unwrap();
            }
        }
    }
    let bad = consumer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    bad
}

fn iterations(default: u64) -> u64 {
    std::env::var("ROX_ORDER_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn guest_never_sees_a_cqe_before_its_payload() {
    let n = iterations(if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    });
    assert_eq!(
        run(n, Publish::Device),
        0,
        "stale or torn completions in {n}"
    );
}

#[test]
fn checker_catches_an_owner_written_before_the_payload() {
    let n = iterations(2_000).min(20_000);
    let bad = run(n, Publish::OwnerFirst);
    assert!(bad > 0, "the misordered publication went unnoticed in {n}");
    println!("owner-first: {bad} stale completions caught");
}
