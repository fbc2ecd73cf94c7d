//! Test kit only (x86-64 Linux): every store instruction into one page, traced one at a time —
//! how tests/roce_integrity_store.rs proves the device stores each byte it places in guest
//! memory exactly once ([`super::store_once`]).
//!
//! The page is made read-only, so each store into it faults (SIGSEGV); the handler opens the
//! page and sets the trap flag, so the store runs as one single step; the SIGTRAP after it
//! plays an application that updates memory as soon as it sees the device's bytes there: every
//! watched byte that just took a new value is counted and at once overwritten with the
//! application's own value. Then the page is closed again and the trap flag cleared. A second
//! store of a byte (what `memcpy` does for 16..31 bytes) shows as a count of 2 and would have
//! undone the application's update.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use vm_memory::volatile_memory::VolatileSlice;

/// x86-64's base page: the unit `mprotect` works in.
pub const PAGE: usize = 4096;
/// Trap flag of RFLAGS: a debug trap after the next instruction.
const TRAP_FLAG: libc::greg_t = 0x100;

/// One trace at a time in the process: the signal handlers see only these statics.
static TRACE: Mutex<()> = Mutex::new(());
static PAGE_ADDR: AtomicUsize = AtomicUsize::new(0);
static WATCH_START: AtomicUsize = AtomicUsize::new(0);
static WATCH_END: AtomicUsize = AtomicUsize::new(0);
static BEFORE: AtomicU8 = AtomicU8::new(0);
static UPDATED: AtomicU8 = AtomicU8::new(0);
static STORES: [AtomicUsize; PAGE] = [const { AtomicUsize::new(0) }; PAGE];
static INSTRUCTIONS: AtomicUsize = AtomicUsize::new(0);

/// What [`trace_stores`] saw.
#[derive(Debug)]
pub struct StoreTrace {
    /// Store instructions into the page (each a fault and a single step).
    pub instructions: usize,
    /// Per watched byte (from the start of the watched range): the stores that gave it a value
    /// neither `before` nor `updated`.
    pub stores: Vec<usize>,
}

/// Runs `store` with `page` read-only and traces each store instruction into it (module doc):
/// after each, every byte of `watch` (offsets in the page) holding neither `before` nor
/// `updated` is counted as stored and overwritten with `updated`. `page` is one whole,
/// page-aligned [`PAGE`] of a writable mapping (it is read-write again afterwards, also when
/// `store` panics); stores of other threads into it meanwhile are traced as well. A fault
/// outside the page kills the process as it would have without the trace.
pub fn trace_stores(
    page: &VolatileSlice<'_, ()>,
    watch: Range<usize>,
    before: u8,
    updated: u8,
    store: impl FnOnce(),
) -> std::io::Result<StoreTrace> {
    let addr = page.ptr_guard().as_ptr() as usize;
    if page.len() != PAGE || addr % PAGE != 0 {
        return Err(invalid(
            "the traced memory must be one page-aligned 4 KiB page",
        ));
    }
    if watch.start > watch.end || watch.end > PAGE || before == updated {
        return Err(invalid(
            "the watched bytes must lie in the page, `before` != `updated`",
        ));
    }
    let _one_at_a_time = TRACE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    PAGE_ADDR.store(addr, Ordering::SeqCst);
    WATCH_START.store(watch.start, Ordering::SeqCst);
    WATCH_END.store(watch.end, Ordering::SeqCst);
    BEFORE.store(before, Ordering::SeqCst);
    UPDATED.store(updated, Ordering::SeqCst);
    INSTRUCTIONS.store(0, Ordering::SeqCst);
    for s in &STORES {
        s.store(0, Ordering::SeqCst);
    }
    {
        let _handlers = Handlers::install()?;
        let _read_only = ReadOnly::protect(addr)?;
        store();
    }
    Ok(StoreTrace {
        instructions: INSTRUCTIONS.load(Ordering::SeqCst),
        stores: STORES[watch]
            .iter()
            .map(|s| s.load(Ordering::SeqCst))
            .collect(),
    })
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what)
}

/// The SIGSEGV and SIGTRAP handlers of a trace; dropping it puts the earlier ones back.
struct Handlers {
    segv: libc::sigaction,
    trap: libc::sigaction,
}

impl Handlers {
    fn install() -> std::io::Result<Handlers> {
        let segv = install(libc::SIGSEGV, on_segv)?;
        match install(libc::SIGTRAP, on_trap) {
            Ok(trap) => Ok(Handlers { segv, trap }),
            Err(e) => {
                restore(libc::SIGSEGV, &segv);
                Err(e)
            }
        }
    }
}

impl Drop for Handlers {
    fn drop(&mut self) {
        restore(libc::SIGTRAP, &self.trap);
        restore(libc::SIGSEGV, &self.segv);
    }
}

/// Installs `handler` (SA_SIGINFO) for `sig`; returns the action it replaced.
fn install(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
) -> std::io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain C data (all zeroes valid); the handler has the SA_SIGINFO
    // signature, and both structures live across the calls.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, &sa, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(old)
    }
}

