//! The device stores every byte it places in guest memory exactly once. Software may update
//! memory as soon as it sees the device's bytes there (rsockets rewrites the target SGE a credit
//! WRITE placed, without waiting for the completion); a second store of the same bytes — what
//! `memcpy` does for 16..31 bytes and at the ends of larger copies — undoes that update.
//!
//! Deterministic check, one store instruction at a time: the guest page the device writes is
//! read-only; each store faults (SIGSEGV), the handler opens the page and single-steps the
//! store (trap flag), and the SIGTRAP after it plays the application: every byte that just
//! took the device's value is overwritten with the application's own value at once. At the end
//! every byte must have been stored once and still hold the application's value.
// The test traces the device's stores with page protection, signal handlers and the trap flag:
// host-side machinery rox-nic itself never uses.
#![allow(unsafe_code)]
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use rox_nic::dma::{GuestMemory, MappedRegion};
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

const IOVA: u64 = 0x7000_0000;
const PAGE: usize = 4096;
/// What the device's stores are distinguished from: the page before, and the application's
/// update after.
const BEFORE: u8 = 0x11;
const UPDATED: u8 = 0xee;
const MAX_LEN: usize = 256;
/// Trap flag of RFLAGS: a debug trap after the next instruction.
const TRAP_FLAG: i64 = 0x100;

// What the signal handlers see (set before the page is protected, read back after).
static PAGE_ADDR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static DST_OFFSET: AtomicUsize = AtomicUsize::new(0);
static LEN: AtomicUsize = AtomicUsize::new(0);
static STORES: [AtomicUsize; MAX_LEN] = [const { AtomicUsize::new(0) }; MAX_LEN];
static INSTRUCTIONS: AtomicUsize = AtomicUsize::new(0);

fn protect(prot: i32) {
    let page = PAGE_ADDR.load(Ordering::SeqCst);
    // SAFETY: the test's own page-aligned mapping of PAGE bytes.
    let rc = unsafe { libc::mprotect(page.cast(), PAGE, prot) };
    assert_eq!(rc, 0, "mprotect");
}

extern "C" fn on_segv(_sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let page = PAGE_ADDR.load(Ordering::SeqCst) as usize;
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if addr < page || addr >= page + PAGE {
        // Not ours: die as the fault would have.
        // SAFETY: resetting a signal to its default action and returning re-raises it.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        return;
    }
    // SAFETY: the page is ours; ctx is the interrupted context (a ucontext_t).
    unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
        );
        let uc = ctx.cast::<libc::ucontext_t>();
        (*uc).uc_mcontext.gregs[libc::REG_EFL as usize] |= TRAP_FLAG;
    }
}

extern "C" fn on_trap(_sig: i32, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let page = PAGE_ADDR.load(Ordering::SeqCst);
    let (off, len) = (
        DST_OFFSET.load(Ordering::SeqCst),
        LEN.load(Ordering::SeqCst),
    );
    INSTRUCTIONS.fetch_add(1, Ordering::SeqCst);
    for (i, stores) in STORES.iter().enumerate().take(len) {
        // SAFETY: off + i < PAGE, inside the page (writable until the end of this handler).
        unsafe {
            let b = page.add(off + i);
            let v = b.read_volatile();
            if v != UPDATED && v != BEFORE {
                // The device just stored this byte (its values are neither): the application
                // updates it at once.
                stores.fetch_add(1, Ordering::SeqCst);
                b.write_volatile(UPDATED);
            }
        }
    }
    // SAFETY: as in on_segv.
    unsafe {
        libc::mprotect(page.cast(), PAGE, libc::PROT_READ);
        let uc = ctx.cast::<libc::ucontext_t>();
        (*uc).uc_mcontext.gregs[libc::REG_EFL as usize] &= !TRAP_FLAG;
    }
}

fn install(sig: i32, handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void)) {
    // SAFETY: a zeroed sigaction with a SA_SIGINFO handler of the right signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}

/// The device's mapping of the memfd named `name` (MappedRegion keeps its pointer private).
fn mapping_of(name: &str) -> *mut u8 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.contains(name))
        .expect("the region's mapping");
    let start = line.split('-').next().unwrap();
    usize::from_str_radix(start, 16).unwrap() as *mut u8
}

#[test]
fn device_stores_each_byte_of_a_write_once() {
    let name = "rox-store-once-test";
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: a fresh memfd; checked.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fd is ours.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(PAGE as u64).unwrap();
    let mem =
        GuestMemory::default().with_region(MappedRegion::map(&file, 0, IOVA, PAGE as u64).unwrap());
    let page = mapping_of(name);
    PAGE_ADDR.store(page, Ordering::SeqCst);
    install(libc::SIGSEGV, on_segv);
    install(libc::SIGTRAP, on_trap);
    // Lengths around rsockets' 16-byte SGE and the sizes memcpy treats specially, at several
    // alignments.
    for &len in &[
        16usize, 1, 7, 8, 12, 17, 24, 31, 32, 33, 48, 63, 64, 100, 200, MAX_LEN,
    ] {
        for off in [0usize, 3, 8, 100] {
            // SAFETY: the page is ours and writable here.
            unsafe { std::ptr::write_bytes(page, BEFORE, PAGE) };
            for s in &STORES {
                s.store(0, Ordering::SeqCst);
            }
            DST_OFFSET.store(off, Ordering::SeqCst);
            LEN.store(len, Ordering::SeqCst);
            // Never BEFORE nor UPDATED.
            let src: Vec<u8> = (0..len).map(|i| (i % 200) as u8 + 0x20).collect();
            protect(libc::PROT_READ);
            mem.write(IOVA + off as u64, &src).unwrap();
            protect(libc::PROT_READ | libc::PROT_WRITE);
            let stores: Vec<usize> = STORES[..len]
                .iter()
                .map(|s| s.load(Ordering::SeqCst))
                .collect();
            let twice: Vec<usize> = (0..len).filter(|&i| stores[i] > 1).collect();
            assert!(
                twice.is_empty(),
                "a {len}-byte write at offset {off} stored bytes {twice:?} more than once: the \
                 application's update of them was undone"
            );
            assert!(
                stores.iter().all(|&n| n == 1),
                "every byte stored: {stores:?}"
            );
        }
    }
    println!(
        "{} store instructions traced",
        INSTRUCTIONS.load(Ordering::SeqCst)
    );
}
