// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The CM ID state libfabric's verbs XRC initiator path meets (guest; built and run by
 * t-provider-libfabric.sh): `xrc-cm-qp DEVICE GID_INDEX` (the GID index is unused; the
 * argument convention of run_on_rox_0_and_rxe).
 *
 * libfabric 2.1's vrb_sched_ini_conn() (prov/verbs/src/verbs_domain_xrc.c) calls
 * vrb_create_ep() (verbs_init.c), which since libfabric commit d6d1ca3cf (v1.21.0, "Async
 * route resolution and non-blocking EP creation") only calls rdma_create_id(NULL, ..,
 * RDMA_PS_TCP) and no longer rdma_resolve_addr(); vrb_create_ini_qp() then calls
 * rdma_create_qp_ex() with the domain's PD (allocated on a context from rdma_get_devices()).
 * librdmacm 56.1's rdma_create_qp_ex() (librdmacm/cma.c) refuses a PD whose context is not
 * id->verbs with EINVAL, and id->verbs is set only when an address is bound or resolved
 * (ucma_get_device()). This program does that sequence on DEVICE and prints id->verbs at
 * each step:
 *   1. every rdma_get_devices() context's node GUID: DEVICE's must be non-zero. librdmacm
 *      finds the device of a bound ID by node GUID and the kernel's ibdev index (match() in
 *      cma.c), so devices sharing a GUID are printed, not refused: an rdma_rxe device on
 *      DEVICE's netdev derives the same GUID from the same MAC;
 *   2. libfabric 2.1's sequence, rdma_create_id then rdma_create_qp_ex (XRC_SEND where the
 *      device reports IBV_DEVICE_XRC, else RC): id->verbs is NULL and the call fails with
 *      EINVAL before reaching the device;
 *   3. the same ID after a synchronous rdma_resolve_addr (DEVICE's IPv4 address to itself),
 *      what vrb_create_ep did up to libfabric 1.20: id->verbs is DEVICE's rdma_get_devices()
 *      context, the same pointer the PD was allocated on, and the same rdma_create_qp_ex
 *      creates the QP. The CM binds the first device with a GID on the address's netdev, so
 *      the bound device is checked by name: if it is not DEVICE (an rdma_rxe registered
 *      first on the same netdev) the run fails saying so instead of testing that device.
 * Exit 0 when all three hold, 1 otherwise.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>

/* The attributes libfabric 2.1 gives its XRC initiator QP (vrb_msg_ep_get_qp_attr defaults:
 * FI_VERBS_TX_SIZE 384 is capped by ofi_rxm; the values seen in its debug log). */
#define SEND_WR 128
#define SEND_SGE 4
#define INLINE_BYTES 192
#define RESOLVE_TIMEOUT_MS 2000

static int failures;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failures++;
}

static const char *ctx_name(struct ibv_context *ctx)
{
	return ctx ? ibv_get_device_name(ctx->device) : "(null)";
}

/* DEVICE's context among rdma_get_devices()' (libfabric's domain takes its context there);
 * prints every device's node GUID and checks DEVICE's is non-zero. */
static struct ibv_context *device_context(const char *name)
{
	struct ibv_context **list, *found = NULL;
	__be64 guids[64], mine = 0;
	int n, i;

	list = rdma_get_devices(&n);
	if (!list) {
		perror("rdma_get_devices");
		return NULL;
	}
	for (i = 0; i < n && i < 64; i++) {
		struct ibv_device_attr attr;

		if (ibv_query_device(list[i], &attr)) {
			perror("ibv_query_device");
			guids[i] = 0;
			continue;
		}
		guids[i] = attr.node_guid;
		printf("rdma_get_devices[%d]: %s node_guid %016llx context %p\n", i, ctx_name(list[i]),
		       (unsigned long long)be64toh(attr.node_guid), (void *)list[i]);
		if (!strcmp(ctx_name(list[i]), name)) {
			found = list[i];
			mine = attr.node_guid;
		}
	}
	for (i = 0; i < n && i < 64; i++)
		if (found && list[i] != found && guids[i] == mine)
			printf("note: %s has %s's node GUID too (told apart by ibdev index)\n",
			       ctx_name(list[i]), name);
	if (!found)
		fprintf(stderr, "%s is not among rdma_get_devices()\n", name);
	else
		check(mine != 0, "the device's node GUID is not zero");
	rdma_free_devices(list);
	return found;
}

