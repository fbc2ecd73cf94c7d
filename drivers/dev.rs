// SPDX-License-Identifier: GPL-2.0
//! One rox-nic: bring-up (reset, version check, admin queue, capabilities, event queues,
//! MSI-X, ib_device), event dispatch, and tear-down.

use crate::{
    admin::AdminQueue,
    dead::DeadState,
    eq::EventQueue,
    hw::{
        regs,
        uapi::{
            self, admin,
            ids::{Key, Qpn},
            queue::Eqe,
        },
        Regs,
    },
    ib::{
        self,
        irq::MsixIrqs,
        pci_peer::{PeerRemoved, RemovalWatch},
        AsyncEvent, DeviceParams, IbRegistration, Registry,
    },
    ids::{DbSlots, IdBitmap},
    slot_store::{device_takes_news, AfterStore, SlotStore},
    wake::Wake,
};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    device::{Bound, Core},
    io::Io,
    irq::{IrqReturn, ThreadedHandler},
    pci,
    prelude::*,
    sync::Arc,
};

/// Doorbell pages of BAR2, one per user context (page `DB_PAGE_KERNEL` is the driver's).
pub(crate) type DbPages = IdBitmap<{ (regs::DB_PAGE_COUNT as usize).div_ceil(u64::BITS as usize) }>;

/// BAR2: the driver's doorbell page (`DB_PAGE_KERNEL`) and the user contexts' pages, whose
/// `news_on` it clears before a context gets one (`regs::DbPage`).
pub(crate) type DbBar<'bound> = pci::Bar<'bound, { regs::BAR_DB_SIZE as usize }>;
const _: () = assert!(
    regs::DB_PAGE_KERNEL == 0,
    "the kernel's doorbell page is mapped at BAR2 offset 0"
);

/// Stores `DbPage::news_on` of doorbell page `page`: the owner stores news (`on`) or not.
fn say_news_on(bar: &DbBar<'_>, page: u32, on: bool) -> Result {
    let offset = page as usize * regs::ROX_PAGE_SIZE + core::mem::offset_of!(regs::DbPage, news_on);
    bar.try_write32(if on { regs::DB_NEWS_ON } else { 0 }, offset)
}

/// Maps BAR2 and says on the driver's page whether it stores news, before any kernel object
/// rings: from then on the device takes news on that page and trusts the user pages' word, which
/// this driver clears for each new context (`ucontext::alloc`).
fn map_doorbells<'bound>(bound: &'bound pci::Device<Bound>, caps: u32) -> Result<DbBar<'bound>> {
    let bar =
        bound.iomap_region_sized::<{ regs::BAR_DB_SIZE as usize }>(regs::BAR_DB, c"rox-db")?;
    say_news_on(&bar, regs::DB_PAGE_KERNEL, device_takes_news(caps))?;
    Ok(bar)
}

/// Completion event queues rox uses at most (one per vCPU of the 2-vCPU test guests is plenty;
/// the device offers up to `MAX_EQS - 1`).
const MAX_COMP_EQS: u32 = 2;

/// The driver, as ib_core sees it: its verbs (`impl Verbs for RoxVerbs`, verbs.rs) act on a
/// [`RoxDev`].
pub(crate) struct RoxVerbs;

/// The state of one bound rox-nic, shared by the verbs, the interrupt handlers and the PCI
/// driver. Dropped after the ib_device is unregistered and the interrupts are freed.
pub(crate) struct RoxDev<'bound> {
    pub(crate) pdev: &'bound pci::Device<Bound>,
    pub(crate) regs: Regs<'bound>,
    pub(crate) admin: AdminQueue,
    /// `eqs[0]` is `EQ_ADMIN_ASYNC`; `eqs[1..]` carry completion events.
    eqs: KVec<EventQueue>,
    pub(crate) attr: admin::DeviceAttr,
    pub(crate) port: admin::PortAttr,
    /// MAC of the paired network device (port 1 is bound to it; RoCEv2 GIDs come from its
    /// addresses).
    pub(crate) mac: [u8; 6],
    registry: Pin<KBox<Registry>>,
    /// On-demand paging regions by lkey (for page fault events).
    pub(crate) odp_mrs: crate::odp::OdpMrs,
    pub(crate) db_pages: DbPages,
    /// The doorbell BAR: the driver's own page (`DB_PAGE_KERNEL`), whose slots serve the
    /// queues of kernel consumers, and the user contexts' pages.
    db_bar: DbBar<'bound>,
    pub(crate) kernel_slots: Arc<DbSlots>,
    /// Whether the device died, and the kernel QPs completed in software then (`dead.rs`).
    pub(crate) dead: DeadState,
    next_pd: AtomicU32,
    /// Physical addresses of BAR0 (wake page) and BAR2 (doorbell pages), for user mappings.
    pub(crate) ctrl_bar_start: u64,
    pub(crate) db_bar_start: u64,
    /// How the kernel and user contexts wake the device (`wake.rs`).
    pub(crate) wake: Wake,
}

