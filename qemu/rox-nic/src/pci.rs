//! PCI configuration space of rox-nic: a PCIe endpoint, class network controller, with a 64-bit
//! BAR0 (control registers + wake page + MSI-X table/PBA), a 64-bit BAR2 (doorbell pages) and
//! an MSI-X capability. QEMU's vfio-pci emulates most of it; we answer reads consistently and
//! implement BAR sizing so a plain reader sees the usual semantics.

use rox_uapi::regs;

/// Size of the PCIe extended configuration space.
pub const CONFIG_SPACE_SIZE: usize = 4096;

// Standard header offsets and values (PCI Local Bus spec); these are PCI's constants, not rox's.
const PCI_VENDOR_ID: usize = 0x00;
const PCI_DEVICE_ID: usize = 0x02;
const PCI_COMMAND: usize = 0x04;
const PCI_STATUS: usize = 0x06;
const PCI_REVISION_ID: usize = 0x08;
const PCI_CLASS_PROG: usize = 0x09;
const PCI_HEADER_TYPE: usize = 0x0e;
const PCI_BASE_ADDRESS_0: usize = 0x10;
const PCI_SUBSYSTEM_VENDOR_ID: usize = 0x2c;
const PCI_SUBSYSTEM_ID: usize = 0x2e;
const PCI_CAPABILITY_LIST: usize = 0x34;
const PCI_INTERRUPT_PIN: usize = 0x3d;
const PCI_STATUS_CAP_LIST: u16 = 0x10;
const PCI_COMMAND_MEMORY: u16 = 0x2;
const PCI_COMMAND_MASTER: u16 = 0x4;
const PCI_COMMAND_INTX_DISABLE: u16 = 0x400;
const PCI_BASE_ADDRESS_MEM_TYPE_64: u32 = 0x4;
const PCI_BASE_ADDRESS_MEM_PREFETCH: u32 = 0x8;
const PCI_CAP_ID_MSIX: u8 = 0x11;
const PCI_CAP_ID_EXP: u8 = 0x10;
const PCI_EXP_TYPE_ENDPOINT: u16 = 0x0;
const PCI_EXP_FLAGS_VERSION_2: u16 = 0x2;
// Read only by a compile-time assert, which rustc 1.85 (the root's) does not count as a use.
#[allow(dead_code)]
const PCI_EXP_CAP_SIZE: usize = 0x3c;

/// Where our capabilities live.
pub const MSIX_CAP_OFFSET: usize = 0x40;
pub const PCIE_CAP_OFFSET: usize = 0x50;

/// MSI-X message control: "function mask" and "enable" bits.
pub const MSIX_CTRL_ENABLE: u16 = 1 << 15;
pub const MSIX_CTRL_MASKALL: u16 = 1 << 14;

/// What reads of absent PCI space return (all ones: no device there).
pub const NO_DEVICE_BYTE: u8 = 0xff;

pub struct ConfigSpace {
    bytes: [u8; CONFIG_SPACE_SIZE],
    /// Writable bits of every byte (BARs: address bits; command; MSI-X control enable/mask).
    wmask: [u8; CONFIG_SPACE_SIZE],
}

