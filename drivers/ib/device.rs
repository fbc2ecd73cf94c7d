// SPDX-License-Identifier: GPL-2.0
//! The ib_device of a bound PCI device: allocation, the ops table (C trampolines into the safe
//! [`Verbs`] trait), registration with ib_core, the driver objects ib_core allocates for rox
//! (ucontext, PD, CQ, QP, SRQ, AH) or rox allocates itself (MR), and the routing of device
//! events to them ([`Registry`]).

use super::{
    attr::{
        AhAttr, DeviceAttr, MrAdvice, PortAttr, PortImmutable, QpAttr, QpCap, QpInitAttr, SrqAttr,
        SrqAttrMask, WcOut,
    },
    bindings as b,
    mmap::{self, UcontextRef},
    netdev::NetDevice,
    registry::Registry,
    wr::{RecvWr, SendWr},
    Udata,
};
use crate::hw::uapi::ids::{Key, Qpn};
use core::{
    ffi::c_void,
    marker::PhantomData,
    mem::{size_of, MaybeUninit},
    ptr::{self, NonNull},
};
use kernel::{
    device::Bound,
    error::{from_result, to_result},
    ffi::{c_int, c_uint},
    pci,
    prelude::*,
    sync::Arc,
};

/// A handle on the registered ib_device, given to every [`Verbs`] call.
#[derive(Clone, Copy)]
pub(crate) struct IbDev<'a> {
    raw: NonNull<b::ib_device>,
    _life: PhantomData<&'a b::ib_device>,
}

impl IbDev<'_> {
    pub(crate) fn as_raw(&self) -> *mut b::ib_device {
        self.raw.as_ptr()
    }

    /// The network device port `port` is bound to, if any (held while the value lives).
    pub(crate) fn netdev(&self, port: u32) -> Option<NetDevice> {
        // SAFETY: a registered device; `ib_device_get_netdev` returns a held netdev or null,
        // whose reference `from_held` takes over.
        unsafe { NetDevice::from_held(b::ib_device_get_netdev(self.raw.as_ptr(), port)) }
    }
}

/// Initial attributes of a CQ.
pub(crate) struct CqInit {
    /// Requested number of CQEs.
    pub(crate) cqe: u32,
    pub(crate) comp_vector: u32,
}

/// Initial attributes of a QP, with the objects it attaches to.
pub(crate) struct QpInit<'a, V: Verbs> {
    /// `enum ib_qp_type`, numbered as uapi's `verbs::QPT_*` where rox knows the type.
    pub(crate) qp_type: u32,
    /// In: requested capacities; out: actual ones.
    pub(crate) cap: &'a mut QpCap,
    pub(crate) sq_sig_all: bool,
    /// The port of GSI QPs (unused by RC/UC/UD).
    #[allow(dead_code)]
    pub(crate) port: u32,
    pub(crate) pd: &'a V::Pd,
    pub(crate) send_cq: &'a V::Cq,
    pub(crate) recv_cq: &'a V::Cq,
    pub(crate) srq: Option<&'a V::Srq>,
}

/// What a created object tells ib_core about itself.
pub(crate) struct Created<T, Id = u32> {
    pub(crate) data: T,
    /// The device's id of the object (CQ id, SRQ id; a QP's [`Qpn`]): events name objects by
    /// it.
    pub(crate) id: Id,
    /// CQ: the actual number of CQEs. QP: unused.
    pub(crate) size: u32,
}

/// The user memory of `reg_user_mr`: `length` bytes at the process's virtual address `start`,
/// which the device and remote peers address as `iova`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserRange {
    pub(crate) start: u64,
    pub(crate) length: u64,
    pub(crate) iova: u64,
}

/// A memory region: its data plus the keys ib_core reports.
pub(crate) struct RegisteredMr<T> {
    pub(crate) data: T,
    pub(crate) lkey: Key,
    pub(crate) rkey: Key,
}

