// SPDX-License-Identifier: GPL-2.0
//! The admin queue: a command ring the driver writes and a completion ring the device writes
//! (`uapi/src/admin.rs`). One command is in flight at a time; the driver waits for its
//! completion by polling (commands are rare and off the data path).

use crate::hw::{
    regs,
    uapi::{
        admin::{
            self, AdminCmd, AdminCmdHdr, AdminCommand, AdminCpl, AdminPayload, AdminQuery,
            QueryAnswer, Result0Only, ResultWords,
        },
        queue::owner_for,
    },
    Regs,
};
use crate::ib::dma::DmaArray;
use crate::query_len::{self, BadLength};
use kernel::{
    device::{Bound, Device},
    new_mutex,
    prelude::*,
    sync::Mutex,
    time::{delay::fsleep, Delta},
    transmute::{AsBytes, FromBytes},
};

/// log2 of the admin ring depth (both rings).
const ADMIN_LOG_DEPTH: u32 = 6;
const _: () = assert!(
    ADMIN_LOG_DEPTH >= regs::ADMIN_LOG_DEPTH_MIN && ADMIN_LOG_DEPTH <= regs::ADMIN_LOG_DEPTH_MAX
);
/// First and longest wait between two looks at the completion ring.
const POLL_FIRST_US: i64 = 10;
const POLL_MAX_US: i64 = 1000;
/// Give up on a command after this long (the device answers in microseconds; its own socket
/// round trip is bounded by 5 s).
const TIMEOUT_US: i64 = 10_000_000;

struct AdminState {
    /// Free-running producer index of the command ring.
    producer: u32,
    next_cmd_id: u16,
    /// A command timed out: the rings may be out of step with the device, refuse further use.
    broken: bool,
}

pub(crate) struct AdminQueue {
    cmds: DmaArray<AdminCmd>,
    cpls: DmaArray<AdminCpl>,
    state: Pin<KBox<Mutex<AdminState>>>,
}

/// An errno for an admin status.
fn status_to_result(status: u8) -> Result {
    match status {
        admin::ADMIN_STATUS_SUCCESS => Ok(()),
        admin::ADMIN_STATUS_BAD_OPCODE => Err(EOPNOTSUPP),
        admin::ADMIN_STATUS_BAD_HANDLE
        | admin::ADMIN_STATUS_BAD_STATE
        | admin::ADMIN_STATUS_BAD_PARAM
        | admin::ADMIN_STATUS_BAD_DOORBELL => Err(EINVAL),
        admin::ADMIN_STATUS_NO_RESOURCES => Err(ENOMEM),
        admin::ADMIN_STATUS_BAD_DMA => Err(EFAULT),
        admin::ADMIN_STATUS_BUSY => Err(EBUSY),
        _ => Err(EIO),
    }
}

impl AdminQueue {
    /// Allocates the rings.
    pub(crate) fn new(dev: &Device<Bound>) -> Result<Self> {
        let depth = 1usize << ADMIN_LOG_DEPTH;
        Ok(Self {
            cmds: DmaArray::zeroed(dev, depth)?,
            cpls: DmaArray::zeroed(dev, depth)?,
            state: KBox::pin_init(
                new_mutex!(AdminState {
                    producer: 0,
                    next_cmd_id: 0,
                    broken: false
                }),
                GFP_KERNEL,
            )?,
        })
    }

    /// Whether a command got no completion in time (or one out of step): the device is reset
    /// and the queue refuses further use.
    pub(crate) fn is_broken(&self) -> bool {
        self.state.lock().broken
    }