/* The first IPv4 address of DEVICE's port 1 netdev (GID 0's netdev in sysfs). */
static int device_ipv4(const char *name, struct sockaddr_in *out)
{
	char path[256], ndev[64] = "";
	struct ifaddrs *ifs, *ifa;
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/ndevs/0", name);
	f = fopen(path, "r");
	if (!f || !fgets(ndev, sizeof(ndev), f)) {
		fprintf(stderr, "cannot read %s\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	ndev[strcspn(ndev, "\n")] = 0;
	if (getifaddrs(&ifs))
		return -1;
	for (ifa = ifs; ifa && !found; ifa = ifa->ifa_next) {
		if (ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET && !strcmp(ifa->ifa_name, ndev)) {
			memcpy(out, ifa->ifa_addr, sizeof(*out));
			found = 1;
		}
	}
	freeifaddrs(ifs);
	if (!found)
		fprintf(stderr, "%s (%s's netdev) has no IPv4 address\n", ndev, name);
	return found ? 0 : -1;
}

static void qp_attr(struct ibv_qp_init_attr_ex *attr, struct ibv_pd *pd, struct ibv_cq *cq,
		    enum ibv_qp_type type)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_type = type;
	attr->send_cq = cq;
	attr->recv_cq = cq;
	attr->cap.max_send_wr = SEND_WR;
	attr->cap.max_send_sge = SEND_SGE;
	attr->cap.max_inline_data = INLINE_BYTES;
	if (type == IBV_QPT_RC) {
		attr->cap.max_recv_wr = SEND_WR;
		attr->cap.max_recv_sge = SEND_SGE;
	}
	attr->comp_mask = IBV_QP_INIT_ATTR_PD;
	attr->pd = pd;
}

/* Steps 2 and 3 on one CM ID (synchronous: no event channel, as vrb_create_ep makes it). */
static void cm_id_steps(const char *device, struct ibv_context *ctx, struct ibv_pd *pd,
			struct ibv_cq *cq, enum ibv_qp_type type, struct sockaddr_in *addr)
{
	struct ibv_qp_init_attr_ex attr;
	struct rdma_cm_id *id;
	int ret;

	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		failures++;
		return;
	}
	printf("after rdma_create_id: id->verbs %p (%s), PD's context %p (%s)\n", (void *)id->verbs,
	       ctx_name(id->verbs), (void *)pd->context, ctx_name(pd->context));
	check(id->verbs == NULL, "libfabric 2.1's sequence: a new CM ID has no device (id->verbs NULL)");
	qp_attr(&attr, pd, cq, type);
	errno = 0;
	ret = rdma_create_qp_ex(id, &attr);
	printf("rdma_create_qp_ex right after rdma_create_id: %d, errno %d (%s)\n", ret, errno,
	       strerror(errno));
	check(ret != 0 && errno == EINVAL,
	      "libfabric 2.1's sequence: rdma_create_qp_ex fails with EINVAL (PD not of id->verbs)");
	if (!ret)
		rdma_destroy_qp(id);

	ret = rdma_resolve_addr(id, (struct sockaddr *)addr, (struct sockaddr *)addr,
				RESOLVE_TIMEOUT_MS);
	printf("rdma_resolve_addr %s -> itself: %d (%s); id->verbs %p (%s)\n",
	       inet_ntoa(addr->sin_addr), ret, ret ? strerror(errno) : "ok", (void *)id->verbs,
	       ctx_name(id->verbs));
	if (!ret && id->verbs && strcmp(ctx_name(id->verbs), device)) {
		/* The CM binds the first device with a GID on the address's netdev: another
		 * device (an rdma_rxe) registered there first would be the one tested. */
		printf("FAIL the CM ID bound %s, not %s: another RDMA device on %s's netdev was "
		       "registered first; this run would test it, not %s\n",
		       ctx_name(id->verbs), device, device, device);
		failures++;
		rdma_destroy_id(id);
		return;
	}
	check(!ret && id->verbs == ctx,
	      "after address resolution id->verbs is the device's rdma_get_devices() context");
	qp_attr(&attr, pd, cq, type);
	errno = 0;
	ret = rdma_create_qp_ex(id, &attr);
	printf("rdma_create_qp_ex after rdma_resolve_addr: %d, errno %d; QP %u\n", ret,
	       ret ? errno : 0, ret ? 0 : id->qp->qp_num);
	check(!ret, "with the address resolved first the same rdma_create_qp_ex creates the QP");
	if (!ret)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

int main(int argc, char **argv)
{
	struct ibv_device_attr dev_attr;
	struct sockaddr_in addr;
	struct ibv_context *ctx;
	enum ibv_qp_type type;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DEVICE [GID_INDEX]\n", argv[0]);
		return 2;
	}
	ctx = device_context(argv[1]);
	if (!ctx || device_ipv4(argv[1], &addr))
		return 1;
	if (ibv_query_device(ctx, &dev_attr))
		return 1;
	type = dev_attr.device_cap_flags & IBV_DEVICE_XRC ? IBV_QPT_XRC_SEND : IBV_QPT_RC;
	printf("%s: QP type %s (IBV_DEVICE_XRC %s)\n", argv[1],
	       type == IBV_QPT_XRC_SEND ? "XRC_SEND" : "RC", type == IBV_QPT_RC ? "no" : "yes");
	/* libfabric's domain: a PD on the rdma_get_devices() context (verbs_domain.c). */
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 2 * SEND_WR, NULL, NULL, 0);
	if (!pd || !cq) {
		perror("ibv_alloc_pd/ibv_create_cq");
		return 1;
	}
	cm_id_steps(argv[1], ctx, pd, cq, type, &addr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	printf("%s: %d failed\n", argv[1], failures);
	return failures ? 1 : 0;
}