impl<'bound> RoxDev<'bound> {
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Number of completion vectors (EQ 1..=n).
    pub(crate) fn num_comp_vectors(&self) -> u32 {
        (self.eqs.len() as u32).saturating_sub(1)
    }

    /// The completion EQ of completion vector `vector`.
    pub(crate) fn comp_eqn(&self, vector: u32) -> u32 {
        1 + vector.checked_rem(self.num_comp_vectors()).unwrap_or(0)
    }

    /// A fresh protection domain number (PDs exist only in the driver; the device checks that
    /// an MR and a QP name the same one).
    pub(crate) fn alloc_pdn(&self) -> u32 {
        self.next_pd.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes a slot of the driver's doorbell page (`a` and/or `b`, see `regs::DbSlot`), then
    /// wakes the device if it sleeps (the arm/wake protocol of `regs::DbPage`): a producer
    /// index or a CQ's arm word. Nothing on a dead device; a read of all-ones (no device
    /// behind the BAR) marks it dead.
    pub(crate) fn kernel_doorbell(&self, slot: u32, a: Option<u32>, b: Option<u32>) {
        self.store_slot(SlotStore::Ring, slot, a, b);
    }

    /// Writes a kernel QP's SQ producer index to its slot as [`Self::kernel_doorbell`] does,
    /// as `store` says (`SlotStore::sq`): an RC SQ's WQEs that all send packets wake no idle
    /// device whose port's flight is full.
    pub(crate) fn kernel_sq_doorbell(&self, slot: u32, producer: u32, store: SlotStore) {
        self.store_slot(store, slot, Some(producer), None);
    }

    /// Publishes a kernel CQ's consumer index in its slot: no news and no wake
    /// (`SlotStore::ConsumerIndex`), but a read of all-ones marks the device dead as after a
    /// ring. Nothing on a dead device.
    pub(crate) fn kernel_consumer_index(&self, slot: u32, consumer: u32) {
        self.store_slot(SlotStore::ConsumerIndex, slot, Some(consumer), None);
    }

    fn store_slot(&self, store: SlotStore, slot: u32, a: Option<u32>, b: Option<u32>) {
        use core::sync::atomic::{fence, Ordering};
        if self.is_dead() {
            return;
        }
        let offset = regs::db_slot_offset(slot);
        if let Some(a) = a {
            let _ = self.db_bar.try_write32(a, offset);
        }
        if let Some(b) = b {
            let _ = self
                .db_bar
                .try_write32(b, offset + core::mem::size_of::<u32>());
        }
        if store.stores_news(self.attr.caps) {
            // After the slot (the MMIO write orders it after the writes above).
            let _ = self
                .db_bar
                .try_write8(regs::DB_NEWS_SET, regs::db_news_offset(slot));
        }
        if store.may_wake() {
            fence(Ordering::SeqCst);
        }
        // Read after every store, a consumer index's too: the rox_slot_store cases (KUnit and
        // host) rely on it, as `SlotStore::after`'s all-ones check acts only on what is read
        // here. They test the rule (which store may wake, what all-ones means), not this
        // wiring: a store that skipped this read would still pass them.
        let idle = self
            .db_bar
            .read32(core::mem::offset_of!(regs::DbPage, device_idle));
        // After `device_idle`'s read (readl orders the reads after it), as the device stores
        // this word before `device_idle`: an idle device's word is the one it announced.
        let rc_sq_no_wake = || {
            self.db_bar
                .read32(core::mem::offset_of!(regs::DbPage, rc_sq_no_wake))
        };
        match store.after(idle, rc_sq_no_wake) {
            AfterStore::Nothing => {}
            AfterStore::Wake => {
                // A companion removed since (or being removed) is no wake: the trapped one then.
                let posted = match &self.wake {
                    Wake::Posted(posted) => posted.ring(),
                    Wake::Trapped => false,
                };
                if !posted {
                    self.regs.write(regs::WAKE_REG, regs::DB_PAGE_KERNEL);
                }
            }
            AfterStore::ConfirmRemoved => {
                if self.regs.read(regs::REG_STATUS) == u32::MAX {
                    self.device_died("BAR reads all-ones");
                }
            }
        }
    }

    /// Says on doorbell page `page` whether its owner stores news (`DbPage::news_on`): the
    /// driver's page at bring-up, and "no" on a user context's page before the context gets it,
    /// so that a provider which stores none never inherits a predecessor's word.
    pub(crate) fn say_news_on(&self, page: u32, on: bool) {
        let _ = say_news_on(&self.db_bar, page, on);
    }

    /// Runs one typed admin command (`uapi::admin::AdminCommand`): `C`'s payload in, `C`'s
    /// result out, so the opcode, its payload and the meaning of its result words cannot
    /// disagree. A dead device fails every command at once (EIO).
    pub(crate) fn run<C: admin::AdminCommand>(&self, payload: C::Payload) -> Result<C::Result> {
        if self.is_dead() {
            return Err(EIO);
        }
        let result = self.admin.run::<C>(&self.regs, payload);
        self.check_admin(result)
    }

    /// A command that broke the admin queue (no completion in time) found a dead device.
    fn check_admin<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_err() && self.admin.is_broken() {
            self.device_died("its admin queue got no completion");
        }
        result
    }

