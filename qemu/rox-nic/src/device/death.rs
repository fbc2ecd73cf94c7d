//! An injected device death: what a driver sees when a real NIC's firmware crashes or its
//! PCIe link goes down under it (surprise down). The device stops for good: no doorbell,
//! admin command or frame is looked at again, nothing is written to guest memory and no
//! interrupt fires; BAR0 and the trapped doorbell BAR read all-ones and ignore writes
//! (`server.rs`), a reset does nothing. The vfio-user socket stays served, so QEMU keeps
//! running the guest with a dead function in it (killing rox-nic instead also kills QEMU
//! now and then: docs/debugging.md). rox-nic's `--die-on` asks for it on a signal.

use std::str::FromStr;
use std::sync::atomic::Ordering;

use super::{Control, Shared};

/// How the device dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeathMode {
    /// Surprise down: no word to the driver, which finds out at its next BAR read or admin
    /// command timeout.
    Silent,
    /// A firmware crash that reports itself first: `STATUS_FATAL` with `FATAL_INTERNAL`, an
    /// `EQE_TYPE_DEVICE_FATAL` on EQ 0 and MSI-X vector 0, then the same death as `Silent`.
    Report,
    /// Firmware that reports the crash as `Report` does, then hangs while the function still
    /// answers: its BARs keep reading their registers (never all-ones), a reset is taken but
    /// never completes (`STATUS_READY` stays clear), and nothing else happens. A driver must
    /// stop waiting for the reset on its own (rox.ko: `QUIESCE_DEADLINE`).
    Hang,
}

/// `--die-on`: a real-time signal and the death it brings,
/// `rtmin+N[,fatal=silent|report|hang]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DieOn {
    /// N of SIGRTMIN+N (SIGUSR1 and SIGUSR2 are rox-nic's trace dumps).
    pub rtmin_offset: i32,
    pub mode: DeathMode,
}

impl DieOn {
    /// The signal number.
    pub fn signal(&self) -> i32 {
        libc::SIGRTMIN() + self.rtmin_offset
    }
}

impl FromStr for DieOn {
    type Err = String;

    fn from_str(s: &str) -> Result<DieOn, String> {
        let (sig, rest) = s.split_once(',').unwrap_or((s, ""));
        let n = sig
            .strip_prefix("rtmin+")
            .and_then(|n| n.parse::<i32>().ok())
            .ok_or_else(|| format!("{s:?}: want rtmin+N[,fatal=silent|report|hang]"))?;
        let max = libc::SIGRTMAX() - libc::SIGRTMIN();
        if !(0..=max).contains(&n) {
            return Err(format!("{s:?}: N of rtmin+N must be 0..={max}"));
        }
        let mode = match rest {
            "" | "fatal=silent" => DeathMode::Silent,
            "fatal=report" => DeathMode::Report,
            "fatal=hang" => DeathMode::Hang,
            other => {
                return Err(format!(
                    "{s:?}: {other:?} is not fatal=silent, fatal=report or fatal=hang"
                ))
            }
        };
        Ok(DieOn {
            rtmin_offset: n,
            mode,
        })
    }
}

impl Shared {
    /// Kill the device (from any thread). The data path carries it out at its next pass;
    /// a second request changes nothing.
    pub fn die(&self, mode: DeathMode) {
        self.send(Control::Die(mode));
    }

    /// Whether the device is dead (then BAR reads return all-ones, unless it hangs).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Whether the device died as `DeathMode::Hang`: its BARs still answer.
    pub fn is_hung(&self) -> bool {
        self.hung.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn die_on_parses_signal_and_mode() {
        let d: DieOn = "rtmin+2,fatal=report".parse().unwrap();
        assert_eq!((d.rtmin_offset, d.mode), (2, DeathMode::Report));
        assert_eq!(d.signal(), libc::SIGRTMIN() + 2);
        let d: DieOn = "rtmin+0".parse().unwrap();
        assert_eq!(d.mode, DeathMode::Silent);
        assert_eq!(
            "rtmin+1,fatal=silent".parse::<DieOn>().unwrap().mode,
            DeathMode::Silent
        );
        assert_eq!(
            "rtmin+3,fatal=hang".parse::<DieOn>().unwrap().mode,
            DeathMode::Hang
        );
        for bad in [
            "usr2",
            "rtmin+",
            "rtmin+-1",
            "rtmin+99",
            "rtmin+1,fatal=loud",
            "rtmin+1,x",
        ] {
            assert!(bad.parse::<DieOn>().is_err(), "{bad} accepted");
        }
    }
}
