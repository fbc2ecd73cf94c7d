//! Device discovery: the match table libibverbs compares each uverbs device against (rox's PCI
//! id, and the `rox_` name prefix), the per-device object, and the provider's ops.

use crate::sys::context;
use crate::sys::ffi::{self, Zeroable};
use core::mem::offset_of;
use core::ptr;
use rox_uapi::regs::{PCI_DEVICE_ID, PCI_VENDOR_ID};
use rox_uapi::udata::UVERBS_ABI_VERSION;

/// Provider name: the `driver rox` line of rox.driver and the `librox-rdmav<PABI>.so` file.
const PROVIDER_NAME: &core::ffi::CStr = c"rox";
/// `VERBS_NAME_MATCH("rox_", NULL)`: rox.ko names its devices rox_0, rox_1, ...
const NAME_MATCH: &core::ffi::CStr = c"rdma_device:*Nrox_*";

/// Static data holding C pointers (string literals, other statics), never written.
#[repr(transparent)]
struct ConstC<T>(T);
// SAFETY: the pointers inside refer to immutable statics; nothing is ever written through them.
unsafe impl<T> Sync for ConstC<T> {}

const fn no_match_data() -> *mut core::ffi::c_void {
    ptr::null_mut()
}

static MATCH_TABLE: ConstC<[ffi::verbs_match_ent; 3]> = ConstC([
    // VERBS_PCI_MATCH(PCI_VENDOR_ID, PCI_DEVICE_ID, NULL)
    ffi::verbs_match_ent {
        driver_data: no_match_data(),
        u: ffi::verbs_match_ent__bindgen_ty_1 { driver_id: 0 },
        vendor: PCI_VENDOR_ID,
        device: PCI_DEVICE_ID,
        kind: ffi::VERBS_MATCH_PCI as u8,
    },
    // VERBS_NAME_MATCH("rox_", NULL)
    ffi::verbs_match_ent {
        driver_data: no_match_data(),
        u: ffi::verbs_match_ent__bindgen_ty_1 {
            modalias: NAME_MATCH.as_ptr(),
        },
        vendor: 0,
        device: 0,
        kind: ffi::VERBS_MATCH_MODALIAS as u8,
    },
    // {} ends the table.
    ffi::verbs_match_ent {
        driver_data: no_match_data(),
        u: ffi::verbs_match_ent__bindgen_ty_1 { driver_id: 0 },
        vendor: 0,
        device: 0,
        kind: ffi::VERBS_MATCH_SENTINEL as u8,
    },
]);

/// One rox uverbs device as libibverbs knows it.
#[repr(C)]
struct RoxDevice {
    vdev: ffi::verbs_device,
}
const _: () = assert!(offset_of!(RoxDevice, vdev) == 0);

unsafe extern "C" fn alloc_device(_sysfs_dev: *mut ffi::verbs_sysfs_dev) -> *mut ffi::verbs_device {
    // libibverbs fills in the verbs_device (ops, refcount, sysfs) after this returns.
    Box::into_raw(Box::new(RoxDevice {
        vdev: Zeroable::zeroed(),
    }))
    .cast::<ffi::verbs_device>()
}

unsafe extern "C" fn uninit_device(vdev: *mut ffi::verbs_device) {
    // SAFETY: libibverbs hands back, once, a device made by alloc_device.
    drop(unsafe { Box::from_raw(vdev.cast::<RoxDevice>()) });
}

/// `struct verbs_device_ops` of librox (what `PROVIDER_DRIVER(rox, ...)` registers).
static DEVICE_OPS: ConstC<ffi::verbs_device_ops> = ConstC(ffi::verbs_device_ops {
    name: PROVIDER_NAME.as_ptr(),
    match_min_abi_version: UVERBS_ABI_VERSION,
    match_max_abi_version: UVERBS_ABI_VERSION,
    match_table: &MATCH_TABLE.0 as *const ffi::verbs_match_ent,
    static_providers: ptr::null_mut(),
    match_device: None,
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// The `PROVIDER_DRIVER(rox, ...)` constructor, run when libibverbs dlopens librox: the
/// registration `verbs_register_driver_<PABI>(&ops)`.
extern "C" fn register_provider() {
    // SAFETY: DEVICE_OPS is a complete, immutable 'static verbs_device_ops.
    unsafe { ffi::pabi::verbs_register_driver(&DEVICE_OPS.0) };
}

#[used]
#[link_section = ".init_array"]
static REGISTER_PROVIDER: extern "C" fn() = register_provider;