    /// Runs one admin query (its response in a DMA buffer; `AdminQueue::query`): the response
    /// and the query's own value.
    pub(crate) fn query<C, R>(&self, index: u32) -> Result<(C::Response, R)>
    where
        C: admin::AdminQuery<Result = admin::QueryAnswer<R>>,
        C::Response: kernel::transmute::AsBytes + kernel::transmute::FromBytes,
        R: admin::Result0Only,
    {
        if self.is_dead() {
            return Err(EIO);
        }
        let result = self
            .admin
            .query::<C, R>(self.pdev.as_ref(), &self.regs, index);
        self.check_admin(result)
    }

    /// Services event queue `eqn` (its interrupt thread).
    fn service_eq(&self, eqn: u32) {
        if let Some(eq) = self.eqs.get(eqn as usize) {
            eq.service(&self.regs, |eqe| self.dispatch(eqe));
        }
    }

    /// Takes the new events of EQ 0 off its ring (see [`EventQueue::skim`]). Only from EQ 0's
    /// interrupt thread (its event handlers).
    pub(crate) fn skim_async_eq(&self) {
        if let Some(eq) = self.eqs.first() {
            eq.skim(&self.regs);
        }
    }

    fn dispatch(&self, eqe: &Eqe) {
        use uapi::queue::*;
        let registry = self.registry();
        match eqe.event_type {
            EQE_TYPE_COMPLETION => registry.cq_completion(eqe.handle),
            EQE_TYPE_ADMIN => {}
            // QP events name the QP by its number, page faults the region by its lkey.
            EQE_TYPE_QP_FATAL => registry.qp_event(Qpn::from_raw(eqe.handle), AsyncEvent::QpFatal),
            EQE_TYPE_QP_LAST_WQE => {
                registry.qp_event(Qpn::from_raw(eqe.handle), AsyncEvent::QpLastWqeReached)
            }
            EQE_TYPE_QP_REQ_ERR => {
                registry.qp_event(Qpn::from_raw(eqe.handle), AsyncEvent::QpReqErr)
            }
            EQE_TYPE_QP_ACCESS_ERR => {
                registry.qp_event(Qpn::from_raw(eqe.handle), AsyncEvent::QpAccessErr)
            }
            EQE_TYPE_SQ_DRAINED => {
                registry.qp_event(Qpn::from_raw(eqe.handle), AsyncEvent::SqDrained)
            }
            EQE_TYPE_CQ_ERROR => registry.cq_event(eqe.handle, AsyncEvent::CqError),
            EQE_TYPE_SRQ_LIMIT => registry.srq_event(eqe.handle, AsyncEvent::SrqLimitReached),
            EQE_TYPE_SRQ_ERROR => registry.srq_event(eqe.handle, AsyncEvent::SrqError),
            EQE_TYPE_PAGE_FAULT => {
                crate::odp::odp_fault(self, Key::from_raw(eqe.handle), eqe.aux, eqe.fault_count())
            }
            EQE_TYPE_PORT_CHANGE => registry.port_changed(u32::from(admin::PORT_NUM)),
            EQE_TYPE_DEVICE_FATAL => {
                dev_err!(self.pdev.as_ref(), "device fatal error, code {}\n", eqe.aux);
                self.device_died("it reported a fatal error");
            }
            other => dev_warn!(self.pdev.as_ref(), "unknown event type {}\n", other),
        }
    }
}

