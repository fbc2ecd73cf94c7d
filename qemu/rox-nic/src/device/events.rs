//! Event and completion queues as the device fills them: EQEs and CQEs written entry body
//! first, then the owner byte with a release store; CQ arming; interrupts; the fatal state.

use std::sync::atomic::Ordering;

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use super::state::{Cq, Hw};
use crate::sys::fd::signal_irq;

impl Hw {
    pub fn fire_vector(&mut self, vector: u32) {
        let irqs = self.shared.irqs.lock().expect("irq lock");
        if let Some(Some(f)) = irqs.get(vector as usize) {
            self.shared.wqe_trace.interrupt(vector);
            signal_irq(f);
            self.stats[STAT_INTERRUPTS] += 1;
        }
    }

    /// Enter the fatal state: the driver sees STATUS_FATAL and must reset.
    pub fn set_fatal(&mut self, code: u32) {
        if self.shared.is_fatal() {
            return;
        }
        log::error!("rox-nic: fatal error code {code}");
        self.shared.fatal_code.store(code, Ordering::Release);
        self.shared.status.fetch_or(STATUS_FATAL, Ordering::AcqRel);
        if code != FATAL_EQ_DMA && code != FATAL_EQ_OVERFLOW {
            self.post_event_raw(EQ_ADMIN_ASYNC, EQE_TYPE_DEVICE_FATAL, 0, code);
        }
        // Vector 0 fires even if EQ 0 is unusable so the driver looks at STATUS.
        self.fire_vector(EQ_ADMIN_ASYNC);
    }

    /// Write one EQE to EQ `eqn` and interrupt if the EQ is armed.
    pub fn post_event(&mut self, eqn: u32, event_type: u8, handle: u32, aux: u32) {
        if self.shared.is_fatal() {
            return;
        }
        self.post_event_raw(eqn, event_type, handle, aux);
    }

    fn post_event_raw(&mut self, eqn: u32, event_type: u8, handle: u32, aux: u32) {
        self.post_eqe_raw(
            eqn,
            Eqe {
                event_type,
                handle,
                aux,
                ..Default::default()
            },
        );
    }

    /// Posts `eqe` (its owner bit is set here) to EQ `eqn`, unless the device is fatal.
    pub fn post_eqe(&mut self, eqn: u32, eqe: Eqe) {
        if self.shared.is_fatal() {
            return;
        }
        self.post_eqe_raw(eqn, eqe);
    }

    fn post_eqe_raw(&mut self, eqn: u32, eqe: Eqe) {
        let Some(Some(eq)) = self.eqs.get_mut(eqn as usize) else {
            return;
        };
        let used = eq.pi.wrapping_sub(eq.ci) & EQ_DB_CI_MASK;
        if used >= eq.depth {
            self.set_fatal(FATAL_EQ_OVERFLOW);
            return;
        }
        let eqe = Eqe {
            owner: owner_for(eq.pi, eq.depth),
            ..eqe
        };
        let addr = eq.base + (((eq.pi & (eq.depth - 1)) as u64) << EQE_SHIFT);
        if self.mem.write_entry_owner_last(addr, &eqe).is_err() {
            self.set_fatal(FATAL_EQ_DMA);
            return;
        }
        eq.pi = eq.pi.wrapping_add(1);
        self.shared.wqe_trace.eqe(eqn, eqe.event_type, eqe.handle);
        let fire = std::mem::take(&mut eq.armed);
        self.stats[STAT_EQES] += 1;
        if fire {
            self.fire_vector(eqn);
        }
    }

    /// Driver wrote an EQ doorbell.
    pub fn eq_doorbell(&mut self, eqn: u32, value: u32) {
        let Some(Some(eq)) = self.eqs.get_mut(eqn as usize) else {
            return;
        };
        let db = EqDoorbell::from_bits(value);
        eq.ci = db.ci;
        if db.arm {
            if (eq.pi & EQ_DB_CI_MASK) != eq.ci {
                eq.armed = false;
                self.fire_vector(eqn);
            } else {
                eq.armed = true;
            }
        }
    }

    pub fn async_event(&mut self, event_type: u8, handle: u32, aux: u32) {
        self.post_event(EQ_ADMIN_ASYNC, event_type, handle, aux);
    }

    /// Write a CQE to CQ `cq_id`; handles overflow, arming and the completion event.
    pub fn write_cqe(&mut self, cq_id: u32, mut cqe: Cqe, solicited: bool) {
        let Some(cq) = self.cqs.get_mut(&cq_id) else {
            return;
        };
        if cq.error {
            return;
        }
        let slot = self.shared.doorbells.slot(cq.db_page, cq.db_slot);
        if cq.pi.wrapping_sub(slot.a) >= cq.ring.depth {
            cq.error = true;
            self.async_event(EQE_TYPE_CQ_ERROR, cq_id, 0);
            return;
        }
        cqe.owner = owner_for(cq.pi, cq.ring.depth);
        if self
            .mem
            .write_entry_owner_last(cq.ring.entry_addr(cq.pi), &cqe)
            .is_err()
        {
            cq.error = true;
            self.async_event(EQE_TYPE_CQ_ERROR, cq_id, VENDOR_ERR_BAD_DMA as u32);
            return;
        }
        cq.pi = cq.pi.wrapping_add(1);
        self.stats[STAT_CQES] += 1;
        self.shared
            .wqe_trace
            .cqe(cqe.qp_num.get(), cq_id, cqe.wr_id, cqe.status, cqe.opcode);
        Self::update_arm(cq, slot.b);
        let trigger = match cq.armed {
            CQ_ARM_NEXT => true,
            CQ_ARM_SOLICITED => solicited || cqe.status != WC_SUCCESS,
            _ => false,
        };
        if trigger {
            cq.armed = 0;
            let eqn = cq.eqn;
            self.post_event(eqn, EQE_TYPE_COMPLETION, cq_id, 0);
        }
    }

    /// Pick up a new arm request from the CQ's arm word.
    pub fn update_arm(cq: &mut Cq, word: u32) {
        let arm = CqArm::from_bits(word);
        if arm.seq != cq.arm_seq {
            cq.arm_seq = arm.seq;
            cq.armed = arm.arm_type;
        }
    }
}
