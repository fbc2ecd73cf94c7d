//! The posted-wake companion: a stock QEMU `ivshmem-doorbell` PCI device that rox-nic serves
//! next to each rox NIC, so waking an idle device costs the vCPU no round trip.
//!
//! Why: QEMU's vfio-user client turns posted writes off for a whole device once any region is
//! mmappable (rox's doorbell BAR is), so a write of [`super::regs::WAKE_REG`] waits for
//! rox-nic's reply. An `ivshmem-doorbell` device's doorbell register is different: QEMU
//! signals the target peer's eventfd from the vCPU thread and returns at once. rox-nic acts as
//! the ivshmem server (`-chardev socket,path=…` + `-device ivshmem-doorbell,chardev=…`): it
//! hands QEMU a small shared memory holding a [`WakeCompanion`] record and one eventfd of its
//! own as peer [`WakeCompanion::peer`]'s vector [`WakeCompanion::vector`], and sleeps on it.
//!
//! Pairing: the companion's shared memory (`IVSHMEM_BAR_SHM`) starts with a [`WakeCompanion`]
//! whose `token` equals the rox device's `REG_WAKE_TOKEN_LO/HI`. A wake is the 32-bit write of
//! [`doorbell_value`] at [`IVSHMEM_DOORBELL`] in the companion's register BAR
//! ([`IVSHMEM_BAR_REGS`], 256 bytes). The driver maps that page into user processes only if no
//! other device's registers share it.

/// PCI identity of QEMU's ivshmem devices (Red Hat / Qumranet vendor, "Inter-VM shared memory").
pub const IVSHMEM_VENDOR_ID: u16 = 0x1af4;
pub const IVSHMEM_DEVICE_ID: u16 = 0x1110;
/// BAR of the ivshmem registers (`IntrMask`, `IntrStatus`, `IVPosition`, `Doorbell`).
pub const IVSHMEM_BAR_REGS: u32 = 0;
/// Size of the ivshmem register BAR.
pub const IVSHMEM_BAR_REGS_SIZE: u64 = 256;
/// Offset of the doorbell register in [`IVSHMEM_BAR_REGS`]: write `peer << 16 | vector`.
pub const IVSHMEM_DOORBELL: u64 = 12;
/// Offset of the `IVPosition` register (read: this client's peer id) in [`IVSHMEM_BAR_REGS`].
pub const IVSHMEM_IV_POSITION: u64 = 8;
/// BAR of the shared memory rox-nic hands QEMU.
pub const IVSHMEM_BAR_SHM: u32 = 2;

/// [`WakeCompanion::magic`]: "roxwake1", little-endian.
pub const COMPANION_MAGIC: u64 = u64::from_le_bytes(*b"roxwake1");

c_struct! {
    /// The first bytes of the companion's shared memory, written by rox-nic before QEMU maps it
    /// and never changed.
    pub struct WakeCompanion as rox_wake_companion {
        /// [`COMPANION_MAGIC`].
        pub magic: u64,
        /// Equal to the rox device's `REG_WAKE_TOKEN_LO | REG_WAKE_TOKEN_HI << 32`.
        pub token: u64,
        /// The ivshmem peer id whose eventfd rox-nic sleeps on.
        pub peer: u32,
        /// That peer's vector.
        pub vector: u32,
    }
}
const _: () = assert!(core::mem::size_of::<WakeCompanion>() == 24);

/// The doorbell word that signals `vector` of `peer` (ivshmem: destination in bits 16..32,
/// vector in bits 0..16).
pub const fn doorbell_value(peer: u32, vector: u32) -> u32 {
    (peer << 16) | (vector & 0xffff)
}

impl WakeCompanion {
    /// The doorbell word that wakes the device this record names.
    pub const fn doorbell(&self) -> u32 {
        doorbell_value(self.peer, self.vector)
    }
}
