//! vfio-user glue: the regions and IRQs rox-nic declares, and the `ServerBackend` the crate's
//! (single-threaded, control-only) server loop calls.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::Path;

use rox_uapi::regs::{self, BAR_CTRL, BAR_DB};
use vfio_bindings::bindings::vfio::*;
use vfio_user::{
    DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion, SparseArea,
};

use crate::device::RoxNic;
use crate::pci::CONFIG_SPACE_SIZE;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("socket {0} is in use by a running server")]
    SocketInUse(String),
    #[error("vfio-user: {0}")]
    VfioUser(#[from] vfio_user::Error),
    #[error("removing stale socket {0}: {1}")]
    Stale(String, std::io::Error),
}

/// The region table: BAR0 trapped, BAR2 mmappable as one sparse area backed by the doorbell
/// memfd, config space; everything else absent.
pub fn regions(nic: &RoxNic) -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let mut info = vfio_region_info {
                argsz: size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            };
            let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            let mut sparse_areas = Vec::new();
            let mut mmap_fd = None;
            if index == BAR_CTRL {
                info.size = regs::BAR_CTRL_SIZE;
                info.flags = rw;
            } else if index == BAR_DB {
                info.size = regs::BAR_DB_SIZE;
                info.flags = rw | VFIO_REGION_INFO_FLAG_MMAP;
                info.offset = 0;
                sparse_areas.push(SparseArea {
                    area: vfio_region_sparse_mmap_area {
                        offset: 0,
                        size: regs::BAR_DB_SIZE,
                    },
                });
                mmap_fd = Some(nic.doorbell_fd());
            } else if index == VFIO_PCI_CONFIG_REGION_INDEX {
                info.size = CONFIG_SPACE_SIZE as u64;
                info.flags = rw;
            }
            ServerRegion {
                region_info: info,
                sparse_areas,
                mmap_fd,
            }
        })
        .collect()
}

/// The IRQ table: MSI-X only, one eventfd per vector.
pub fn irqs() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            count: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                regs::MSIX_VECTORS
            } else {
                0
            },
            flags: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE
            } else {
                0
            },
        })
        .collect()
}

/// Bind the vfio-user socket. A socket file nobody listens on is stale and removed; a live one
/// is an error.
pub fn bind(path: &Path, nic: &RoxNic) -> Result<Server, ServerError> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(ServerError::SocketInUse(path.display().to_string()));
        }
        log::warn!("removing stale socket {}", path.display());
        std::fs::remove_file(path)
            .map_err(|e| ServerError::Stale(path.display().to_string(), e))?;
    }
    Ok(Server::new(path, true, irqs(), regions(nic))?)
}

impl ServerBackend for RoxNic {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_read(offset, data),
            BAR_CTRL => self.bar0_read(offset, data),
            BAR_DB => {
                let v = self.shared().doorbells.read_word(offset);
                let n = data.len().min(4);
                data[..n].copy_from_slice(&v.to_le_bytes()[..n]);
            }
            _ => data.fill(crate::pci::NO_DEVICE_BYTE),
        }
        Ok(())
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_write(offset, data),
            BAR_CTRL => self.bar0_write(offset, data),
            BAR_DB if data.len() == 4 => {
                let v = u32::from_le_bytes(data.try_into().expect("4 bytes"));
                self.shared().doorbells.write_word(offset, v);
                // A trapped doorbell write is rare (no mmap); make sure it is noticed.
                self.shared().wake.signal();
            }
            _ => {}
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        RoxNic::dma_map_with(
            self,
            fd,
            offset,
            address,
            size,
            flags.contains(DmaMapFlags::WRITE),
        )
    }

    fn dma_unmap(
        &mut self,
        _flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        RoxNic::dma_unmap(self, address, size);
        Ok(())
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        self.reset_device();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return if count == 0 {
                Ok(())
            } else {
                Err(std::io::Error::from_raw_os_error(libc::EINVAL))
            };
        }
        if flags & VFIO_IRQ_SET_ACTION_TRIGGER == 0 {
            // Mask/unmask of MSI-X vectors is done by QEMU in the emulated table.
            return Ok(());
        }
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            self.set_msix(start, count, fds);
        } else if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
            self.set_msix(0, regs::MSIX_VECTORS, Vec::new());
        }
        Ok(())
    }
}