fn restore(sig: libc::c_int, old: &libc::sigaction) {
    // SAFETY: `old` is the action sigaction returned for `sig`; it lives across the call.
    unsafe { libc::sigaction(sig, old, std::ptr::null_mut()) };
}

/// The traced page, read-only until dropped.
struct ReadOnly(usize);

impl ReadOnly {
    fn protect(addr: usize) -> std::io::Result<ReadOnly> {
        // SAFETY: `addr` is the page of the VolatileSlice trace_stores borrows (checked whole
        // and aligned): memory of this process that stays mapped while the trace runs.
        if unsafe { libc::mprotect(addr as *mut libc::c_void, PAGE, libc::PROT_READ) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ReadOnly(addr))
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: as in `protect`; the page is still borrowed by the trace.
        unsafe { libc::mprotect(self.0 as *mut libc::c_void, PAGE, rw) };
    }
}

/// A store into the page faulted: open the page and single-step the store.
extern "C" fn on_segv(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let page = PAGE_ADDR.load(Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if !(page..page + PAGE).contains(&addr) {
        // Not the traced page: die as the fault would have.
        // SAFETY: resetting a signal to its default action; returning re-runs the fault.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        return;
    }
    // SAFETY: the page is the trace's (ReadOnly::protect); `ctx` is the interrupted context,
    // a ucontext_t the kernel restores when the handler returns.
    unsafe {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        libc::mprotect(page as *mut libc::c_void, PAGE, rw);
        let uc = ctx.cast::<libc::ucontext_t>();
        (*uc).uc_mcontext.gregs[libc::REG_EFL as usize] |= TRAP_FLAG;
    }
}

/// The store ran: count and overwrite the bytes it placed, close the page, stop stepping.
extern "C" fn on_trap(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let page = PAGE_ADDR.load(Ordering::SeqCst) as *mut u8;
    let (before, updated) = (
        BEFORE.load(Ordering::SeqCst),
        UPDATED.load(Ordering::SeqCst),
    );
    let watch = WATCH_START.load(Ordering::SeqCst)..WATCH_END.load(Ordering::SeqCst);
    INSTRUCTIONS.fetch_add(1, Ordering::SeqCst);
    for i in watch {
        // SAFETY: i < PAGE (trace_stores checked the range): inside the page, which on_segv
        // opened for writing and which stays open until the end of this handler.
        unsafe {
            let b = page.add(i);
            let v = b.read_volatile();
            if v != before && v != updated {
                STORES[i].fetch_add(1, Ordering::SeqCst);
                b.write_volatile(updated);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::{GuestMemory, MappedRegion};

    const IOVA: u64 = 0x10_0000;

    fn one_page() -> GuestMemory {
        let file = crate::sys::fd::memfd(c"rox-store-trace").unwrap();
        file.set_len(2 * PAGE as u64).unwrap();
        let region = MappedRegion::map(&file, 0, IOVA, 2 * PAGE as u64).unwrap();
        GuestMemory::default().with_region(region)
    }

    #[test]
    fn a_byte_stored_twice_counts_twice_and_bytes_outside_the_watch_not_at_all() {
        let mem = one_page();
        let page = mem.volatile_slice(IOVA, PAGE).unwrap();
        let trace = trace_stores(&page, 4..8, 0, 0xee, || {
            mem.write(IOVA + 5, &[1]).unwrap();
            mem.write(IOVA + 5, &[2]).unwrap();
            mem.write(IOVA + 6, &[3]).unwrap();
            mem.write(IOVA + 100, &[4]).unwrap();
            // The next page is not traced.
            mem.write(IOVA + PAGE as u64, &[5]).unwrap();
        })
        .unwrap();
        assert_eq!(trace.instructions, 4, "one per store into the page");
        assert_eq!(trace.stores, [0, 2, 1, 0]);
        let mut now = [0u8; 4];
        mem.read(IOVA + 4, &mut now).unwrap();
        assert_eq!(now, [0, 0xee, 0xee, 0], "the updates stand");
        // Writable again, untraced.
        mem.write(IOVA + 5, &[9]).unwrap();
    }

    #[test]
    fn only_a_whole_aligned_page_with_its_watch_inside_is_traced() {
        let mem = one_page();
        let whole = mem.volatile_slice(IOVA, PAGE).unwrap();
        let short = mem.volatile_slice(IOVA, PAGE - 1).unwrap();
        let unaligned = mem.volatile_slice(IOVA + 1, PAGE).unwrap();
        let refused = |page: &VolatileSlice<'_, ()>, watch: Range<usize>, updated: u8| {
            let e = trace_stores(page, watch, 0, updated, || panic!("must not run")).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        };
        refused(&short, 0..1, 1);
        refused(&unaligned, 0..1, 1);
        refused(&whole, 0..PAGE + 1, 1);
        refused(&whole, 0..1, 0);
    }
}
