/* Usage: gid-events <device> <netdev> [<device> <netdev>]... Makes the same changes to each
 * device's netdev (addresses added and removed, link down and up) and reports, per device and
 * change, the async events that followed. Exit status: how many events the first device
 * failed to report. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

/* ib_core delivers these events from work items, late on a loaded guest: the first device (the
 * one judged) gets FIRST_WAIT_MS for each change, the others (for comparison) WAIT_MS; after
 * what is expected arrived, SETTLE_MS more show what else comes. */
enum { MAX_DEVS = 4, WAIT_MS = 8000, FIRST_WAIT_MS = 30000, SETTLE_MS = 500 };

struct change {
	const char *what, *cmd; /* cmd: printf format of (netdev, device number) */
	enum ibv_event_type want[2];
	int nwant;
};

static const struct change changes[] = {
	{ "add IPv4 10.77.N.1/24", "ip addr add 10.77.%2$d.1/24 dev %1$s", { IBV_EVENT_GID_CHANGE }, 1 },
	{ "remove IPv4 10.77.N.1/24", "ip addr del 10.77.%2$d.1/24 dev %1$s", { IBV_EVENT_GID_CHANGE }, 1 },
	{ "add IPv6 fd77:N::1/64", "ip addr add fd77:%2$d::1/64 dev %1$s nodad", { IBV_EVENT_GID_CHANGE }, 1 },
	{ "remove IPv6 fd77:N::1/64", "ip addr del fd77:%2$d::1/64 dev %1$s", { IBV_EVENT_GID_CHANGE }, 1 },
	{ "add IPv6 fd78:N::1/64", "ip addr add fd78:%2$d::1/64 dev %1$s nodad", { IBV_EVENT_GID_CHANGE }, 1 },
	/* keep_addr_on_down (guest-init): the down keeps fd78 and its GID. */
	{ "link down", "ip link set %1$s down", { IBV_EVENT_PORT_ERR }, 1 },
	{ "link up", "ip link set %1$s up", { IBV_EVENT_PORT_ACTIVE }, 1 },
	{ "remove IPv6 fd78:N::1/64", "ip addr del fd78:%2$d::1/64 dev %1$s", { IBV_EVENT_GID_CHANGE }, 1 },
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Takes every pending event of `ctx`, counting them by type. */
static void drain(struct ibv_context *ctx, int *count)
{
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		if (ev.event_type >= 0 && ev.event_type <= IBV_EVENT_WQ_FATAL)
			count[ev.event_type]++;
		ibv_ack_async_event(&ev);
	}
}

int main(int argc, char **argv)
{
	int ndev = (argc - 1) / 2 < MAX_DEVS ? (argc - 1) / 2 : MAX_DEVS, n, missing_first = 0;
	struct ibv_context *ctx[MAX_DEVS];
	const char *name[MAX_DEVS], *netdev[MAX_DEVS];
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int d = 0; d < ndev; d++) {
		name[d] = argv[1 + 2 * d];
		netdev[d] = argv[2 + 2 * d];
		ctx[d] = NULL;
		for (int i = 0; list && i < n; i++)
			if (!strcmp(ibv_get_device_name(list[i]), name[d]))
				ctx[d] = ibv_open_device(list[i]);
		if (!ctx[d]) {
			fprintf(stderr, "cannot open %s\n", name[d]);
			return 100;
		}
		fcntl(ctx[d]->async_fd, F_SETFL, fcntl(ctx[d]->async_fd, F_GETFL) | O_NONBLOCK);
	}
	for (size_t c = 0; c < sizeof(changes) / sizeof(changes[0]); c++) {
		const struct change *ch = &changes[c];
		int count[MAX_DEVS][IBV_EVENT_WQ_FATAL + 1] = { { 0 } };
		for (int d = 0; d < ndev; d++) {
			char cmd[160];
			snprintf(cmd, sizeof(cmd), ch->cmd, netdev[d], d);
			if (system(cmd) != 0) {
				fprintf(stderr, "'%s' failed\n", cmd);
				return 100;
			}
		}
		/* Until every device reported what is expected (the first within FIRST_WAIT_MS,
		 * the others within WAIT_MS), then SETTLE_MS more to see what else comes. */
		double start = now(), done_at = 0, first_done_at = 0, settle = SETTLE_MS / 1000.0;
		for (;;) {
			double t = now();
			if (done_at && t - done_at >= settle)
				break;
			if (t - start >= WAIT_MS / 1000.0 && first_done_at && t - first_done_at >= settle)
				break;
			if (t - start >= FIRST_WAIT_MS / 1000.0)
				break;
			struct pollfd p[MAX_DEVS];
			for (int d = 0; d < ndev; d++)
				p[d] = (struct pollfd){ .fd = ctx[d]->async_fd, .events = POLLIN };
			poll(p, ndev, 50);
			int all = 1;
			for (int d = 0; d < ndev; d++) {
				int got = 1;
				drain(ctx[d], count[d]);
				for (int w = 0; w < ch->nwant; w++)
					got &= count[d][ch->want[w]] > 0;
				if (d == 0 && got && !first_done_at)
					first_done_at = now();
				all &= got;
			}
			if (all && !done_at)
				done_at = now();
		}
		for (int d = 0; d < ndev; d++) {
			char seen[200] = "";
			int missing = 0;
			for (int t = 0; t <= IBV_EVENT_WQ_FATAL; t++)
				if (count[d][t])
					snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), " %s x%d",
						 ibv_event_type_str(t), count[d][t]);
			for (int w = 0; w < ch->nwant; w++)
				missing += !count[d][ch->want[w]];
			printf("%s %-8s %-26s events:%s\n", !missing ? "ok  " : d ? "MISS" : "FAIL",
			       name[d], ch->what, seen[0] ? seen : " none");
			if (d == 0)
				missing_first += missing;
		}
	}
	for (int d = 0; d < ndev; d++)
		ibv_close_device(ctx[d]);
	ibv_free_device_list(list);
	return missing_first;
}