/// The verbs of a driver, in safe Rust. ib_core calls them through the trampolines of this
/// file; objects are the driver's own types, stored next to ib_core's structures.
pub(crate) trait Verbs: Sized + 'static {
    /// The driver's per-device state (lives at least as long as the registration).
    type Dev<'a>: Sync + 'a;
    type Ucontext: Send + Sync;
    type Pd: Send + Sync;
    type Cq: Send + Sync + DeviceId;
    type Qp: Send + Sync;
    type Srq: Send + Sync + DeviceId;
    type Ah: Send + Sync;
    type Mr: Send + Sync;
    type Mw: Send + Sync;
    /// The driver's data of an on-demand paging region (see [`super::umem_odp::UmemOdp`]).
    type Odp: Send + Sync;

    /// Pages `[first, first + count)` of an on-demand paging region lose their CPU mapping:
    /// the device must not use them once this returns. Called by the mmu notifier with the
    /// umem's mutex held; may sleep.
    fn odp_invalidate(dev: &Self::Dev<'_>, odp: &Self::Odp, first: usize, count: usize);

    /// Where the wrapper keeps the objects events are routed to.
    fn registry<'a>(dev: &'a Self::Dev<'_>) -> &'a Registry;

    /// Names of the port counters (`rdma statistic`), in the order `read_counters` fills them.
    const COUNTER_NAMES: &'static [&'static CStr];
    /// Reads the counters into `values` (`COUNTER_NAMES.len()` entries).
    fn read_counters(dev: &Self::Dev<'_>, values: &mut [u64]) -> Result;

    fn query_device(dev: &Self::Dev<'_>, udata: &mut Udata<'_>) -> Result<DeviceAttr>;
    fn query_port(dev: &Self::Dev<'_>, ib: IbDev<'_>, port: u32) -> Result<PortAttr>;
    fn get_port_immutable(dev: &Self::Dev<'_>, port: u32) -> Result<PortImmutable>;
    fn set_gid(dev: &Self::Dev<'_>, index: u32, gid: Option<&[u8; 16]>) -> Result;

    fn alloc_ucontext(
        dev: &Self::Dev<'_>,
        uctx: UcontextRef<'_>,
        udata: &mut Udata<'_>,
    ) -> Result<Self::Ucontext>;
    fn dealloc_ucontext(dev: &Self::Dev<'_>, uctx: &Self::Ucontext);

    fn alloc_pd(dev: &Self::Dev<'_>, udata: &mut Udata<'_>) -> Result<Self::Pd>;
    fn dealloc_pd(dev: &Self::Dev<'_>, pd: &Self::Pd);

    /// A memory window of `mw_type` (`enum ib_mw_type`) in `pd`: its rkey and the driver's data.
    fn alloc_mw(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        mw_type: u32,
        udata: &mut Udata<'_>,
    ) -> Result<(Key, Self::Mw)>;
    fn dealloc_mw(dev: &Self::Dev<'_>, mw: &Self::Mw);

    fn reg_user_mr(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        pd: &Self::Pd,
        range: UserRange,
        access: u32,
        udata: &mut Udata<'_>,
    ) -> Result<RegisteredMr<Self::Mr>>;
    fn get_dma_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        access: u32,
    ) -> Result<RegisteredMr<Self::Mr>>;
    fn dereg_mr(dev: &Self::Dev<'_>, mr: &Self::Mr);
    /// A fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`) of up to `max_num_sg` pages:
    /// no access until an `IB_WR_REG_MR` binds pages to it.
    fn alloc_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        max_num_sg: u32,
    ) -> Result<RegisteredMr<Self::Mr>>;
    /// `ib_map_mr_sg` starts: the MR's page list is emptied.
    fn mr_clear_pages(mr: &Self::Mr) -> Result;
    /// `ib_map_mr_sg`: appends the DMA address of one page to the MR's page list (ENOMEM when
    /// it is full). May run in any context.
    fn mr_set_page(mr: &Self::Mr, addr: u64) -> Result;
    /// ibv_advise_mr: make the ranges `(addr, length, lkey)` of on-demand paging regions of
    /// `pd` present; `flush`: before returning.
    fn advise_mr(
        dev: &Self::Dev<'_>,
        pd: &Self::Pd,
        advice: MrAdvice,
        flush: bool,
        sges: &[(u64, u32, Key)],
    ) -> Result;

    fn create_cq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        init: &CqInit,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Cq>>;
    fn destroy_cq(dev: &Self::Dev<'_>, cq: &Self::Cq);
    /// Resizes a CQ to hold at least `cqe` entries; returns the new number of entries.
    fn resize_cq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        cq: &Self::Cq,
        cqe: u32,
        udata: &mut Udata<'_>,
    ) -> Result<u32>;

    fn create_qp(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        init: QpInit<'_, Self>,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Qp, Qpn>>;
    fn modify_qp(
        dev: &Self::Dev<'_>,
        qp: &Self::Qp,
        attr: &QpAttr,
        mask: u32,
        udata: &mut Udata<'_>,
    ) -> Result;
    fn query_qp(dev: &Self::Dev<'_>, qp: &Self::Qp) -> Result<(QpAttr, QpInitAttr)>;
    fn destroy_qp(dev: &Self::Dev<'_>, qp: &Self::Qp);

    fn create_srq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        uctx: Option<&Self::Ucontext>,
        pd: &Self::Pd,
        attr: &mut SrqAttr,
        udata: &mut Udata<'_>,
    ) -> Result<Created<Self::Srq>>;
    fn modify_srq(
        dev: &Self::Dev<'_>,
        ib: IbDev<'_>,
        srq: &Self::Srq,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        udata: &mut Udata<'_>,
    ) -> Result;
    fn query_srq(dev: &Self::Dev<'_>, srq: &Self::Srq) -> Result<SrqAttr>;
    fn destroy_srq(dev: &Self::Dev<'_>, srq: &Self::Srq);

    /// Kernel QPs (ib_mad's GSI QP1): queue one send work request (rung by `ring_sq`).
    fn post_send(dev: &Self::Dev<'_>, qp: &Self::Qp, wr: &SendWr<'_, Self>) -> Result;
    /// Tells the device about the send WRs queued since the last call.
    fn ring_sq(dev: &Self::Dev<'_>, qp: &Self::Qp);
    /// Kernel QPs: queue one receive work request (rung by `ring_rq`).
    fn post_recv(dev: &Self::Dev<'_>, qp: &Self::Qp, wr: &RecvWr<'_>) -> Result;
    fn ring_rq(dev: &Self::Dev<'_>, qp: &Self::Qp);
    /// Kernel SRQs: queue one receive work request (rung by `ring_srq`).
    fn post_srq_recv(dev: &Self::Dev<'_>, srq: &Self::Srq, wr: &RecvWr<'_>) -> Result;
    fn ring_srq(dev: &Self::Dev<'_>, srq: &Self::Srq);
    /// Kernel CQs: moves up to `wc.len()` completions into `wc`, returns how many.
    fn poll_cq(dev: &Self::Dev<'_>, cq: &Self::Cq, wc: &mut WcOut<'_>) -> Result<usize>;
    /// Kernel CQs: arms the CQ; returns whether completions may have been missed.
    fn req_notify_cq(dev: &Self::Dev<'_>, cq: &Self::Cq, solicited_only: bool) -> Result<bool>;

    fn create_ah(dev: &Self::Dev<'_>, attr: &AhAttr, udata: &mut Udata<'_>) -> Result<Self::Ah>;
    fn query_ah(dev: &Self::Dev<'_>, ah: &Self::Ah) -> Result<AhAttr>;
    fn destroy_ah(dev: &Self::Dev<'_>, ah: &Self::Ah);

    /// UD QP `qpn` joins multicast group `gid` (ib_core checked both).
    fn attach_mcast(dev: &Self::Dev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result;
    /// QP `qpn` leaves multicast group `gid`.
    fn detach_mcast(dev: &Self::Dev<'_>, qpn: Qpn, gid: &[u8; 16]) -> Result;
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

/// A driver object as ib_core allocates it: ib_core's structure first (ib_core requires offset
/// 0), then the driver's data.
///
/// # Invariants
///
/// `data` is initialised from the successful return of the create callback until the destroy
/// callback drops it; ib_core only passes initialised objects to the other callbacks.
#[repr(C)]
pub(super) struct Obj<I, D> {
    ib: I,
    data: MaybeUninit<D>,
}

impl<I, D> Obj<I, D> {
    const SIZE: usize = {
        // ib_core allocates with kzalloc: natural alignment up to 8 bytes is guaranteed.
        assert!(core::mem::align_of::<Self>() <= 8);
        size_of::<Self>()
    };

    /// # Safety
    ///
    /// `ib` points to the `I` at the start of a live `Obj<I, D>` whose data is initialised.
    pub(super) unsafe fn data_of<'a>(ib: *const I) -> &'a D {
        // SAFETY: per the function's requirements; `Obj` is `repr(C)` with `ib` first.
        unsafe { (*ib.cast::<Self>()).data.assume_init_ref() }
    }

    /// # Safety
    ///
    /// `ib` points to the `I` at the start of an `Obj<I, D>` whose data is not initialised.
    unsafe fn init(ib: *mut I, data: D) {
        // SAFETY: per the function's requirements.
        unsafe { (*ib.cast::<Self>()).data.write(data) };
    }

    /// Drops the data.
    ///
    /// # Safety
    ///
    /// `ib` points to the `I` at the start of an `Obj<I, D>` whose data is initialised; it is
    /// not used again.
    unsafe fn drop_data(ib: *mut I) {
        // SAFETY: per the function's requirements.
        unsafe { (*ib.cast::<Self>()).data.assume_init_drop() };
    }
}

// ---------------------------------------------------------------------------------------------
// The device
// ---------------------------------------------------------------------------------------------

/// What ib_core allocates for the device: its `ib_device`, then a pointer to the driver's state.
#[repr(C)]
struct Container {
    ib: b::ib_device,
    dev: *const c_void,
    /// The counter descriptors (owned by the registration).
    counter_descs: *const b::rdma_stat_desc,
    num_counters: usize,
}

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
    event: kernel::ffi::c_ulong,
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
            b::ib_set_device_ops(ibdev, &ops::<V>());
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

// ---------------------------------------------------------------------------------------------
// Trampolines
// ---------------------------------------------------------------------------------------------

/// The driver state of the ib_device `ibdev`.
///
/// # Safety
///
/// `ibdev` is an ib_device allocated by [`IbRegistration::register`] for `V` and not yet
/// deallocated (true for every callback ib_core makes).
pub(super) unsafe fn dev_of<'a, V: Verbs>(ibdev: *mut b::ib_device) -> &'a V::Dev<'a> {
    // SAFETY: per the function's requirements, `dev` points to the live `V::Dev` held by the
    // registration, which outlives every callback.
    unsafe { &*(*ibdev.cast::<Container>()).dev.cast::<V::Dev<'a>>() }
}

pub(super) fn ib_of<'a>(ibdev: *mut b::ib_device) -> IbDev<'a> {
    IbDev {
        raw: NonNull::new(ibdev).unwrap_or(NonNull::dangling()),
        _life: PhantomData,
    }
}

/// The QP number of a QP this driver created (`create_qp` set `qp_num` from the device's
/// [`Qpn`]).
///
/// # Safety
///
/// `qp` is a live QP of this driver.
unsafe fn qpn_of(qp: *const b::ib_qp) -> Qpn {
    // SAFETY: per the function's requirements.
    let word = unsafe { (*qp).qp_num };
    Qpn::from_raw(word)
}

/// The driver's ucontext of a user call, if any.
///
/// # Safety
///
/// `udata` is null or the udata ib_core passed to a callback of a `V` device.
unsafe fn ucontext_of<'a, V: Verbs>(udata: *mut b::ib_udata) -> Option<&'a V::Ucontext> {
    // SAFETY: a non-null udata is embedded in the call's attribute bundle.
    let uctx = unsafe { b::rox_shim_udata_ucontext(udata) };
    if uctx.is_null() {
        None
    } else {
        // SAFETY: ib_core allocated the ucontext with our size and it is alive (initialised)
        // for the duration of any call made through it.
        Some(unsafe { Obj::<b::ib_ucontext, V::Ucontext>::data_of(uctx) })
    }
}

fn errno(result: Result) -> c_int {
    from_result(|| result.map(|()| 0))
}

/// ib_core's `query_device` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `attr` is valid for reading and writing for the
/// duration of the call; `udata` is null (kernel caller) or the user call's udata, valid for
/// the call.
unsafe extern "C" fn query_device<V: Verbs>(
    ibdev: *mut b::ib_device,
    attr: *mut b::ib_device_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid attribute buffer.
    let (dev, attr) = unsafe { (dev_of::<V>(ibdev), &mut *attr) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::query_device(dev, &mut udata).map(|a| a.write_to(attr)))
}

/// ib_core's `query_port` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `attr` is valid for reading and writing for the
/// duration of the call.
unsafe extern "C" fn query_port<V: Verbs>(
    ibdev: *mut b::ib_device,
    port: u32,
    attr: *mut b::ib_port_attr,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid, zeroed attribute buffer.
    let (dev, attr) = unsafe { (dev_of::<V>(ibdev), &mut *attr) };
    errno(V::query_port(dev, ib_of(ibdev), port).map(|a| a.write_to(attr)))
}

/// ib_core's `get_port_immutable` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `imm` is valid for reading and writing for the
/// duration of the call.
unsafe extern "C" fn get_port_immutable<V: Verbs>(
    ibdev: *mut b::ib_device,
    port: u32,
    imm: *mut b::ib_port_immutable,
) -> c_int {
    // SAFETY: ib_core passes its device and a valid buffer.
    let (dev, imm) = unsafe { (dev_of::<V>(ibdev), &mut *imm) };
    errno(V::get_port_immutable(dev, port).map(|i| i.write_to(imm)))
}

/// ib_core's `get_link_layer` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: nothing beyond being called by
/// ib_core (the arguments are not dereferenced).
unsafe extern "C" fn get_link_layer(_ibdev: *mut b::ib_device, _port: u32) -> b::rdma_link_layer {
    b::rdma_link_layer_IB_LINK_LAYER_ETHERNET
}

/// ib_core's `query_pkey` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pkey` is valid for reading and
/// writing for the duration of the call.
unsafe extern "C" fn query_pkey(
    _ibdev: *mut b::ib_device,
    _port: u32,
    index: u16,
    pkey: *mut u16,
) -> c_int {
    /// The default (full membership) P_Key, the only entry of a RoCE port's table.
    const DEFAULT_PKEY: u16 = 0xffff;
    if index != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: ib_core passes a valid output pointer.
    unsafe { *pkey = DEFAULT_PKEY };
    0
}

/// ib_core's `add_gid` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `attr` is valid for reading for
/// the duration of the call.
unsafe extern "C" fn add_gid<V: Verbs>(
    attr: *const b::ib_gid_attr,
    _ctx: *mut *mut c_void,
) -> c_int {
    // SAFETY: ib_core passes a valid GID attribute of one of our devices.
    let (dev, attr) = unsafe { (dev_of::<V>((*attr).device), &*attr) };
    // SAFETY: every bit pattern of the GID union is a valid byte array.
    let gid = unsafe { &attr.gid.raw };
    errno(V::set_gid(dev, attr.index.into(), Some(gid)))
}

/// ib_core's `del_gid` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `attr` is valid for reading for
/// the duration of the call.
unsafe extern "C" fn del_gid<V: Verbs>(
    attr: *const b::ib_gid_attr,
    _ctx: *mut *mut c_void,
) -> c_int {
    // SAFETY: ib_core passes a valid GID attribute of one of our devices.
    let (dev, attr) = unsafe { (dev_of::<V>((*attr).device), &*attr) };
    errno(V::set_gid(dev, attr.index.into(), None))
}

/// ib_core's `alloc_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `uctx` is a ucontext ib_core
/// allocated with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata`
/// is null (kernel caller) or the user call's udata, valid for the call.
unsafe extern "C" fn alloc_ucontext<V: Verbs>(
    uctx: *mut b::ib_ucontext,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a ucontext it allocated with our size for one of our devices.
    let dev = unsafe { dev_of::<V>((*uctx).device) };
    // SAFETY: `udata` is valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    // SAFETY: `uctx` is alive until dealloc_ucontext.
    let uref = unsafe { UcontextRef::from_raw(uctx) };
    errno(V::alloc_ucontext(dev, uref, &mut udata).map(|data| {
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_ucontext, V::Ucontext>::init(uctx, data) }
    }))
}

/// ib_core's `dealloc_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `uctx` is a live ucontext this
/// driver created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn dealloc_ucontext<V: Verbs>(uctx: *mut b::ib_ucontext) {
    // SAFETY: a ucontext created by `alloc_ucontext`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*uctx).device);
        V::dealloc_ucontext(dev, Obj::<b::ib_ucontext, V::Ucontext>::data_of(uctx));
        Obj::<b::ib_ucontext, V::Ucontext>::drop_data(uctx);
    }
}

/// ib_core's `disassociate_ucontext` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: nothing beyond being called by
/// ib_core (the arguments are not dereferenced).
unsafe extern "C" fn disassociate_ucontext(_uctx: *mut b::ib_ucontext) {
    // Nothing to do: ib_core zaps the user mappings of our mmap entries itself, and the
    // objects are destroyed through the ordinary callbacks.
}

/// ib_core's `alloc_pd` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a PD ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata` is null
/// (kernel caller) or the user call's udata, valid for the call.
unsafe extern "C" fn alloc_pd<V: Verbs>(pd: *mut b::ib_pd, udata: *mut b::ib_udata) -> c_int {
    // SAFETY: ib_core passes a PD it allocated with our size for one of our devices.
    let dev = unsafe { dev_of::<V>((*pd).device) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::alloc_pd(dev, &mut udata).map(|data| {
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_pd, V::Pd>::init(pd, data) }
    }))
}

/// ib_core's `dealloc_pd` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn dealloc_pd<V: Verbs>(pd: *mut b::ib_pd, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: a PD created by `alloc_pd`, destroyed once.
    unsafe {
        V::dealloc_pd(
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
        );
        Obj::<b::ib_pd, V::Pd>::drop_data(pd);
    }
    0
}

/// ib_core's `alloc_mw` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mw` is a MW ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `udata` is null
/// (kernel caller) or the user call's udata, valid for the call.
unsafe extern "C" fn alloc_mw<V: Verbs>(mw: *mut b::ib_mw, udata: *mut b::ib_udata) -> c_int {
    // SAFETY: ib_core passes an MW it allocated with our size, in one of our PDs.
    let (dev, pd, mw_type) = unsafe {
        (
            dev_of::<V>((*mw).device),
            Obj::<b::ib_pd, V::Pd>::data_of((*mw).pd),
            (*mw).type_,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(
        V::alloc_mw(dev, pd, mw_type, &mut udata).map(|(rkey, data)| {
            // SAFETY: fresh object, data not initialised; ib_core reads `rkey` after we return.
            unsafe {
                (*mw).rkey = rkey.get();
                Obj::<b::ib_mw, V::Mw>::init(mw, data)
            }
        }),
    )
}

/// ib_core's `dealloc_mw` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mw` is a live MW this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn dealloc_mw<V: Verbs>(mw: *mut b::ib_mw) -> c_int {
    // SAFETY: an MW created by `alloc_mw`, destroyed once.
    unsafe {
        V::dealloc_mw(
            dev_of::<V>((*mw).device),
            Obj::<b::ib_mw, V::Mw>::data_of(mw),
        );
        Obj::<b::ib_mw, V::Mw>::drop_data(mw);
    }
    0
}

/// Allocates an `ib_mr` with the driver's data, as ib_core expects of reg_user_mr/get_dma_mr.
fn new_mr<D>(mr: Result<RegisteredMr<D>>) -> *mut b::ib_mr {
    let mr = match mr {
        Ok(mr) => mr,
        Err(err) => return err.to_ptr(),
    };
    let mut obj = match KBox::<Obj<b::ib_mr, D>>::new_uninit(GFP_KERNEL) {
        Ok(obj) => obj,
        // `mr.data` is dropped here: the driver's drop releases the device object.
        Err(_) => return ENOMEM.to_ptr(),
    };
    let raw = obj.as_mut_ptr();
    // SAFETY: `raw` is a fresh allocation of an `Obj`; an all-zero `ib_mr` is its initial state
    // (ib_core fills in the generic fields after we return).
    unsafe {
        ptr::addr_of_mut!((*raw).ib).write_bytes(0, 1);
        (*raw).ib.lkey = mr.lkey.get();
        (*raw).ib.rkey = mr.rkey.get();
        (*raw).data.write(mr.data);
    }
    // SAFETY: fully initialised above.
    let obj = unsafe { obj.assume_init() };
    KBox::into_raw(obj).cast::<b::ib_mr>()
}

/// ib_core's `reg_user_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver; `udata` is null (kernel caller) or the user call's udata,
/// valid for the call.
unsafe extern "C" fn reg_user_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    _dmah: *mut b::ib_dmah,
    udata: *mut b::ib_udata,
) -> *mut b::ib_mr {
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data, ibdev) = unsafe {
        let ibdev = (*pd).device;
        (
            dev_of::<V>(ibdev),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
            ibdev,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    let range = UserRange {
        start,
        length,
        iova,
    };
    new_mr(V::reg_user_mr(
        dev,
        ib_of(ibdev),
        pd_data,
        range,
        access as u32,
        &mut udata,
    ))
}

/// ib_core's `advise_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver; `sg_list` holds `num_sge` entries.
unsafe extern "C" fn advise_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    advice: b::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut b::ib_sge,
    num_sge: u32,
    _attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes one of our live PDs and `num_sge` SGEs it copied in.
    let (dev, pd_data, sg) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
            core::slice::from_raw_parts(sg_list, num_sge as usize),
        )
    };
    let mut sges = KVec::with_capacity(sg.len(), GFP_KERNEL);
    let sges = match &mut sges {
        Ok(v) => {
            for s in sg {
                // Capacity reserved above.
                let _ = v.push((s.addr, s.length, Key::from_raw(s.lkey)), GFP_KERNEL);
            }
            v
        }
        Err(_) => return ENOMEM.to_errno(),
    };
    let flush = flags & b::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
    let Some(advice) = MrAdvice::from_raw(advice) else {
        return EOPNOTSUPP.to_errno();
    };
    errno(V::advise_mr(dev, pd_data, advice, flush, sges))
}

/// ib_core's `get_dma_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver.
unsafe extern "C" fn get_dma_mr<V: Verbs>(pd: *mut b::ib_pd, access: c_int) -> *mut b::ib_mr {
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
        )
    };
    new_mr(V::get_dma_mr(dev, pd_data, access as u32))
}

/// ib_core's `dereg_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mr` is a live MR this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn dereg_mr<V: Verbs>(mr: *mut b::ib_mr, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: an MR made by `new_mr` (a `KBox<Obj<ib_mr, V::Mr>>`), deregistered once.
    unsafe {
        let dev = dev_of::<V>((*mr).device);
        V::dereg_mr(dev, Obj::<b::ib_mr, V::Mr>::data_of(mr));
        // `Obj` keeps its data in `MaybeUninit`: drop it, then free the allocation.
        Obj::<b::ib_mr, V::Mr>::drop_data(mr);
        drop(KBox::from_raw(mr.cast::<Obj<b::ib_mr, V::Mr>>()));
    }
    0
}

/// ib_core's `alloc_mr` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `pd` is a live PD of a `V`
/// device, created by this driver.
unsafe extern "C" fn alloc_mr<V: Verbs>(
    pd: *mut b::ib_pd,
    mr_type: b::ib_mr_type,
    max_num_sg: u32,
) -> *mut b::ib_mr {
    if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
        return EOPNOTSUPP.to_ptr();
    }
    // SAFETY: ib_core passes one of our live PDs.
    let (dev, pd_data) = unsafe {
        (
            dev_of::<V>((*pd).device),
            Obj::<b::ib_pd, V::Pd>::data_of(pd),
        )
    };
    new_mr(V::alloc_mr(dev, pd_data, max_num_sg))
}

/// `ib_sg_to_pages`' callback: one page of the mapping.
///
/// # Safety
///
/// `mr` is an MR of a `V` device (made by `new_mr`, so an `Obj<ib_mr, V::Mr>` with
/// initialised data), alive for the call: `ib_sg_to_pages` only calls this with the MR
/// `map_mr_sg` passed it.
unsafe extern "C" fn mr_set_page<V: Verbs>(mr: *mut b::ib_mr, addr: u64) -> c_int {
    // SAFETY: per the function's requirements.
    let data = unsafe { Obj::<b::ib_mr, V::Mr>::data_of(mr) };
    errno(V::mr_set_page(data, addr))
}

/// ib_core's `map_mr_sg` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `mr` is a live MR of a `V`
/// device, created by this driver; `sg` is a DMA-mapped scatterlist of `sg_nents` entries,
/// `sg_offset` null or valid.
unsafe extern "C" fn map_mr_sg<V: Verbs>(
    mr: *mut b::ib_mr,
    sg: *mut b::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut c_uint,
) -> c_int {
    // SAFETY: ib_map_mr_sg passes one of our live MRs (every MR of this device is made by
    // `new_mr`) and a DMA-mapped scatterlist of `sg_nents` entries; MRs that are not
    // fast-registration ones are refused by `mr_clear_pages` before any page is set.
    let data = unsafe { Obj::<b::ib_mr, V::Mr>::data_of(mr) };
    if let Err(err) = V::mr_clear_pages(data) {
        return err.to_errno();
    }
    // SAFETY: as above; `mr_set_page::<V>` is called with this MR only (its contract), and
    // `ib_sg_to_pages` sets the MR's iova/length from the scatterlist.
    unsafe { b::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(mr_set_page::<V>)) }
}

/// ib_core's `create_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a CQ ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `attr` is valid
/// for reading for the duration of the call; `attrs` is null or the uverbs attribute bundle of
/// the call.
unsafe extern "C" fn create_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    attr: *const b::ib_cq_init_attr,
    attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: ib_core passes a CQ it allocated with our size and valid attributes.
    let (dev, ibdev, attr) = unsafe { (dev_of::<V>((*cq).device), (*cq).device, &*attr) };
    // SAFETY: `attrs` is null (kernel CQ) or the call's attribute bundle.
    let raw_udata = unsafe { b::rox_shim_attrs_udata(attrs) };
    // SAFETY: as above.
    let (mut udata, uctx) = unsafe { (Udata::from_raw(raw_udata), ucontext_of::<V>(raw_udata)) };
    let init = CqInit {
        cqe: attr.cqe,
        comp_vector: attr.comp_vector,
    };
    errno((|| {
        let created = V::create_cq(dev, ib_of(ibdev), uctx, &init, &mut udata)?;
        // SAFETY: fresh object; `cqe` is ours to set.
        unsafe { (*cq).cqe = created.size as c_int };
        let id = created.id;
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_cq, V::Cq>::init(cq, created.data) };
        if let Err(err) = V::registry(dev).insert_cq(id, cq) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe {
                V::destroy_cq(dev, Obj::<b::ib_cq, V::Cq>::data_of(cq));
                Obj::<b::ib_cq, V::Cq>::drop_data(cq);
            }
            return Err(err);
        }
        Ok(())
    })())
}

/// The device id a created object was registered under, kept behind the driver's data.
pub(crate) trait DeviceId {
    fn device_id(&self) -> u32;
}

/// ib_core's `destroy_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn destroy_cq<V: Verbs>(cq: *mut b::ib_cq, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: a CQ created by `create_cq`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*cq).device);
        let data = Obj::<b::ib_cq, V::Cq>::data_of(cq);
        V::registry(dev).remove_cq(data.device_id());
        V::destroy_cq(dev, data);
        Obj::<b::ib_cq, V::Cq>::drop_data(cq);
    }
    0
}