impl Default for ConfigSpace {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfigSpace {
    pub fn new() -> ConfigSpace {
        let mut c = ConfigSpace {
            bytes: [0; CONFIG_SPACE_SIZE],
            wmask: [0; CONFIG_SPACE_SIZE],
        };
        c.put16(PCI_VENDOR_ID, regs::PCI_VENDOR_ID);
        c.put16(PCI_DEVICE_ID, regs::PCI_DEVICE_ID);
        c.put16(PCI_STATUS, PCI_STATUS_CAP_LIST);
        c.bytes[PCI_REVISION_ID] = regs::PCI_REVISION;
        c.bytes[PCI_CLASS_PROG] = regs::PCI_CLASS_CODE as u8;
        c.bytes[PCI_CLASS_PROG + 1] = (regs::PCI_CLASS_CODE >> 8) as u8;
        c.bytes[PCI_CLASS_PROG + 2] = (regs::PCI_CLASS_CODE >> 16) as u8;
        c.bytes[PCI_HEADER_TYPE] = 0;
        c.put16(PCI_SUBSYSTEM_VENDOR_ID, regs::PCI_SUBSYSTEM_VENDOR_ID);
        c.put16(PCI_SUBSYSTEM_ID, regs::PCI_SUBSYSTEM_ID);
        c.bytes[PCI_INTERRUPT_PIN] = 0; // MSI-X only
        let cmd_mask = PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE;
        c.wmask[PCI_COMMAND] = cmd_mask as u8;
        c.wmask[PCI_COMMAND + 1] = (cmd_mask >> 8) as u8;

        c.add_bar64(regs::BAR_CTRL as usize, regs::BAR_CTRL_SIZE, false);
        c.add_bar64(regs::BAR_DB as usize, regs::BAR_DB_SIZE, true);

        c.bytes[PCI_CAPABILITY_LIST] = MSIX_CAP_OFFSET as u8;
        // MSI-X: id, next, message control (table size - 1), table offset|BIR, PBA offset|BIR.
        let m = MSIX_CAP_OFFSET;
        c.bytes[m] = PCI_CAP_ID_MSIX;
        c.bytes[m + 1] = PCIE_CAP_OFFSET as u8;
        c.put16(m + 2, (regs::MSIX_VECTORS - 1) as u16);
        c.put32(m + 4, regs::MSIX_TABLE_OFFSET | regs::BAR_CTRL);
        c.put32(m + 8, regs::MSIX_PBA_OFFSET | regs::BAR_CTRL);
        c.wmask[m + 3] = ((MSIX_CTRL_ENABLE | MSIX_CTRL_MASKALL) >> 8) as u8;
        // PCI Express capability v2, endpoint; link/slot registers zero (virtual link).
        let e = PCIE_CAP_OFFSET;
        c.bytes[e] = PCI_CAP_ID_EXP;
        c.bytes[e + 1] = 0;
        c.put16(
            e + 2,
            PCI_EXP_FLAGS_VERSION_2 | (PCI_EXP_TYPE_ENDPOINT << 4),
        );
        const _: () = assert!(PCIE_CAP_OFFSET + PCI_EXP_CAP_SIZE <= 0x100);
        c
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn add_bar64(&mut self, bar: usize, size: u64, prefetch: bool) {
        let off = PCI_BASE_ADDRESS_0 + bar * 4;
        let flags = PCI_BASE_ADDRESS_MEM_TYPE_64
            | if prefetch {
                PCI_BASE_ADDRESS_MEM_PREFETCH
            } else {
                0
            };
        self.put32(off, flags);
        let mask = !(size - 1);
        // The low bits of a memory BAR are its read-only type/prefetch flags.
        const BAR_FLAG_BITS: u32 = 0xf;
        let lo = (mask as u32) & !BAR_FLAG_BITS;
        self.wmask[off..off + 4].copy_from_slice(&lo.to_le_bytes());
        self.wmask[off + 4..off + 8].copy_from_slice(&((mask >> 32) as u32).to_le_bytes());
    }

    /// Read `data.len()` bytes at `offset`; out-of-range bytes read as 0xff (no device there).
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = offset
                .checked_add(i as u64)
                .and_then(|o| self.bytes.get(o as usize))
                .copied()
                .unwrap_or(NO_DEVICE_BYTE);
        }
    }

    /// Write; only writable bits change.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            let Some(o) = offset.checked_add(i as u64).map(|o| o as usize) else {
                return;
            };
            if o >= CONFIG_SPACE_SIZE {
                return;
            }
            let m = self.wmask[o];
            self.bytes[o] = (self.bytes[o] & !m) | (b & m);
        }
    }

    pub fn msix_control(&self) -> u16 {
        u16::from_le_bytes([
            self.bytes[MSIX_CAP_OFFSET + 2],
            self.bytes[MSIX_CAP_OFFSET + 3],
        ])
    }

    pub fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }
    pub fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes[off..off + 4].try_into().expect("4 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_bar_sizing() {
        let mut c = ConfigSpace::new();
        assert_eq!(c.u16_at(PCI_VENDOR_ID), regs::PCI_VENDOR_ID);
        assert_eq!(c.u16_at(PCI_DEVICE_ID), regs::PCI_DEVICE_ID);
        assert_eq!(c.u32_at(0x08) >> 8, regs::PCI_CLASS_CODE);
        // BAR sizing: write all ones, read back the size mask.
        let bar2 = PCI_BASE_ADDRESS_0 + regs::BAR_DB as usize * 4;
        c.write(bar2 as u64, &[0xff; 8]);
        let lo = c.u32_at(bar2) as u64;
        let hi = c.u32_at(bar2 + 4) as u64;
        let mask = (hi << 32) | (lo & !0xf);
        assert_eq!(!mask + 1, regs::BAR_DB_SIZE);
        assert_eq!(
            lo & 0xf,
            (PCI_BASE_ADDRESS_MEM_TYPE_64 | PCI_BASE_ADDRESS_MEM_PREFETCH) as u64
        );
        // Read-only identity cannot be overwritten.
        c.write(0, &[0; 4]);
        assert_eq!(c.u16_at(PCI_VENDOR_ID), regs::PCI_VENDOR_ID);
        assert_eq!(c.msix_control() & 0x7ff, (regs::MSIX_VECTORS - 1) as u16);
    }
}
