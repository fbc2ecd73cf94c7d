// SPDX-License-Identifier: GPL-2.0
//! Registering the ib_device of a bound PCI device with ib_core ([`IbRegistration`]): its
//! allocation, the ops table, the counters, and port 1's binding to the network device with
//! the device's MAC ([`PortBinder`]), kept up to date by a netdev notifier.

use super::{bindings as b, ibdev::ib_of, netdev::NetDevice, obj::Container, ops, IbDev, Verbs};
use core::{
    ffi::c_void,
    mem::size_of,
    ptr::{self, NonNull},
};
use kernel::{
    device::Bound,
    error::to_result,
    ffi::{c_int, c_ulong},
    pci,
    prelude::*,
    sync::Arc,
};

/// Static description of the device at registration.
pub(crate) struct DeviceParams<'a> {
    /// `rox_%d`.
    pub(crate) name: &'a CStr,
    pub(crate) node_guid: u64,
    pub(crate) num_comp_vectors: u32,
    /// MAC of the network device port 1 is bound to (RoCEv2 GIDs come from its addresses).
    pub(crate) mac: [u8; 6],
}

/// Keeps port 1 bound to the network device with the device's MAC: binds it when it registers
/// (if the port has none), unbinds it when it unregisters (ib_core requires both of drivers).
#[repr(C)]
struct PortBinder {
    nb: b::notifier_block,
    ibdev: *mut b::ib_device,
    mac: [u8; 6],
}

/// The RoCE port number of rox (one port).
const PORT: u32 = 1;

/// The netdev notifier of a registration.
///
/// # Safety
///
/// Called only by the netdev notifier chain with the `notifier_block` embedded in a live
/// registration's state (registered until that state is dropped) and `ptr` a
/// `netdev_notifier_info` valid for the call.
unsafe extern "C" fn netdev_event(
    nb: *mut b::notifier_block,
    event: c_ulong,
    ptr: *mut c_void,
) -> c_int {
    // SAFETY: `nb` is the first field of a registered `PortBinder`, alive until unregistered
    // (which waits for running callbacks); netdev notifiers run under RTNL with a valid `ptr`.
    unsafe {
        let binder = &*nb.cast::<PortBinder>();
        let ndev = b::rox_shim_netdev_notifier_info_to_dev(ptr);
        let bound = b::ib_device_get_netdev(binder.ibdev, PORT);
        match event as u32 {
            b::netdev_cmd_NETDEV_REGISTER
                if bound.is_null() && b::rox_shim_netdev_has_mac(ndev, binder.mac.as_ptr()) =>
            {
                b::ib_device_set_netdev(binder.ibdev, ndev, PORT);
            }
            b::netdev_cmd_NETDEV_UNREGISTER if bound == ndev => {
                b::ib_device_set_netdev(binder.ibdev, ptr::null_mut(), PORT);
            }
            _ => {}
        }
        if !bound.is_null() {
            b::rox_shim_dev_put(bound);
        }
    }
    b::NOTIFY_DONE as c_int
}

/// A registered ib_device, unregistered and freed on drop.
///
/// # Invariants
///
/// `container` was allocated by `_ib_alloc_device`, is registered with ib_core, and its `dev`
/// points to the `V::Dev` held by `dev`.
pub(crate) struct IbRegistration<'bound, V: Verbs> {
    container: NonNull<Container>,
    /// Referenced by ib_core's counter structures until the device is released.
    _counter_descs: KVec<b::rdma_stat_desc>,
    /// Registered with the netdevice notifier chain.
    binder: NonNull<PortBinder>,
    dev: Arc<V::Dev<'bound>>,
}

// SAFETY: the registration only hands out shared access to `V::Dev` (which is `Sync`) and the
// ib_device, which ib_core lets any thread unregister.
unsafe impl<V: Verbs> Send for IbRegistration<'_, V> {}
// SAFETY: see `Send`.
unsafe impl<V: Verbs> Sync for IbRegistration<'_, V> {}

/// The `struct device` of a kernel-crate device.
fn raw_device(dev: &kernel::device::Device<Bound>) -> *mut b::device {
    // `kernel::device::Device` is `#[repr(transparent)]` over `Opaque<struct device>`, itself
    // transparent: the reference is the address of the C `struct device` (which bindgen renders
    // here from the same header as the kernel crate's bindings).
    core::ptr::from_ref(dev).cast::<b::device>().cast_mut()
}

/// The `ib_device` at the start of the allocation.
fn ibdev_of(container: NonNull<Container>) -> *mut b::ib_device {
    // SAFETY: `container` is a live allocation; taking a field address does not read it.
    unsafe { ptr::addr_of_mut!((*container.as_ptr()).ib) }
}