/// ib_core's `resize_user_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver; `udata` is null (kernel caller) or the user call's udata,
/// valid for the call.
unsafe extern "C" fn resize_user_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    cqe: c_uint,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live CQs (ib_core holds it for the call).
    let (dev, ib, data) = unsafe {
        (
            dev_of::<V>((*cq).device),
            ib_of((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::resize_cq(dev, ib, data, cqe, &mut udata).map(|entries| {
        // SAFETY: our CQ; ib_core reports `cqe` back to user space after the call.
        unsafe { (*cq).cqe = entries as c_int };
    }))
}

/// ib_core's `create_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a QP ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `init` is valid
/// for reading and writing for the duration of the call; `udata` is null (kernel caller) or the
/// user call's udata, valid for the call.
unsafe extern "C" fn create_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    init: *mut b::ib_qp_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a QP it allocated with our size (pd set) and valid attributes whose
    // CQs, SRQ belong to the same device and are alive for the QP's lifetime.
    let (dev, ibdev, init, pd) = unsafe {
        (
            dev_of::<V>((*qp).device),
            (*qp).device,
            &mut *init,
            Obj::<b::ib_pd, V::Pd>::data_of((*qp).pd),
        )
    };
    let (send_cq, recv_cq, srq) = (init.send_cq, init.recv_cq, init.srq);
    if send_cq.is_null() || recv_cq.is_null() || init.qp_type == b::ib_qp_type_IB_QPT_XRC_TGT {
        return EOPNOTSUPP.to_errno();
    }
    // SAFETY: non-null CQs and SRQ of this device, alive (see above).
    let (send_cq, recv_cq, srq) = unsafe {
        (
            Obj::<b::ib_cq, V::Cq>::data_of(send_cq),
            Obj::<b::ib_cq, V::Cq>::data_of(recv_cq),
            if srq.is_null() {
                None
            } else {
                Some(Obj::<b::ib_srq, V::Srq>::data_of(srq))
            },
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let (mut udata_w, uctx) = unsafe { (Udata::from_raw(udata), ucontext_of::<V>(udata)) };
    let mut cap = QpCap::from_raw(&init.cap);
    let qp_init = QpInit {
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR,
        port: init.port_num,
        cap: &mut cap,
        pd,
        send_cq,
        recv_cq,
        srq,
    };
    let rc = errno((|| {
        let created = V::create_qp(dev, ib_of(ibdev), uctx, qp_init, &mut udata_w)?;
        let id = created.id;
        // SAFETY: fresh object; `qp_num` is ours to set; data not initialised.
        unsafe {
            (*qp).qp_num = id.get();
            Obj::<b::ib_qp, V::Qp>::init(qp, created.data);
        }
        if let Err(err) = V::registry(dev).insert_qp(id, qp) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe {
                V::destroy_qp(dev, Obj::<b::ib_qp, V::Qp>::data_of(qp));
                Obj::<b::ib_qp, V::Qp>::drop_data(qp);
            }
            return Err(err);
        }
        Ok(())
    })());
    cap.write_to(&mut init.cap);
    rc
}

/// ib_core's `modify_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `udata` is null (kernel caller) or the user call's udata, valid for the call.
unsafe extern "C" fn modify_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    mask: c_int,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live QPs and valid attributes.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            &*attr,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::modify_qp(
        dev,
        data,
        &QpAttr::from_raw(attr),
        mask as u32,
        &mut udata,
    ))
}

