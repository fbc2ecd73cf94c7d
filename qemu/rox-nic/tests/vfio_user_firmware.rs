//! QEMU's vfio-user client as a firmware boot drives it, played byte for byte against rox-nic's
//! real server path (`server::serve`: rox-nic's server loop, the trace, the device).
//!
//! What QEMU 11.1 does (hw/vfio-user/container.c, proxy.c): inside a memory transaction
//! (SeaBIOS toggling PAM or SMRAM, BARs being enabled) DMA_MAP and DMA_UNMAP go out "nowait",
//! several in a row before any reply is read, and only the last is waited for when the
//! transaction commits; other requests (config space, BAR0) wait for their reply, 5 s at most;
//! a posted write (NO_REPLY) gets no reply at all; replies are read by an I/O thread while
//! vCPU threads send. A reply lost, duplicated, sent to a NO_REPLY message or sent out of order
//! is what would leave a vCPU waiting. These tests check, for such conversations, that every
//! request wanting a reply gets exactly one, in order, within QEMU's timeout, and none else.

mod vfio_user_client;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rox_nic::server::Trace;
use rox_nic::testkit::{GuestRam, RAM_BASE};
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::*;
use vfio_user_client::*;

/// One memory transaction as QEMU's listener sends it: region_del then region_add of guest
/// RAM, nowait, then (at commit) the replies read in order.
fn transaction(c: &mut Client, ram: &GuestRam) {
    let unmap = c.tx.dma_unmap_nowait(RAM_BASE, RAM_SIZE, 0);
    let low = c.tx.dma_map_nowait(ram, RAM_BASE, RAM_SIZE / 2, 0);
    let high =
        c.tx.dma_map_nowait(ram, RAM_BASE + RAM_SIZE / 2, RAM_SIZE / 2, RAM_SIZE / 2);
    c.expect_reply(unmap, CMD_DMA_UNMAP);
    c.expect_reply(low, CMD_DMA_MAP);
    c.expect_reply(high, CMD_DMA_MAP);
}

#[test]
fn firmware_probe_between_memory_transactions_gets_every_reply_in_order() {
    let dev = start_device(4096);
    let ram = GuestRam::new(RAM_BASE, RAM_SIZE);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
    let mut requests = 0u64;
    for round in 0..40u32 {
        // SeaBIOS's probe: identity, class, then each BAR sized and restored.
        let id = c.read32(cfg, 0);
        assert_eq!(id & 0xffff, u32::from(PCI_VENDOR_ID));
        c.read32(cfg, 8);
        for bar in 0..6u64 {
            let off = 0x10 + 4 * bar;
            let was = c.read32(cfg, off);
            c.write32(cfg, off, 0xffff_ffff, false);
            c.read32(cfg, off);
            c.write32(cfg, off, was, false);
        }
        requests += 2 + 6 * 4;
        transaction(&mut c, &ram);
        requests += 3;
        // A posted write is ordered before the read that follows it, and is not answered.
        c.write32(BAR_CTRL, REG_SCRATCH, 0x5ca1_0000 + round, true);
        assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), 0x5ca1_0000 + round);
        requests += 2;
    }
    assert!(
        dev.shared.mem().check(RAM_BASE, RAM_SIZE).is_ok(),
        "guest RAM mapped"
    );

    // QEMU dropping the whole address space: VFIO_DMA_UNMAP_FLAG_ALL, address and size 0.
    let all = c.tx.dma_unmap_nowait(0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
    c.expect_reply(all, CMD_DMA_UNMAP);
    assert!(
        dev.shared.mem().is_empty(),
        "unmap-all left mappings behind"
    );
    let reset = c.tx.send(CMD_DEVICE_RESET, 0, &[], None);
    c.expect_reply(reset, CMD_DEVICE_RESET);
    requests += 2;

    c.close();
    dev.thread.join().unwrap().unwrap();
    let entries = dev.trace.entries();
    assert_eq!(
        entries.len() as u64,
        requests,
        "every request reached the device once"
    );
    let unanswered: Vec<String> = entries
        .iter()
        .filter(|e| !e.answered)
        .map(|e| e.to_string())
        .collect();
    assert!(unanswered.is_empty(), "{unanswered:?}");
}

#[test]
fn a_burst_past_the_socket_buffers_neither_deadlocks_nor_loses_a_reply() {
    // QEMU keeps sending nowait maps while its I/O thread is slow to read: the server blocks
    // writing replies, the client blocks writing requests, and both go on once replies are
    // read. Enough requests to fill both directions' socket buffers several times.
    const PAIRS: usize = 3000;
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::from_millis(500));
    let t0 = Instant::now();
    let (ids_tx, ids) = mpsc::channel();
    let mut sender = Requests {
        sock: c.tx.sock.try_clone().unwrap(),
        next_id: c.tx.next_id,
    };
    let send = thread::spawn(move || {
        let ram = GuestRam::new(RAM_BASE, RAM_SIZE);
        for _ in 0..PAIRS {
            let u = sender.dma_unmap_nowait(RAM_BASE, RAM_SIZE, 0);
            let m = sender.dma_map_nowait(&ram, RAM_BASE, RAM_SIZE, 0);
            ids_tx.send([(u, CMD_DMA_UNMAP), (m, CMD_DMA_MAP)]).unwrap();
        }
        sender.next_id
    });
    for pair in ids.iter() {
        for (id, cmd) in pair {
            c.expect_reply(id, cmd);
        }
    }
    c.tx.next_id = send.join().unwrap();
    // Still in step: a write and a read of the scratch register, each answered.
    c.write32(BAR_CTRL, REG_SCRATCH, 0x600d, false);
    assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), 0x600d);
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "{PAIRS} map/unmap pairs took {took:?}"
    );
    assert!(dev.shared.mem().check(RAM_BASE, RAM_SIZE).is_ok());
    assert!(dev.trace.entries().iter().all(|e| e.answered));
    c.close();
    dev.thread.join().unwrap().unwrap();
}