impl<'bound, V: Verbs> IbRegistration<'bound, V> {
    /// Allocates the ib_device, binds port 1 to `params.netdev`, and registers it with ib_core
    /// (which calls the verbs from then on).
    pub(crate) fn register(
        pdev: &'bound pci::Device<Bound>,
        dev: Arc<V::Dev<'bound>>,
        params: &DeviceParams<'_>,
    ) -> Result<Self> {
        // SAFETY: `init_net` is the initial network namespace, which lives forever.
        let raw =
            unsafe { b::_ib_alloc_device(size_of::<Container>(), ptr::addr_of_mut!(b::init_net)) };
        let container = NonNull::new(raw.cast::<Container>()).ok_or(ENOMEM)?;
        let ibdev = ibdev_of(container);
        let free = move |err: Error| -> Error {
            // SAFETY: allocated above, never registered.
            unsafe { b::ib_dealloc_device(ibdev) };
            err
        };
        let mut counter_descs =
            KVec::with_capacity(V::COUNTER_NAMES.len(), GFP_KERNEL).map_err(|e| free(e.into()))?;
        for name in V::COUNTER_NAMES {
            let desc = b::rdma_stat_desc {
                name: name.as_char_ptr(),
                flags: 0,
                priv_: ptr::null(),
            };
            counter_descs
                .push(desc, GFP_KERNEL)
                .map_err(|e| free(e.into()))?;
        }
        let pci_dev: &kernel::device::Device<Bound> = pdev.as_ref();

        // SAFETY: `ibdev` was just allocated and is not yet visible to anyone else; the
        // device pointer cast is between bindgen renderings of the same `struct device`.
        unsafe {
            (*container.as_ptr()).dev = Arc::as_ptr(&dev).cast::<c_void>();
            (*container.as_ptr()).counter_descs = counter_descs.as_ptr();
            (*container.as_ptr()).num_counters = counter_descs.len();
            (*ibdev).node_type = b::RDMA_NODE_IB_CA as u8;
            (*ibdev).phys_port_cnt = 1;
            (*ibdev).num_comp_vectors = params.num_comp_vectors as c_int;
            (*ibdev).node_guid = params.node_guid.to_be();
            (*ibdev).__bindgen_anon_1.dev.parent = raw_device(pci_dev);
            b::ib_set_device_ops(ibdev, &ops::table::<V>());
        }
        if let Some(netdev) = NetDevice::by_mac(&params.mac) {
            // SAFETY: `ibdev` is allocated; `netdev` is held; ib_core takes its own reference
            // (ours goes at the end of this block).
            to_result(unsafe { b::ib_device_set_netdev(ibdev, netdev.as_raw(), PORT) })
                .map_err(free)?;
        }
        let mut binder = KBox::<PortBinder>::new_uninit(GFP_KERNEL).map_err(|e| free(e.into()))?;
        let raw_binder = binder.as_mut_ptr();
        // SAFETY: fresh allocation; an all-zero notifier_block is its initial state.
        let binder = unsafe {
            ptr::addr_of_mut!((*raw_binder).nb).write_bytes(0, 1);
            (*raw_binder).nb.notifier_call = Some(netdev_event);
            (*raw_binder).ibdev = ibdev;
            (*raw_binder).mac = params.mac;
            NonNull::new_unchecked(KBox::into_raw(binder.assume_init()))
        };
        let free_binder = move |err: Error| -> Error {
            // SAFETY: from `KBox::into_raw` above, not registered.
            drop(unsafe { KBox::from_raw(binder.as_ptr()) });
            free(err)
        };
        // Events may arrive as soon as the device is registered.
        V::registry(&dev).set_ibdev(NonNull::new(ibdev));
        // SAFETY: `ibdev` is fully set up; `name` is a valid C string; the DMA device is the
        // PCI device, bound for 'bound, which outlives the registration.
        let ret =
            unsafe { b::ib_register_device(ibdev, params.name.as_char_ptr(), raw_device(pci_dev)) };
        if let Err(err) = to_result(ret) {
            V::registry(&dev).set_ibdev(None);
            return Err(free_binder(err));
        }
        // SAFETY: `binder` is a live, pinned allocation with a valid callback; it stays
        // registered until `drop` (or the unwinding below).
        let ret = unsafe { b::register_netdevice_notifier(&mut (*binder.as_ptr()).nb) };
        if let Err(err) = to_result(ret) {
            V::registry(&dev).set_ibdev(None);
            // SAFETY: registered above.
            unsafe { b::ib_unregister_device(ibdev) };
            return Err(free_binder(err));
        }
        // INVARIANT: allocated, registered, `dev` points into `dev`.
        Ok(Self {
            container,
            _counter_descs: counter_descs,
            binder,
            dev,
        })
    }

    pub(crate) fn ib(&self) -> IbDev<'_> {
        ib_of(ibdev_of(self.container))
    }

    /// The device's name (`rox_0`, ...).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: ib_core keeps the name in the device's `struct device` while registered.
        unsafe {
            let ibdev = ibdev_of(self.container);
            let name = b::rox_shim_dev_name(ptr::addr_of!((*ibdev).__bindgen_anon_1.dev));
            CStr::from_char_ptr(name)
        }
    }
}

impl<V: Verbs> Drop for IbRegistration<'_, V> {
    fn drop(&mut self) {
        let ibdev = ibdev_of(self.container);
        // SAFETY: registered in `register`; unregistering waits for running callbacks, then
        // nothing refers to the binder.
        unsafe {
            b::unregister_netdevice_notifier(&mut (*self.binder.as_ptr()).nb);
            drop(KBox::from_raw(self.binder.as_ptr()));
        }
        // SAFETY: registered (type invariant). Unregistering disassociates user contexts,
        // destroys every remaining object through our callbacks and waits for running ones.
        unsafe { b::ib_unregister_device(ibdev) };
        V::registry(&self.dev).set_ibdev(None);
        // SAFETY: unregistered; nothing refers to it any more: every object was destroyed
        // through our callbacks, and the one that holds a device reference beyond its C
        // object, an on-demand umem (`umem.ibdev`), is released inside our dereg_mr (the
        // driver's event handlers keep no region past it, see `UmemOdp`).
        unsafe { b::ib_dealloc_device(ibdev) };
    }
}