/// ib_core's `query_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `init` is valid for reading and writing for the duration of the call.
unsafe extern "C" fn query_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    _mask: c_int,
    init: *mut b::ib_qp_init_attr,
) -> c_int {
    // SAFETY: one of our live QPs and valid output buffers.
    let (dev, data, attr, init) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            &mut *attr,
            &mut *init,
        )
    };
    errno(V::query_qp(dev, data).map(|(a, i)| {
        a.write_to(attr);
        i.write_to(init);
    }))
}

/// ib_core's `destroy_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn destroy_qp<V: Verbs>(qp: *mut b::ib_qp, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: a QP created by `create_qp`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*qp).device);
        V::registry(dev).remove_qp(qpn_of(qp));
        V::destroy_qp(dev, Obj::<b::ib_qp, V::Qp>::data_of(qp));
        Obj::<b::ib_qp, V::Qp>::drop_data(qp);
    }
    0
}

/// ib_core's `create_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a SRQ ib_core
/// allocated with the size of an `Obj` of `V`'s type, its driver data not initialised; `init`
/// is valid for reading and writing for the duration of the call; `udata` is null (kernel
/// caller) or the user call's udata, valid for the call.
unsafe extern "C" fn create_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    init: *mut b::ib_srq_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes an SRQ it allocated with our size (pd set) and valid attributes.
    let (dev, ibdev, init, pd) = unsafe {
        (
            dev_of::<V>((*srq).device),
            (*srq).device,
            &mut *init,
            Obj::<b::ib_pd, V::Pd>::data_of((*srq).pd),
        )
    };
    if init.srq_type != b::ib_srq_type_IB_SRQT_BASIC {
        return EOPNOTSUPP.to_errno();
    }
    // SAFETY: `udata` is null or valid for this call.
    let (mut udata_w, uctx) = unsafe { (Udata::from_raw(udata), ucontext_of::<V>(udata)) };
    errno((|| {
        let mut attr = SrqAttr::from_raw(&init.attr);
        let created = V::create_srq(dev, ib_of(ibdev), uctx, pd, &mut attr, &mut udata_w)?;
        attr.write_to(&mut init.attr);
        let id = created.id;
        // SAFETY: fresh object, data not initialised.
        unsafe { Obj::<b::ib_srq, V::Srq>::init(srq, created.data) };
        if let Err(err) = V::registry(dev).insert_srq(id, srq) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe {
                V::destroy_srq(dev, Obj::<b::ib_srq, V::Srq>::data_of(srq));
                Obj::<b::ib_srq, V::Srq>::drop_data(srq);
            }
            return Err(err);
        }
        Ok(())
    })())
}

