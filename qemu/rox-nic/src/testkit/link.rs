//! How the test driver reaches the device: direct calls or a vfio-user socket, and the
//! doorbell BAR mapped from the fd the server sends.

use super::*;

/// How the test driver reaches the device.
pub enum Link {
    /// Direct calls into the device model.
    InProcess(Box<RoxNic>),
    /// A vfio-user socket served by a thread running rox-nic's server loop.
    Socket {
        client: RefCell<vfio_user::Client>,
        server: Option<JoinHandle<()>>,
        path: PathBuf,
    },
}

/// The doorbell BAR as the driver sees it: a shared mapping of the BAR's fd (the device's own
/// mapping type, mapped a second time).
pub type DbMap = crate::device::doorbell::DoorbellBar;
