// SPDX-License-Identifier: GPL-2.0
/*
 * rox_kverbs_test: kernel verbs through rox.ko, between rox_0 and rox_1 (two rox NICs of one
 * guest on one bridge; each side may also be the same device: module parameter peer=rox_0).
 *
 * Loaded after rox.ko by tests/guest/t-driver-kverbs.sh. It registers an ib_client, takes the
 * two devices, runs every check at load time, prints one "ok"/"FAIL" line per check and then
 * "rox_kverbs: result: N passed, M failed". A setup step that fails and cuts a check short
 * (a buffer, PD, MR or QP pair it needs) counts as a failure of its own (SETUP_FAILED), and
 * t-driver-kverbs.sh also requires N to be the full number of checks. The module stays loaded
 * until rmmod (nothing of it is left on the devices by then).
 *
 * Checks: device attributes; RC SEND/RECV with inline data and immediate; more RC SENDs than
 * the port's flight in several doorbells, the later ones waking no idle device (kverbs_flight.c),
 * then every completion and byte once the receiver comes up; fast registration
 * (ib_alloc_mr, ib_map_mr_sg, IB_WR_REG_MR) then RDMA WRITE/READ through the new rkey from the
 * peer; atomics; LOCAL_INV then the old rkey fails; SEND_WITH_INV invalidates (and the receive
 * says so); ib_inc_rkey re-registration; kernel SRQ receive and its limit event; zero-depth
 * RC/UC/UD QPs on both devices (creation, caps, ENOMEM when posting to the empty side, a SEND
 * from a send-only to a receive-only QP); a CQ per ib_cq poll context with ib_drain_qp; bad
 * input: a page list beyond the MR's capacity, a REG_MR whose pages do not cover its length,
 * LOCAL_INV of another PD's key, SEND_WITH_INV of an unknown or foreign rkey -> error
 * completions, with a guard pattern around every target buffer that must stay intact.
 */
#include "rox_kverbs_test.h"

char *peer = "rox_1"; /* side B's device name, printed by the checks */
module_param(peer, charp, 0444);
MODULE_PARM_DESC(peer, "ib device of side B (side A is rox_0)");
static bool hang;
module_param(hang, bool, 0444);
MODULE_PARM_DESC(hang, "only the hung-device check: WRs in flight on rox_0, whose device the "
		       "runner makes hang (tests/guest/t-z-driver-hung-device.sh)");

int passed, failed;

static struct ib_device *dev_a, *dev_b;

static int add_one(struct ib_device *dev)
{
	if (!strcmp(dev_name(&dev->dev), "rox_0") && !dev_a)
		dev_a = dev;
	if (!strcmp(dev_name(&dev->dev), peer) && !dev_b)
		dev_b = dev;
	return 0;
}

static void remove_one(struct ib_device *dev, void *data)
{
	if (dev == dev_a)
		dev_a = NULL;
	if (dev == dev_b)
		dev_b = NULL;
}

static struct ib_client client = {
	.name = "rox_kverbs_test",
	.add = add_one,
	.remove = remove_one,
};

static int __init rox_kverbs_init(void)
{
	struct side a = {}, b = {};
	int ret;

	ret = ib_register_client(&client);
	if (ret)
		return ret;
	if (!dev_a || !dev_b) {
		pr_info(PFX "FAIL rox_0 and %s not both present\n", peer);
		pr_info(PFX "result: 0 passed, 1 failed\n");
		return 0;
	}
	ret = side_init(&a, dev_a);
	if (!ret)
		ret = side_init(&b, dev_b);
	if (ret) {
		pr_info(PFX "FAIL setup (PD, CQ, IPv4 RoCEv2 GID) of rox_0 / %s: %d\n", peer, ret);
		failed++;
		goto out;
	}
	pr_info(PFX "rox_0 GID index %d %pI6, %s GID index %d %pI6\n", a.gid_index, a.gid.raw,
		peer, b.gid_index, b.gid.raw);
	if (hang) {
		check_hung_device(&a, &b);
		goto out;
	}
	check_attrs(&a);
	check_send_inline(&a, &b);
	check_full_flight(&a, &b);
	check_fast_reg(&a, &b);
	check_srq(&a, &b);
	check_reset_reuse(&a, &b);
	check_zero_depth(&a, &b);
	check_poll_ctx(&a, &b, IB_POLL_DIRECT, "direct", 0);
	check_poll_ctx(&a, &b, IB_POLL_SOFTIRQ, "softirq", 1);
	check_poll_ctx(&a, &b, IB_POLL_WORKQUEUE, "workqueue", 0);
	check_poll_ctx(&a, &b, IB_POLL_UNBOUND_WORKQUEUE, "unbound-workqueue", 1);
	check_bad_input(&a, &b);
out:
	side_fini(&a);
	side_fini(&b);
	pr_info(PFX "result: %d passed, %d failed\n", passed, failed);
	return 0;
}

static void __exit rox_kverbs_exit(void)
{
	ib_unregister_client(&client);
}

module_init(rox_kverbs_init);
module_exit(rox_kverbs_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("rox kernel verbs test (tests/kernel)");