/// ib_core's `modify_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `udata` is null (kernel caller) or the user call's udata, valid for the call.
unsafe extern "C" fn modify_srq<V: Verbs>(
    srq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
    mask: b::ib_srq_attr_mask,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live SRQs and valid attributes.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
            &*attr,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    // SAFETY: a live SRQ belongs to a registered device.
    let ib = ib_of(unsafe { (*srq).device });
    let (attr, mask) = (SrqAttr::from_raw(attr), SrqAttrMask::from_bits(mask));
    errno(V::modify_srq(dev, ib, data, &attr, mask, &mut udata))
}

/// ib_core's `query_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call.
unsafe extern "C" fn query_srq<V: Verbs>(srq: *mut b::ib_srq, attr: *mut b::ib_srq_attr) -> c_int {
    // SAFETY: one of our live SRQs and a valid output buffer.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
            &mut *attr,
        )
    };
    errno(V::query_srq(dev, data).map(|a| a.write_to(attr)))
}

/// ib_core's `destroy_srq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn destroy_srq<V: Verbs>(srq: *mut b::ib_srq, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: an SRQ created by `create_srq`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*srq).device);
        let data = Obj::<b::ib_srq, V::Srq>::data_of(srq);
        V::registry(dev).remove_srq(data.device_id());
        V::destroy_srq(dev, data);
        Obj::<b::ib_srq, V::Srq>::drop_data(srq);
    }
    0
}

