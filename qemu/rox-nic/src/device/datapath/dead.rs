//! The data path of a dead device (`device::death`): it carries the death out, then only
//! drops what arrives on the port and from the netdev (so peers see a silent wire rather than
//! full socket buffers) and sleeps; it still answers `Shutdown`.

use super::*;
use crate::device::death::DeathMode;

impl DataPath {
    /// Die: report the fatal error first if asked, then stop for good.
    pub(super) fn die(&mut self, mode: DeathMode) {
        if self.shared.is_dead() {
            return;
        }
        if mode != DeathMode::Silent {
            // The report is the device's last act (EQE on EQ 0, MSI-X vector 0).
            self.hw.set_fatal(FATAL_INTERNAL);
        }
        if mode == DeathMode::Hang {
            // Before `dead`: whoever sees the device dead sees its BARs still answer.
            self.shared.hung.store(true, Ordering::Release);
        } else {
            // Reads of the mmapped doorbell BAR return all-ones too, as on a dead function.
            self.shared.doorbells.fill(u32::MAX);
        }
        self.shared.dead.store(true, Ordering::Release);
        log::error!("rox-nic: the device is dead ({mode:?}), as asked; only QEMU is served");
    }

    /// One pass of a dead device: drop every frame waiting, then sleep until something
    /// arrives or a control message (Shutdown) is sent.
    pub(super) fn dead_pass(&mut self) {
        if let Some(p) = &mut self.port {
            while matches!(p.recv(), Ok(n) if n > 0) {}
        }
        if let Some(nd) = &mut self.netdev {
            while matches!(nd.recv(), Ok(n) if n > 0) {}
        }
        if self.ctl.is_empty() {
            self.wait(None);
        }
    }
}
