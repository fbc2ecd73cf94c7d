//! The device stores every byte it places in guest memory exactly once. Software may update
//! memory as soon as it sees the device's bytes there (rsockets rewrites the target SGE a credit
//! WRITE placed, without waiting for the completion); a second store of the same bytes — what
//! `memcpy` does for 16..31 bytes and at the ends of larger copies — undoes that update.
//!
//! Deterministic check, one store instruction at a time (`rox_nic::sys::store_trace`: the
//! guest page the device writes is read-only, each store faults and is single-stepped, and
//! after it the application overwrites every byte that just took the device's value with its
//! own). Every byte must have been stored once and still hold the application's value.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use rox_nic::dma::{GuestMemory, MappedRegion};
use rox_nic::sys::store_trace::{trace_stores, PAGE};

const IOVA: u64 = 0x7000_0000;
/// What the device's stores are distinguished from: the page before, and the application's
/// update after.
const BEFORE: u8 = 0x11;
const UPDATED: u8 = 0xee;

#[test]
fn device_stores_each_byte_of_a_write_once() {
    let file = rox_nic::sys::fd::memfd(c"rox-store-once-test").unwrap();
    file.set_len(PAGE as u64).unwrap();
    let mem =
        GuestMemory::default().with_region(MappedRegion::map(&file, 0, IOVA, PAGE as u64).unwrap());
    // The device's own mapping of the page, which its writes go through.
    let page = mem.volatile_slice(IOVA, PAGE).unwrap();
    let mut instructions = 0;
    // Lengths around rsockets' 16-byte SGE and the sizes memcpy treats specially, at several
    // alignments.
    for &len in &[
        16usize, 1, 7, 8, 12, 17, 24, 31, 32, 33, 48, 63, 64, 100, 200, 256,
    ] {
        for off in [0usize, 3, 8, 100] {
            mem.write(IOVA, &[BEFORE; PAGE]).unwrap();
            // Never BEFORE nor UPDATED.
            let src: Vec<u8> = (0..len).map(|i| (i % 200) as u8 + 0x20).collect();
            let trace = trace_stores(&page, off..off + len, BEFORE, UPDATED, || {
                mem.write(IOVA + off as u64, &src).unwrap()
            })
            .unwrap();
            instructions += trace.instructions;
            let twice: Vec<usize> = (0..len).filter(|&i| trace.stores[i] > 1).collect();
            assert!(
                twice.is_empty(),
                "a {len}-byte write at offset {off} stored bytes {twice:?} more than once: the \
                 application's update of them was undone"
            );
            assert!(
                trace.stores.iter().all(|&n| n == 1),
                "every byte stored: {:?}",
                trace.stores
            );
            let mut now = vec![0u8; len];
            mem.read(IOVA + off as u64, &mut now).unwrap();
            assert!(
                now.iter().all(|&b| b == UPDATED),
                "the application's update stands: {now:?}"
            );
        }
    }
    println!("{instructions} store instructions traced");
}