/// ib_core's `create_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a AH ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `init` is valid
/// for reading and writing for the duration of the call; `udata` is null (kernel caller) or the
/// user call's udata, valid for the call.
unsafe extern "C" fn create_ah<V: Verbs>(
    ah: *mut b::ib_ah,
    init: *mut b::rdma_ah_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes an AH it allocated with our size and a valid address.
    let (dev, attr) = unsafe { (dev_of::<V>((*ah).device), &*(*init).ah_attr) };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(
        V::create_ah(dev, &AhAttr::from_raw(attr), &mut udata).map(|data| {
            // SAFETY: fresh object, data not initialised.
            unsafe { Obj::<b::ib_ah, V::Ah>::init(ah, data) }
        }),
    )
}

/// ib_core's `query_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a live AH of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call.
unsafe extern "C" fn query_ah<V: Verbs>(ah: *mut b::ib_ah, attr: *mut b::rdma_ah_attr) -> c_int {
    // SAFETY: one of our live AHs and a valid output buffer.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*ah).device),
            Obj::<b::ib_ah, V::Ah>::data_of(ah),
            &mut *attr,
        )
    };
    errno(V::query_ah(dev, data).map(|a| a.write_to(attr)))
}

/// ib_core's `destroy_ah` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ah` is a live AH this driver
/// created, passed here once, with no other callback on it running or following.
unsafe extern "C" fn destroy_ah<V: Verbs>(ah: *mut b::ib_ah, _flags: u32) -> c_int {
    // SAFETY: an AH created by `create_ah`, destroyed once.
    unsafe {
        V::destroy_ah(
            dev_of::<V>((*ah).device),
            Obj::<b::ib_ah, V::Ah>::data_of(ah),
        );
        Obj::<b::ib_ah, V::Ah>::drop_data(ah);
    }
    0
}