impl Drop for RoxDev<'_> {
    fn drop(&mut self) {
        for eq in self.eqs.iter() {
            eq.disable(&self.regs);
        }
        // The device forgets every ring and object before the DMA memory is freed: the reset
        // is over only at `STATUS_READY` (rox-nic's data path forgets its rings when it takes
        // the reset), so wait for it. A dead device is asked again, not waited for: it reads
        // all-ones (nothing there), or its broken admin queue already waited (`quiesce`), or
        // it reported a fatal error, after which its data path does no work (dead.rs).
        if self.is_dead() {
            self.regs.write(regs::REG_RESET, regs::RESET_VALUE);
        } else {
            crate::admin::quiesce(&self.regs);
        }
    }
}

/// The interrupt handler of one event queue.
pub(crate) struct EqHandler<'bound> {
    dev: Arc<RoxDev<'bound>>,
    eqn: u32,
}

impl ThreadedHandler for EqHandler<'_> {
    fn handle_threaded(&self) -> IrqReturn {
        self.dev.service_eq(self.eqn);
        IrqReturn::Handled
    }
}

/// Tells a device that its posted-wake companion is leaving the PCI bus (`wake::watch`).
struct CompanionGone<'bound>(Arc<RoxDev<'bound>>);

impl PeerRemoved for CompanionGone<'_> {
    fn removed(&self) {
        let dev = &self.0;
        if let Wake::Posted(posted) = &dev.wake {
            posted.companion_removed(dev.pdev, &dev.regs, || {
                dev.registry()
                    .revoke_user_mappings()
                    .then(|| fail_user_qps(dev))
            });
        }
    }
}

/// The processes' doorbells no longer reach the device (their mappings were revoked): each
/// user QP is moved to ERR through the device, which flushes its outstanding work requests into
/// its CQs (user memory, still polled), and gets IB_EVENT_QP_FATAL, so that its process learns
/// it must reopen the device instead of posting into nothing. Kernel QPs are left alone: their
/// wakes and doorbells still reach the device. Returns how many QPs were moved. Sleeps.
///
/// A QP destroyed meanwhile fails the modify (no such QPN) and is skipped; its number comes
/// back only after the device's QPN counter wraps around.
fn fail_user_qps(dev: &RoxDev<'_>) -> usize {
    let qpns = match dev.registry().user_qps() {
        Ok(qpns) => qpns,
        Err(e) => {
            dev_err!(dev.pdev, "cannot list the user QPs to fail: {:?}\n", e);
            return 0;
        }
    };
    let mut failed = 0;
    for qpn in qpns {
        let cmd = admin::ModifyQpCmd {
            qpn,
            attr_mask: uapi::verbs::QP_STATE,
            attr: admin::QpAttr {
                qp_state: uapi::verbs::QPS_ERR,
                ..Default::default()
            },
        };
        if dev.run::<admin::ModifyQp>(cmd).is_ok() {
            dev.registry().qp_event(qpn, AsyncEvent::QpFatal);
            failed += 1;
        }
    }
    failed
}

/// What the device answers at bring-up over its admin queue, and what the driver maps and
/// allocates by those answers: the parts of a [`RoxDev`] made while the device holds the admin
/// ring's address and no `RoxDev` (whose drop resets the device) exists yet.
struct Queried<'bound> {
    attr: admin::DeviceAttr,
    port: admin::PortAttr,
    mac: [u8; 6],
    /// `eqs[0]` is `EQ_ADMIN_ASYNC`; not yet given to the device.
    eqs: KVec<EventQueue>,
    db_bar: DbBar<'bound>,
}

