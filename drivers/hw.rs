// SPDX-License-Identifier: GPL-2.0
//! The rox-nic hardware interface, from the one definition in `uapi/` (included by path: the
//! crate is `no_std` without dependencies, so the same files build in the kernel), and access
//! to the device's BAR0 control registers.

use kernel::{io::Io, pci, prelude::*};

pub(crate) use crate::uapi::{self, regs};

/// BAR0 (control registers, wake page, MSI-X table and PBA), mapped for the bound device.
pub(crate) type CtrlBar<'bound> = pci::Bar<'bound, { regs::BAR_CTRL_SIZE as usize }>;

/// Typed access to the control registers of BAR0.
pub(crate) struct Regs<'bound> {
    bar: CtrlBar<'bound>,
}

impl<'bound> Regs<'bound> {
    pub(crate) fn new(bar: CtrlBar<'bound>) -> Self {
        Self { bar }
    }

    /// Reads a 32-bit register at a constant offset (`regs::REG_*`).
    #[inline(always)]
    pub(crate) fn read(&self, reg: u64) -> u32 {
        self.bar.read32(reg as usize)
    }

    /// Writes a 32-bit register at a constant offset (`regs::REG_*`).
    #[inline(always)]
    pub(crate) fn write(&self, reg: u64, value: u32) {
        self.bar.write32(value, reg as usize)
    }

    /// Writes a 64-bit DMA address into a LO/HI register pair.
    pub(crate) fn write_addr(&self, lo: u64, hi: u64, addr: u64) {
        self.write(lo, addr as u32);
        self.write(hi, (addr >> 32) as u32);
    }

    /// Writes a register of event queue `eqn` (`regs::EQ_*`).
    pub(crate) fn write_eq(&self, eqn: u32, reg: u64, value: u32) -> Result {
        self.bar.try_write32(value, regs::reg_eq(eqn, reg) as usize)
    }

    /// Writes both halves of an event queue's ring address.
    pub(crate) fn write_eq_addr(&self, eqn: u32, addr: u64) -> Result {
        self.write_eq(eqn, regs::EQ_ADDR_LO, addr as u32)?;
        self.write_eq(eqn, regs::EQ_ADDR_HI, (addr >> 32) as u32)
    }
}