/// ib_core's `attach_mcast` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `gid` is valid for reading.
unsafe extern "C" fn attach_mcast<V: Verbs>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: one of our live QPs and a GID ib_core owns for the call; every bit pattern of
    // the union is a valid `raw` array.
    let (dev, qpn, gid) = unsafe { (dev_of::<V>((*qp).device), qpn_of(qp), (*gid).raw) };
    errno(V::attach_mcast(dev, qpn, &gid))
}

/// ib_core's `detach_mcast` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `gid` is valid for reading.
unsafe extern "C" fn detach_mcast<V: Verbs>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: as in `attach_mcast`.
    let (dev, qpn, gid) = unsafe { (dev_of::<V>((*qp).device), qpn_of(qp), (*gid).raw) };
    errno(V::detach_mcast(dev, qpn, &gid))
}

/// ib_core's `alloc_hw_port_stats` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated).
unsafe extern "C" fn alloc_hw_port_stats(
    ibdev: *mut b::ib_device,
    _port: u32,
) -> *mut b::rdma_hw_stats {
    // SAFETY: one of our devices; the descriptors live as long as the registration, which
    // outlives every use ib_core makes of them.
    unsafe {
        let container = ibdev.cast::<Container>();
        b::rdma_alloc_hw_stats_struct(
            (*container).counter_descs,
            (*container).num_counters as c_int,
            b::RDMA_HW_STATS_DEFAULT_LIFESPAN as usize,
        )
    }
}

/// ib_core's `get_hw_stats` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `ibdev` is the ib_device
/// registered for `V` (not yet deallocated); `stats` is valid for reading and writing for the
/// duration of the call.
unsafe extern "C" fn get_hw_stats<V: Verbs>(
    ibdev: *mut b::ib_device,
    stats: *mut b::rdma_hw_stats,
    _port: u32,
    _index: c_int,
) -> c_int {
    // SAFETY: one of our devices and a counter structure `alloc_hw_port_stats` made, whose
    // `value` array holds `num_counters` entries; ib_core holds its lock during the call.
    let (dev, values) = unsafe {
        let count = (*stats).num_counters as usize;
        (dev_of::<V>(ibdev), (*stats).value.as_mut_slice(count))
    };
    match V::read_counters(dev, values) {
        Ok(()) => values.len() as c_int,
        Err(err) => err.to_errno(),
    }
}

// Kernel consumers' data path (ib_mad's GSI QP1 and its CQ); user QPs and CQs never get here,
// their data path is in the provider.

/// ib_core's `post_send` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
unsafe extern "C" fn post_send<V: Verbs>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad: *mut *const b::ib_send_wr,
) -> c_int {
    // SAFETY: one of our live QPs; `wr` is a valid chain for the duration of the call.
    let (dev, data, is_ud) = unsafe {
        let qp_type = (*qp).qp_type;
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            qp_type == b::ib_qp_type_IB_QPT_UD || qp_type == b::ib_qp_type_IB_QPT_GSI,
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        let view = SendWr::<V> {
            raw,
            is_ud,
            _verbs: PhantomData,
        };
        if let Err(err) = V::post_send(dev, data, &view) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_sq(dev, data);
    errno(result)
}

/// ib_core's `post_recv` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
unsafe extern "C" fn post_recv<V: Verbs>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    // SAFETY: one of our live QPs; `wr` is a valid chain for the duration of the call.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        if let Err(err) = V::post_recv(dev, data, &RecvWr { raw }) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_rq(dev, data);
    errno(result)
}