    /// Hands the rings to the device and enables the queue (the device is freshly reset).
    pub(crate) fn enable(&self, regs: &Regs<'_>) -> Result {
        regs.write_addr(
            regs::REG_ADMIN_CMD_BASE_LO,
            regs::REG_ADMIN_CMD_BASE_HI,
            self.cmds.dma_address(),
        );
        regs.write_addr(
            regs::REG_ADMIN_CPL_BASE_LO,
            regs::REG_ADMIN_CPL_BASE_HI,
            self.cpls.dma_address(),
        );
        regs.write(regs::REG_ADMIN_LOG_DEPTH, ADMIN_LOG_DEPTH);
        regs.write(regs::REG_ADMIN_CTRL, regs::ADMIN_CTRL_ENABLE);
        if regs.read(regs::REG_STATUS) & regs::STATUS_ADMIN_ENABLED == 0 {
            pr_err!(
                "rox: admin queue not enabled (fatal code {})\n",
                regs.read(regs::REG_FATAL_CODE)
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Runs one typed command (`uapi::admin::AdminCommand`): `C`'s payload in, `C`'s result
    /// out, so an opcode, its payload and the meaning of its result words cannot disagree.
    pub(crate) fn run<C: AdminCommand>(
        &self,
        regs: &Regs<'_>,
        payload: C::Payload,
    ) -> Result<C::Result> {
        let cpl = self.exec(regs, C::OPCODE, C::payload(payload))?;
        Ok(C::Result::from_words(cpl.result0, cpl.result1))
    }

    /// Executes one command and returns its completion (status checked). When the queue breaks
    /// (no completion in time, or one out of step), the device is reset: the command may still
    /// run later, and the caller frees what it pointed at (a ring, a page list) on the error.
    fn exec(&self, regs: &Regs<'_>, opcode: u8, payload: AdminPayload) -> Result<AdminCpl> {
        let mut state = self.state.lock();
        if state.broken {
            return Err(EIO);
        }
        let depth = 1u32 << ADMIN_LOG_DEPTH;
        let index = state.producer;
        let slot = (index & (depth - 1)) as usize;
        let cmd_id = state.next_cmd_id;
        state.next_cmd_id = cmd_id.wrapping_add(1);
        let hdr = AdminCmdHdr {
            opcode,
            flags: 0,
            cmd_id,
            reserved: 0,
        };
        self.cmds.write(slot, AdminCmd { hdr, payload })?;
        state.producer = index.wrapping_add(1);
        // The MMIO write orders after the command's store to coherent memory.
        regs.write(regs::REG_ADMIN_DB, state.producer);

        let owner = owner_for(index, depth);
        let mut waited_us = 0;
        let mut step_us = POLL_FIRST_US;
        while self.cpls.read_owner(slot)? != owner {
            if waited_us >= TIMEOUT_US || regs.read(regs::REG_STATUS) & regs::STATUS_FATAL != 0 {
                state.broken = true;
                pr_err!(
                    "rox: admin command {:#x} got no completion (status {:#x}, fatal code {})\n",
                    opcode,
                    regs.read(regs::REG_STATUS),
                    regs.read(regs::REG_FATAL_CODE)
                );
                quiesce(regs);
                return Err(ETIMEDOUT);
            }
            fsleep(Delta::from_micros(step_us));
            waited_us += step_us;
            step_us = core::cmp::min(step_us * 2, POLL_MAX_US);
        }
        let cpl = self.cpls.read(slot)?;
        if cpl.cmd_id != cmd_id || cpl.opcode != opcode {
            state.broken = true;
            pr_err!(
                "rox: admin completion {:?} does not match command {}\n",
                cpl,
                cmd_id
            );
            quiesce(regs);
            return Err(EIO);
        }
        status_to_result(cpl.status)?;
        Ok(cpl)
    }

    /// Executes a query (`AdminQuery`): the command gives the device the length of the
    /// response buffer, the device writes a prefix of `C::Response` and answers how much; the
    /// rest of the response reads as zero (`query_len.rs`). EIO when it answers more than the
    /// buffer or less than `C::REQUIRED_LEN`. Returns the response and the query's own value
    /// (`result0`).
    pub(crate) fn query<C, R>(
        &self,
        dev: &Device<Bound>,
        regs: &Regs<'_>,
        index: u32,
    ) -> Result<(C::Response, R)>
    where
        C: AdminQuery<Result = QueryAnswer<R>>,
        C::Response: AsBytes + FromBytes,
        R: Result0Only,
    {
        let len = core::mem::size_of::<C::Response>();
        let resp = DmaArray::<C::Response>::zeroed(dev, 1)?;
        let cmd = admin::QueryCmd {
            index,
            resp_len: u32::try_from(len)?,
            resp_addr: resp.dma_address(),
        };
        let answer = self.run::<C>(regs, cmd)?;
        let written = match query_len::written_prefix(answer.written, C::REQUIRED_LEN, len) {
            Ok(written) => written,
            Err(BadLength::Over) => {
                pr_err!(
                    "rox: admin query {} answered {} bytes written into a buffer of {}\n",
                    C::NAME,
                    answer.written,
                    len
                );
                return Err(EIO);
            }
            Err(BadLength::Short) => {
                pr_err!(
                    "rox: admin query {} answered {} bytes written, fewer than the {} it reads\n",
                    C::NAME,
                    answer.written,
                    C::REQUIRED_LEN
                );
                return Err(EIO);
            }
        };
        let mut response = resp.read(0)?;
        query_len::keep_prefix(response.as_bytes_mut(), written);
        Ok((response, answer.value))
    }
}

/// How long a reset may take, and how often to look.
const RESET_TIMEOUT_US: i64 = 5_000_000;
const RESET_POLL_US: i64 = 1000;

/// Resets the device and waits until it is ready.
///
/// (Bring-up resets the device before enabling the admin queue; a broken queue resets it
/// too, see [`quiesce`].)
pub(crate) fn reset(regs: &Regs<'_>) -> Result {
    regs.write(regs::REG_RESET, regs::RESET_VALUE);
    let mut waited_us = 0;
    while regs.read(regs::REG_STATUS) & regs::STATUS_READY == 0 {
        if waited_us >= RESET_TIMEOUT_US {
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_micros(RESET_POLL_US));
        waited_us += RESET_POLL_US;
    }
    Ok(())
}

/// Makes a device whose admin queue broke, or whose bring-up failed after its admin queue was
/// enabled, forget every ring and object, so nothing it runs later can reach memory the driver
/// frees; a device that does not come back from the reset is logged. A broken queue's device
/// stays unusable (every command answers EIO) until the driver is bound again. Returns once
/// the reset is over (`STATUS_READY`), so the caller (e.g. the mmu notifier after a failed ODP
/// unmap) knows the device no longer uses any page.
pub(crate) fn quiesce(regs: &Regs<'_>) {
    if reset(regs).is_err() {
        pr_err!("rox: device did not come back from a reset\n");
    }
}