impl<'bound> Queried<'bound> {
    /// Enables `queue` on the device (it gets the ring's address) and asks it what a `RoxDev`
    /// needs. On any error the device is reset before this returns, so that it forgets the
    /// ring before the caller's error path frees it: a refused query must not leave the device
    /// holding the address of freed memory (a command or completion written there later).
    fn enable_and_query(
        bound: &'bound pci::Device<Bound>,
        regs: &Regs<'_>,
        queue: &AdminQueue,
    ) -> Result<Self> {
        let queried = queue
            .enable(regs)
            .and_then(|()| Self::query(bound, regs, queue));
        if let Err(e) = &queried {
            dev_err!(
                bound.as_ref(),
                "bring-up failed after the admin queue's enable (error {}); the device is reset\n",
                e.to_errno()
            );
            crate::admin::quiesce(regs);
        }
        queried
    }

    fn query(
        bound: &'bound pci::Device<Bound>,
        regs: &Regs<'_>,
        queue: &AdminQueue,
    ) -> Result<Self> {
        let dev = bound.as_ref();
        let (attr, ()) = queue.query::<admin::QueryDevice, _>(dev, regs, 0)?;
        let (port, ()) = queue.query::<admin::QueryPort, _>(dev, regs, admin::PORT_NUM.into())?;
        let admin::MacAddr(mac) = queue.run::<admin::ReadMac>(regs, Default::default())?;
        let num_comp = attr.num_comp_eqs.min(regs::MAX_EQS - 1).min(MAX_COMP_EQS);
        if num_comp == 0 {
            dev_err!(dev, "device offers no completion event queue\n");
            return Err(ENODEV);
        }
        let mut eqs = KVec::with_capacity(num_comp as usize + 1, GFP_KERNEL)?;
        for eqn in 0..=num_comp {
            eqs.push(EventQueue::new(dev, eqn)?, GFP_KERNEL)?;
        }
        let db_bar = map_doorbells(bound, attr.caps)?;
        Ok(Self {
            attr,
            port,
            mac,
            eqs,
            db_bar,
        })
    }
}

/// The PCI driver's data of one bound rox-nic. Fields drop in order: the companion's removal
/// watch first (no removal is handled afterwards; one in progress is waited for), then the
/// ib_device (no verb runs afterwards), then the interrupts, then the device state (reset). EQ 0's
/// interrupt thread may still be resolving a page fault while the ib_device is unregistered:
/// dereg_mr waits for it (`odp::OdpMrs`), so no region outlives the ib_device.
pub(crate) struct RoxPci<'bound> {
    _companion_watch: Option<RemovalWatch<'bound, CompanionGone<'bound>>>,
    _ib: IbRegistration<'bound, RoxVerbs>,
    _irqs: MsixIrqs<'bound, EqHandler<'bound>>,
    _dev: Arc<RoxDev<'bound>>,
}

impl<'bound> RoxPci<'bound> {
    /// Binds one rox-nic: its control registers ([`open_control`]), its state
    /// ([`RoxDev::bring_up`]), its wake mode, interrupts and event queues, then its ib_device
    /// ([`register_ib`]). On an error what was made is dropped in the reverse order.
    pub(crate) fn probe(pdev: &'bound pci::Device<Core<'_>>) -> Result<Self> {
        let bound: &'bound pci::Device<Bound> = pdev;
        let regs = open_control(pdev)?;
        let rox = RoxDev::bring_up(bound, regs)?;
        crate::wake::apply(bound, &rox.regs, &rox.wake);
        // As soon as there is a `RoxDev` to switch back (a removal since `wake::setup` is not
        // seen: known limit, driver.md); before the ib_device, no user mapping to revoke.
        let companion_watch =
            crate::wake::watch(bound.as_ref(), &rox.wake, CompanionGone(rox.clone()))?;

        let irqs = MsixIrqs::new(bound, rox.num_comp_vectors() + 1, c"rox-eq", |eqn| {
            EqHandler {
                dev: rox.clone(),
                eqn,
            }
        })?;
        for eq in rox.eqs.iter() {
            eq.enable(&rox.regs)?;
        }
        let ib = register_ib(bound, &rox)?;
        Ok(Self {
            _companion_watch: companion_watch,
            _ib: ib,
            _irqs: irqs,
            _dev: rox,
        })
    }
}

