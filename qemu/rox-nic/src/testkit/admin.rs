//! Admin commands of the test driver: submit and wait, and one helper per object family.

use super::*;

impl TestDriver {
    /// Submit one command and wait for its completion.
    pub fn admin(&mut self, opcode: u8, payload: AdminPayload) -> AdminCpl {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1);
        let cmd = AdminCmd {
            hdr: AdminCmdHdr {
                opcode,
                cmd_id: id,
                ..Default::default()
            },
            payload,
        };
        let idx = self.admin_pi & (self.admin_cpl.depth - 1);
        self.ram
            .write_obj(self.admin_cmd + idx as u64 * ADMIN_CMD_SIZE as u64, &cmd);
        self.admin_pi = self.admin_pi.wrapping_add(1);
        fence(Ordering::SeqCst);
        self.write_reg(REG_ADMIN_DB, self.admin_pi);
        let start = Instant::now();
        while !self.admin_cpl.ready(&self.ram) {
            assert!(
                start.elapsed() < TIMEOUT,
                "admin command {opcode:#x} timed out"
            );
            assert!(
                self.read_reg(REG_STATUS) & STATUS_FATAL == 0 || self.admin_cpl.ready(&self.ram),
                "device fatal"
            );
            std::thread::yield_now();
        }
        let cpl: AdminCpl = self.ram.read_obj(self.admin_cpl.addr(self.admin_cpl.ci));
        self.admin_cpl.ci = self.admin_cpl.ci.wrapping_add(1);
        assert_eq!(cpl.cmd_id, id);
        cpl
    }

    pub fn admin_ok(&mut self, opcode: u8, p: AdminPayload) -> AdminCpl {
        let cpl = self.admin(opcode, p);
        assert_eq!(
            cpl.status, ADMIN_STATUS_SUCCESS,
            "admin opcode {opcode:#x} failed"
        );
        cpl
    }

    /// Runs admin command `C`, which must succeed; answers its typed result (the `MrKeys` of
    /// a REG_MR, the `Key` of an ALLOC_MW, the `Qpn` of a CREATE_QP, ...).
    pub fn run<C: AdminCommand>(&mut self, p: C::Payload) -> C::Result {
        let cpl = self.admin_ok(C::OPCODE, C::payload(p));
        C::Result::from_words(cpl.result0, cpl.result1)
    }

    pub fn set_gid(&mut self, index: u32, gid: [u8; 16]) {
        let c = SetGidCmd {
            index,
            gid_type: GID_TYPE_ROCE_UDP_ENCAP,
            valid: 1,
            gid,
            ..Default::default()
        };
        self.admin_ok(ADMIN_OP_SET_GID, payload(&c));
    }

    /// A level-1 page list of 4 KiB pages covering `[addr, addr+len)` (addr page aligned).
    pub fn page_list(&mut self, addr: u64, len: u64) -> PageList {
        let first = addr & !(ROX_PAGE_SIZE as u64 - 1);
        let npages = (addr + len - first).div_ceil(ROX_PAGE_SIZE as u64).max(1);
        let list = self.ram.alloc(npages * 8, ROX_PAGE_SIZE as u64);
        for i in 0..npages {
            self.ram.write(
                list + i * 8,
                &(first + i * ROX_PAGE_SIZE as u64).to_le_bytes(),
            );
        }
        PageList {
            addr: list,
            npages: npages as u32,
            page_shift: ROX_PAGE_SHIFT as u8,
            level: PBL_LEVEL_1,
            reserved: 0,
        }
    }

    pub fn reg_mr_cmd(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> RegMrCmd {
        let pbl = self.page_list(addr, len);
        RegMrCmd {
            pd,
            access,
            iova: addr,
            length: len,
            pbl,
            offset_in_first_page: (addr & (ROX_PAGE_SIZE as u64 - 1)) as u32,
            flags: 0,
        }
    }

    /// Register `[addr, addr+len)` with iova = addr; returns the key or the admin status.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Result<Key, u8> {
        let c = self.reg_mr_cmd(pd, addr, len, access);
        let cpl = self.admin(ADMIN_OP_REG_MR, payload(&c));
        if cpl.status == ADMIN_STATUS_SUCCESS {
            Ok(MrKeys::from_words(cpl.result0, cpl.result1).lkey)
        } else {
            Err(cpl.status)
        }
    }

    /// Registers guest-physical `[addr, addr + len)` in `pd` with `access` (MR_FLAG_PHYSICAL:
    /// the iova is the address itself): its rkey.
    pub fn reg_physical(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Key {
        let c = RegMrCmd {
            pd,
            access,
            iova: addr,
            length: len,
            flags: MR_FLAG_PHYSICAL,
            ..Default::default()
        };
        self.run::<RegMr>(c).rkey
    }

    /// A page-aligned buffer of `len` bytes in the test RAM, registered in `pd` with `access`:
    /// its address and key.
    pub fn buffer(&mut self, pd: u32, len: u64, access: u32) -> (u64, Key) {
        let addr = self.ram.alloc(len, ROX_PAGE_SIZE as u64);
        let key = self
            .reg_mr(pd, addr, len, access)
            .expect("register a test buffer");
        (addr, key)
    }

    pub fn alloc_slot(&mut self) -> u32 {
        let s = self.next_slot;
        self.next_slot += 1;
        s
    }

    /// Guest memory for a ring of `1 << log_depth` entries of `entry_size` bytes: its depth,
    /// base address and page list.
    fn alloc_ring(&mut self, log_depth: u8, entry_size: usize) -> (u32, u64, PageList) {
        let depth = 1u32 << log_depth;
        let bytes = depth as u64 * entry_size as u64;
        let base = self.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
        (depth, base, self.page_list(base, bytes))
    }

    pub fn create_cq(&mut self, log_depth: u8) -> TestCq {
        let (depth, base, ring) = self.alloc_ring(log_depth, CQE_SIZE);
        let db_slot = self.alloc_slot();
        let c = CreateCqCmd {
            ring,
            log_depth,
            eqn: COMP_EQ,
            db_page: TEST_DB_PAGE,
            db_slot,
            ..Default::default()
        };
        let cpl = self.admin_ok(ADMIN_OP_CREATE_CQ, payload(&c));
        TestCq {
            id: cpl.result0,
            ring: OwnerRing {
                base,
                depth,
                entry_size: CQE_SIZE as u64,
                ci: 0,
            },
            db_slot,
            arm_seq: 0,
        }
    }

    pub fn create_srq(&mut self, pd: u32, log_depth: u8, limit: u32) -> TestSrq {
        let (depth, base, ring) = self.alloc_ring(log_depth, RQ_WQE_SIZE);
        let db_slot = self.alloc_slot();
        let c = CreateSrqCmd {
            pd,
            log_depth,
            limit,
            db_page: TEST_DB_PAGE,
            db_slot,
            ring,
            ..Default::default()
        };
        let cpl = self.admin_ok(ADMIN_OP_CREATE_SRQ, payload(&c));
        TestSrq {
            id: cpl.result0,
            ring: base,
            depth,
            pi: 0,
            db_slot,
        }
    }

    /// Build (but do not submit) a create-QP command with fresh rings.
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_cmd(
        &mut self,
        qp_type: u8,
        pd: u32,
        scq: u32,
        rcq: u32,
        srq: u32,
        log_sq: u8,
        log_rq: u8,
    ) -> (CreateQpCmd, TestQp) {
        let sq_bytes = (1u64 << log_sq) * SQ_WQE_SIZE as u64;
        let rq_bytes = (1u64 << log_rq) * RQ_WQE_SIZE as u64;
        let sq = self.ram.alloc(sq_bytes, ROX_PAGE_SIZE as u64);
        let rq = self.ram.alloc(rq_bytes, ROX_PAGE_SIZE as u64);
        let sq_pl = self.page_list(sq, sq_bytes);
        let rq_pl = self.page_list(rq, rq_bytes);
        let db_slot = self.alloc_slot();
        let c = CreateQpCmd {
            qp_type,
            sq_sig_all: 0,
            log_sq_depth: log_sq,
            log_rq_depth: log_rq,
            pd,
            send_cq: scq,
            recv_cq: rcq,
            srq,
            db_page: TEST_DB_PAGE,
            db_slot,
            sq: sq_pl,
            rq: rq_pl,
            ..Default::default()
        };
        let qp = TestQp {
            qpn: Qpn::default(),
            qp_type,
            pd,
            sq,
            sq_depth: 1 << log_sq,
            sq_pi: 0,
            rq,
            rq_depth: 1 << log_rq,
            rq_pi: 0,
            db_slot,
        };
        (c, qp)
    }

    pub fn create_qp(&mut self, qp_type: u8, pd: u32, scq: u32, rcq: u32, srq: u32) -> TestQp {
        let (c, mut qp) = self.create_qp_cmd(qp_type, pd, scq, rcq, srq, 8, 8);
        qp.qpn = self.run::<CreateQp>(c);
        qp
    }

    pub fn modify_qp(&mut self, qpn: Qpn, attr_mask: u32, attr: QpAttr) -> AdminCpl {
        self.admin(
            ADMIN_OP_MODIFY_QP,
            payload(&ModifyQpCmd {
                qpn,
                attr_mask,
                attr,
            }),
        )
    }

    /// Moves QP `qpn` to `state` (no other attribute): the command's status.
    pub fn modify_qp_state(&mut self, qpn: Qpn, state: u8) -> u8 {
        let attr = QpAttr {
            qp_state: state,
            ..Default::default()
        };
        self.modify_qp(qpn, QP_STATE, attr).status
    }

    /// Arms the limit of SRQ `srq` at `limit` WQEs (MODIFY_SRQ with `SRQ_ATTR_LIMIT`).
    pub fn arm_srq_limit(&mut self, srq: u32, limit: u32) {
        let m = ModifySrqCmd {
            srq,
            attr_mask: SRQ_ATTR_LIMIT,
            limit,
            ..Default::default()
        };
        self.admin_ok(ADMIN_OP_MODIFY_SRQ, payload(&m));
    }

    /// Runs query `opcode` of `index` (a QPN, a port, or 0) into a fresh page of the test RAM
    /// (`resp_len` a page): its completion and the page's address.
    pub fn query(&mut self, opcode: u8, index: u32) -> (AdminCpl, u64) {
        let resp = self.ram.alloc(ROX_PAGE_SIZE as u64, ROX_PAGE_SIZE as u64);
        (self.admin(opcode, page_query(index, resp)), resp)
    }

    /// Query `opcode` of `index`, which must succeed and write a whole `T`.
    fn query_ok<T: Pod>(&mut self, opcode: u8, index: u32) -> T {
        let (cpl, resp) = self.query(opcode, index);
        assert_eq!(
            cpl.status, ADMIN_STATUS_SUCCESS,
            "query {opcode:#x} of {index}"
        );
        assert_eq!(cpl.result1 as usize, size_of::<T>(), "bytes written");
        self.ram.read_obj(resp)
    }

    /// QUERY_PORT of the device's one port.
    pub fn query_port(&mut self) -> PortAttr {
        self.query_ok(ADMIN_OP_QUERY_PORT, PORT_NUM as u32)
    }

    pub fn query_qp(&mut self, qpn: Qpn) -> QpAttr {
        self.query_ok(ADMIN_OP_QUERY_QP, qpn.get())
    }

    /// QUERY_STATS: every counter the device has.
    pub fn query_stats(&mut self) -> Vec<u64> {
        let (cpl, resp) = self.query(ADMIN_OP_QUERY_STATS, 0);
        assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "QUERY_STATS");
        assert_eq!(cpl.result1, cpl.result0 * 8, "a page holds every counter");
        // uapi's layout: the counters the device has, out of `Stats`.
        let stats: Stats = from_bytes(&self.ram.read(resp, cpl.result1 as usize));
        stats[..cpl.result0 as usize].to_vec()
    }

    /// QUERY_STATS once counter `counter` has reached `at_least`, polled every few
    /// milliseconds (each look takes a page of the test RAM); fails the test after
    /// [`TIMEOUT`], naming the port's receive counters (where a frame that never counted went).
    pub fn wait_stat(&mut self, counter: usize, at_least: u64) -> Vec<u64> {
        let give_up = Instant::now() + TIMEOUT;
        loop {
            let s = self.query_stats();
            if s[counter] >= at_least {
                return s;
            }
            assert!(
                Instant::now() < give_up,
                "counter {counter} stayed at {} (wanted {at_least}); port: {} frames received, \
                 dropped {} malformed, {} oversize, {} to another MAC",
                s[counter],
                s[STAT_PORT_RX_FRAMES],
                s[STAT_PORT_DROP_MALFORMED],
                s[STAT_PORT_DROP_OVERSIZE],
                s[STAT_PORT_DROP_OTHER_MAC]
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// QUERY_COUNTERS of `port`: its counters, or the status the device refused it with.
    pub fn query_counters(&mut self, port: u32) -> Result<PortCounters, u8> {
        let (cpl, resp) = self.query(ADMIN_OP_QUERY_COUNTERS, port);
        if cpl.status != ADMIN_STATUS_SUCCESS {
            return Err(cpl.status);
        }
        assert_eq!(cpl.result0 as usize, size_of::<PortCounters>());
        assert_eq!(cpl.result1, cpl.result0, "bytes written");
        Ok(self.ram.read_obj(resp))
    }

    /// The counters of the device's one port.
    pub fn port_counters(&mut self) -> PortCounters {
        self.query_counters(u32::from(PORT_NUM))
            .unwrap_or_else(|status| panic!("QUERY_COUNTERS refused: status {status}"))
    }

    /// RESET -> INIT -> RTR -> RTS for an RC/UC QP towards (dgid, dest_qpn), with
    /// [`ConnectParams::default`].
    pub fn connect(&mut self, qp: &TestQp, dgid: [u8; 16], dest_qpn: Qpn, access: u32) {
        self.connect_with(qp, dgid, dest_qpn, access, &ConnectParams::default())
    }

    /// [`TestDriver::connect`] with a chosen path MTU (`MTU_*`).
    pub fn connect_mtu(
        &mut self,
        qp: &TestQp,
        dgid: [u8; 16],
        dest_qpn: Qpn,
        access: u32,
        mtu: u8,
    ) {
        self.connect_with(
            qp,
            dgid,
            dest_qpn,
            access,
            &ConnectParams {
                mtu,
                ..Default::default()
            },
        )
    }

    /// [`TestDriver::connect`] with explicit transport parameters.
    pub fn connect_with(
        &mut self,
        qp: &TestQp,
        dgid: [u8; 16],
        dest_qpn: Qpn,
        access: u32,
        p: &ConnectParams,
    ) {
        let mtu = p.mtu;
        let mut a = QpAttr {
            qp_state: QPS_INIT,
            port_num: admin_port(),
            qp_access_flags: access,
            ..Default::default()
        };
        let rc = qp.qp_type == QPT_RC;
        let cpl = self.modify_qp(
            qp.qpn,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            a,
        );
        assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "to INIT");
        a.qp_state = QPS_RTR;
        a.path_mtu = mtu;
        a.dest_qp_num = dest_qpn;
        a.rq_psn = Psn::default();
        a.ah.dgid = dgid;
        a.ah.dmac = p.dmac.unwrap_or_else(|| test_mac(&dgid));
        a.ah.hop_limit = 64;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = p.min_rnr_timer;
        let mut m = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
        if rc {
            m |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
        }
        assert_eq!(
            self.modify_qp(qp.qpn, m, a).status,
            ADMIN_STATUS_SUCCESS,
            "to RTR"
        );
        a.qp_state = QPS_RTS;
        a.sq_psn = Psn::default();
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = 4;
        let mut m = QP_STATE | QP_SQ_PSN;
        if rc {
            m |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
        }
        assert_eq!(
            self.modify_qp(qp.qpn, m, a).status,
            ADMIN_STATUS_SUCCESS,
            "to RTS"
        );
    }

    /// Two QPs of `qp_type` in `pd`, each with its own CQ of 2^`log_cq` entries, ready to talk
    /// over GID 0 (127.0.0.1): RC/UC connected to each other with `access`, UD activated with
    /// [`PAIR_QKEY`]. Returns (cq_a, cq_b, a, b).
    pub fn qp_pair(
        &mut self,
        qp_type: u8,
        pd: u32,
        log_cq: u8,
        access: u32,
    ) -> (TestCq, TestCq, TestQp, TestQp) {
        let gid = gid_v4(127, 0, 0, 1);
        self.set_gid(0, gid);
        let cq_a = self.create_cq(log_cq);
        let cq_b = self.create_cq(log_cq);
        let a = self.create_qp(qp_type, pd, cq_a.id, cq_a.id, SRQ_NONE);
        let b = self.create_qp(qp_type, pd, cq_b.id, cq_b.id, SRQ_NONE);
        if qp_type == QPT_UD {
            self.activate_ud(&a, PAIR_QKEY);
            self.activate_ud(&b, PAIR_QKEY);
        } else {
            self.connect(&a, gid, b.qpn, access);
            self.connect(&b, gid, a.qpn, access);
        }
        (cq_a, cq_b, a, b)
    }

    /// One RC QP in `pd` connected to itself over GID 0 (127.0.0.1) with `access`, on its own
    /// CQ of 2^`log_cq` entries: (cq, qp).
    pub fn self_connected_rc(&mut self, pd: u32, log_cq: u8, access: u32) -> (TestCq, TestQp) {
        let gid = gid_v4(127, 0, 0, 1);
        self.set_gid(0, gid);
        let cq = self.create_cq(log_cq);
        let qp = self.create_qp(QPT_RC, pd, cq.id, cq.id, SRQ_NONE);
        self.connect(&qp, gid, qp.qpn, access);
        (cq, qp)
    }

    /// RESET -> INIT -> RTR -> RTS for a UD QP.
    pub fn activate_ud(&mut self, qp: &TestQp, qkey: u32) {
        let mut a = QpAttr {
            qp_state: QPS_INIT,
            port_num: admin_port(),
            qkey,
            ..Default::default()
        };
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY, a)
                .status,
            ADMIN_STATUS_SUCCESS
        );
        a.qp_state = QPS_RTR;
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE, a).status,
            ADMIN_STATUS_SUCCESS
        );
        a.qp_state = QPS_RTS;
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE | QP_SQ_PSN, a).status,
            ADMIN_STATUS_SUCCESS
        );
    }
}
