//! The admin queue's transport: where its rings are, fetching commands, posting completions
//! (what a command does is `device::admin`'s).

use super::*;
use crate::device::admin_fault::Injected;

/// The admin queue software enabled: its command and completion rings and the next command.
pub(super) struct AdminQueue {
    cmd_base: u64,
    cpl_base: u64,
    depth: u32,
    ci: u32,
}

impl DataPath {
    pub(super) fn admin_enable(&mut self, cmd_base: u64, cpl_base: u64, log_depth: u32) {
        if !(ADMIN_LOG_DEPTH_MIN..=ADMIN_LOG_DEPTH_MAX).contains(&log_depth) {
            self.hw.set_fatal(FATAL_ADMIN_CONFIG);
            return;
        }
        let depth = 1u32 << log_depth;
        let mem = self.shared.mem();
        if mem
            .check(cmd_base, (depth as usize * ADMIN_CMD_SIZE) as u64)
            .is_err()
            || mem
                .check(cpl_base, (depth as usize * ADMIN_CPL_SIZE) as u64)
                .is_err()
        {
            self.hw.set_fatal(FATAL_ADMIN_DMA);
            return;
        }
        self.admin_faults.reload();
        self.admin = Some(AdminQueue {
            cmd_base,
            cpl_base,
            depth,
            ci: 0,
        });
        self.admin_pi = 0;
    }

    pub(super) fn run_admin(&mut self) -> bool {
        let Some(aq) = &self.admin else { return false };
        match posted_entries(self.admin_pi, aq.ci, aq.depth) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(WildIndex) => {
                self.hw.set_fatal(FATAL_ADMIN_DOORBELL);
                return true;
            }
        }
        let (cmd_base, cpl_base, depth, mut ci) = (aq.cmd_base, aq.cpl_base, aq.depth, aq.ci);
        while ci != self.admin_pi {
            let idx = ci & (depth - 1);
            let cmd: AdminCmd = match self
                .hw
                .mem
                .read_obj(cmd_base + (idx as u64) * ADMIN_CMD_SIZE as u64)
            {
                Ok(c) => c,
                Err(_) => {
                    self.hw.set_fatal(FATAL_ADMIN_DMA);
                    return true;
                }
            };
            let mut cpl = match self.admin_faults.take(cmd.hdr.opcode) {
                Some(Injected::Refuse(status)) => refused(&cmd, status),
                Some(Injected::Written(bytes)) => {
                    let mut cpl = execute(&mut self.hw, &mut self.engine, &cmd);
                    if cpl.status == ADMIN_STATUS_SUCCESS {
                        // A query's result1 is the bytes of response it wrote (`QueryAnswer`).
                        cpl.result1 = bytes;
                    }
                    cpl
                }
                None => execute(&mut self.hw, &mut self.engine, &cmd),
            };
            cpl.owner = owner_for(ci, depth);
            if self
                .hw
                .mem
                .write_entry_owner_last(cpl_base + (idx as u64) * ADMIN_CPL_SIZE as u64, &cpl)
                .is_err()
            {
                self.hw.set_fatal(FATAL_ADMIN_DMA);
                return true;
            }
            ci = ci.wrapping_add(1);
            if let Some(aq) = &mut self.admin {
                aq.ci = ci;
            }
            self.hw.post_event(EQ_ADMIN_ASYNC, EQE_TYPE_ADMIN, idx, 0);
            self.run_deferred();
        }
        true
    }
}

/// The completion of a command an injected fault refuses (`admin_fault`): its status, zero
/// result words, nothing run.
fn refused(cmd: &AdminCmd, status: u8) -> AdminCpl {
    AdminCpl {
        cmd_id: cmd.hdr.cmd_id,
        status,
        opcode: cmd.hdr.opcode,
        ..Default::default()
    }
}