/// Enables the PCI device and maps its control registers (BAR0); ENODEV unless it speaks this
/// driver's interface version, or if it does not come out of reset. The device then holds no
/// address of the driver's.
fn open_control<'bound>(pdev: &'bound pci::Device<Core<'_>>) -> Result<Regs<'bound>> {
    let bound: &'bound pci::Device<Bound> = pdev;
    let dev = bound.as_ref();
    pdev.enable_device_mem()?;
    pdev.set_master();
    ib::dma::set_dma_mask_64(pdev)?;

    let bar =
        bound.iomap_region_sized::<{ regs::BAR_CTRL_SIZE as usize }>(regs::BAR_CTRL, c"rox")?;
    let regs = Regs::new(bar);
    let version = regs.read(regs::REG_VERSION);
    if version != uapi::ROX_VERSION {
        dev_err!(
            dev,
            "interface version {} (driver speaks {})\n",
            version,
            uapi::ROX_VERSION
        );
        return Err(ENODEV);
    }
    crate::admin::reset(&regs)
        .inspect_err(|_| dev_err!(dev, "device did not come out of reset\n"))?;
    Ok(regs)
}

impl<'bound> RoxDev<'bound> {
    /// The state of a device just reset through `regs`: its admin queue enabled, what it
    /// answers at bring-up (`Queried`), the driver's allocations and its wake mode (set up,
    /// not yet applied: `wake::apply`). Its event queues are not enabled yet.
    fn bring_up(bound: &'bound pci::Device<Bound>, regs: Regs<'bound>) -> Result<Arc<Self>> {
        let dev = bound.as_ref();
        // Allocated before the device holds an address of the driver's: an error returns
        // with nothing to take back.
        let admin = AdminQueue::new(dev)?;
        let registry = KBox::pin_init(Registry::new(), GFP_KERNEL)?;
        let odp_mrs = crate::odp::OdpMrs::new()?;
        let kernel_slots = DbSlots::new_page()?;
        let dead = DeadState::new()?;
        let ctrl_bar_start = bound.resource_start(regs::BAR_CTRL)?;
        let db_bar_start = bound.resource_start(regs::BAR_DB)?;
        // Resets the device on its errors (the admin ring's address is then the device's).
        let queried = Queried::enable_and_query(bound, &regs, &admin)?;

        // After the reset (which sets the mode back to trapped), before the ib_device exists.
        // The device hears the mode only once `rox` owns it (`wake::apply`, in `probe`).
        let wake = crate::wake::setup(bound, &regs);
        // Nothing fails from the queries to here. From here a failed probe drops the `RoxDev`
        // (also when `Arc::new` cannot allocate: it drops its value), whose reset makes the
        // device forget its rings before they are freed, and trapped again.
        let rox = Arc::new(
            RoxDev {
                pdev: bound,
                regs,
                admin,
                eqs: queried.eqs,
                attr: queried.attr,
                port: queried.port,
                mac: queried.mac,
                registry,
                odp_mrs,
                db_pages: DbPages::new(regs::DB_PAGE_KERNEL + 1, regs::DB_PAGE_COUNT),
                db_bar: queried.db_bar,
                kernel_slots,
                dead,
                next_pd: AtomicU32::new(1),
                ctrl_bar_start,
                db_bar_start,
                wake,
            },
            GFP_KERNEL,
        )?;
        Ok(rox)
    }
}

/// Registers the ib_device of `rox` (ib_core calls its verbs from then on) and says so: its
/// name, interface version, completion vectors and capabilities, and its port's netdev.
fn register_ib<'bound>(
    bound: &'bound pci::Device<Bound>,
    rox: &Arc<RoxDev<'bound>>,
) -> Result<IbRegistration<'bound, RoxVerbs>> {
    let dev = bound.as_ref();
    let ib = IbRegistration::register(
        bound,
        rox.clone(),
        &DeviceParams {
            name: c"rox_%d",
            node_guid: rox.attr.node_guid,
            num_comp_vectors: rox.num_comp_vectors(),
            mac: rox.mac,
        },
    )?;
    // `open_control` refused any other version.
    dev_info!(
        dev,
        "{}: rox-nic interface v{}, {} completion vectors, caps {:#x}\n",
        ib.name(),
        uapi::ROX_VERSION,
        rox.num_comp_vectors(),
        rox.attr.caps
    );
    match ib.ib().netdev(u32::from(admin::PORT_NUM)) {
        Some(n) => dev_info!(
            dev,
            "{}: port 1 on {} ({:02x?})\n",
            ib.name(),
            n.name(),
            rox.mac
        ),
        None => dev_warn!(
            dev,
            "{}: no netdev has MAC {:02x?} yet; port 1 is down\n",
            ib.name(),
            rox.mac
        ),
    }
    Ok(ib)
}