/// ib_core's `post_srq_recv` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `srq` is a live SRQ of a `V`
/// device, created by this driver; `wr` is a null-terminated chain of work requests valid for
/// the call (for a UD/GSI QP each one the `wr` member of an `ib_ud_wr`); `bad` is writable.
unsafe extern "C" fn post_srq_recv<V: Verbs>(
    srq: *mut b::ib_srq,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    // SAFETY: one of our live SRQs; `wr` is a valid chain for the duration of the call.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*srq).device),
            Obj::<b::ib_srq, V::Srq>::data_of(srq),
        )
    };
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: non-null element of the caller's chain.
        let raw = unsafe { &*cur };
        if let Err(err) = V::post_srq_recv(dev, data, &RecvWr { raw }) {
            // SAFETY: ib_core passes a valid output pointer.
            unsafe { *bad = cur };
            result = Err(err);
            break;
        }
        cur = raw.next;
    }
    V::ring_srq(dev, data);
    errno(result)
}

/// ib_core's `poll_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver; `wc` has room for `n` completions.
unsafe extern "C" fn poll_cq<V: Verbs>(cq: *mut b::ib_cq, n: c_int, wc: *mut b::ib_wc) -> c_int {
    if n <= 0 || wc.is_null() {
        return 0;
    }
    // SAFETY: one of our live CQs; `wc` has room for `n` completions.
    let (dev, data, wcs) = unsafe {
        (
            dev_of::<V>((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
            core::slice::from_raw_parts_mut(wc, n as usize),
        )
    };
    let mut out = WcOut {
        raw: wcs,
        registry: V::registry(dev),
    };
    match V::poll_cq(dev, data, &mut out) {
        Ok(count) => count as c_int,
        Err(err) => err.to_errno(),
    }
}

/// ib_core's `req_notify_cq` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `cq` is a live CQ of a `V`
/// device, created by this driver.
unsafe extern "C" fn req_notify_cq<V: Verbs>(
    cq: *mut b::ib_cq,
    flags: b::ib_cq_notify_flags,
) -> c_int {
    // SAFETY: one of our live CQs.
    let (dev, data) = unsafe {
        (
            dev_of::<V>((*cq).device),
            Obj::<b::ib_cq, V::Cq>::data_of(cq),
        )
    };
    let solicited =
        flags & b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK == b::ib_cq_notify_flags_IB_CQ_SOLICITED;
    match V::req_notify_cq(dev, data, solicited) {
        Ok(missed) if flags & b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0 => {
            missed.into()
        }
        Ok(_) => 0,
        Err(err) => err.to_errno(),
    }
}

/// The ops table of a `V` device (ib_set_device_ops copies it).
fn ops<V: Verbs>() -> b::ib_device_ops {
    let mut ops = b::ib_device_ops {
        // SAFETY: the shim returns this module's `THIS_MODULE`.
        owner: unsafe { b::rox_shim_this_module() },
        driver_id: b::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
        // The ABI of rox's udata, which the provider checks.
        uverbs_abi_ver: crate::hw::uapi::udata::UVERBS_ABI_VERSION,
        ..Default::default()
    };
    // The provider matches by PCI id (no rdma_driver_id exists for rox).
    ops.set_uverbs_no_driver_id_binding(1);
    // Every udata is checked for size and answered through the udata helpers.
    ops.set_uverbs_robust_udata(1);

    ops.query_device = Some(query_device::<V>);
    ops.query_port = Some(query_port::<V>);
    ops.get_port_immutable = Some(get_port_immutable::<V>);
    ops.get_link_layer = Some(get_link_layer);
    ops.query_pkey = Some(query_pkey);
    ops.add_gid = Some(add_gid::<V>);
    ops.del_gid = Some(del_gid::<V>);
    ops.alloc_ucontext = Some(alloc_ucontext::<V>);
    ops.dealloc_ucontext = Some(dealloc_ucontext::<V>);
    ops.disassociate_ucontext = Some(disassociate_ucontext);
    ops.mmap = Some(mmap::mmap);
    ops.mmap_free = Some(mmap::mmap_free);
    ops.alloc_pd = Some(alloc_pd::<V>);
    ops.dealloc_pd = Some(dealloc_pd::<V>);
    ops.alloc_mw = Some(alloc_mw::<V>);
    ops.dealloc_mw = Some(dealloc_mw::<V>);
    ops.reg_user_mr = Some(reg_user_mr::<V>);
    ops.get_dma_mr = Some(get_dma_mr::<V>);
    ops.dereg_mr = Some(dereg_mr::<V>);
    ops.alloc_mr = Some(alloc_mr::<V>);
    ops.map_mr_sg = Some(map_mr_sg::<V>);
    ops.advise_mr = Some(advise_mr::<V>);
    ops.create_cq = Some(create_cq::<V>);
    ops.destroy_cq = Some(destroy_cq::<V>);
    ops.resize_user_cq = Some(resize_user_cq::<V>);
    ops.create_qp = Some(create_qp::<V>);
    ops.modify_qp = Some(modify_qp::<V>);
    ops.query_qp = Some(query_qp::<V>);
    ops.destroy_qp = Some(destroy_qp::<V>);
    ops.create_srq = Some(create_srq::<V>);
    ops.modify_srq = Some(modify_srq::<V>);
    ops.query_srq = Some(query_srq::<V>);
    ops.destroy_srq = Some(destroy_srq::<V>);
    ops.create_ah = Some(create_ah::<V>);
    ops.create_user_ah = Some(create_ah::<V>);
    ops.query_ah = Some(query_ah::<V>);
    ops.destroy_ah = Some(destroy_ah::<V>);
    ops.attach_mcast = Some(attach_mcast::<V>);
    ops.detach_mcast = Some(detach_mcast::<V>);
    ops.alloc_hw_port_stats = Some(alloc_hw_port_stats);
    ops.get_hw_stats = Some(get_hw_stats::<V>);
    ops.post_send = Some(post_send::<V>);
    ops.post_recv = Some(post_recv::<V>);
    ops.post_srq_recv = Some(post_srq_recv::<V>);
    ops.poll_cq = Some(poll_cq::<V>);
    ops.req_notify_cq = Some(req_notify_cq::<V>);

    ops.size_ib_ucontext = Obj::<b::ib_ucontext, V::Ucontext>::SIZE;
    ops.size_ib_pd = Obj::<b::ib_pd, V::Pd>::SIZE;
    ops.size_ib_mw = Obj::<b::ib_mw, V::Mw>::SIZE;
    ops.size_ib_cq = Obj::<b::ib_cq, V::Cq>::SIZE;
    ops.size_ib_qp = Obj::<b::ib_qp, V::Qp>::SIZE;
    ops.size_ib_srq = Obj::<b::ib_srq, V::Srq>::SIZE;
    ops.size_ib_ah = Obj::<b::ib_ah, V::Ah>::SIZE;
    ops
}
