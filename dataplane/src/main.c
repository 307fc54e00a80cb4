/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perfci-fwd: the IPv4 forwarder perfci measures. EAL options, then "--",
 * then the application options (see README.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_lpm.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>

#include "config.h"
#include "fwd.h"
#include "harness.h"
#include "report.h"
#include "routes.h"
#include "window.h"

#define EXIT_USAGE 2
#define NB_RXD 1024
#define NB_TXD 1024
#define PORT_POOL_SIZE 8191
#define LPM_TBL8S 256

static volatile bool force_quit;

static void
signal_handler(int signum)
{
	if (signum == SIGINT || signum == SIGTERM)
		force_quit = true;
}

/* One RX and one TX queue, started. */
static int
port_init(uint16_t port, struct rte_mempool *pool)
{
	struct rte_eth_conf conf;
	uint16_t nb_rxd = NB_RXD, nb_txd = NB_TXD;
	int socket = rte_eth_dev_socket_id(port);
	int ret;

	if (!rte_eth_dev_is_valid_port(port))
		return -ENODEV;
	memset(&conf, 0, sizeof(conf));
	ret = rte_eth_dev_configure(port, 1, 1, &conf);
	if (ret == 0)
		ret = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
	if (ret == 0)
		ret = rte_eth_rx_queue_setup(port, 0, nb_rxd, socket, NULL, pool);
	if (ret == 0)
		ret = rte_eth_tx_queue_setup(port, 0, nb_txd, socket, NULL);
	if (ret == 0)
		ret = rte_eth_dev_start(port);
	if (ret == 0)
		rte_eth_promiscuous_enable(port); /* not all PMDs support it; harmless */
	return ret;
}

static void
port_fini(uint16_t port)
{
	if (rte_eth_dev_stop(port) != 0)
		fprintf(stderr, "port %u: stop failed\n", port);
	rte_eth_dev_close(port);
}

struct loop {
	const struct app_config *cfg;
	struct fwd_lcore *lc;
	struct harness *self;	/* NULL for the ports harness */
	uint16_t rx_port;
	struct poll_stats st;
	struct window w;
};

static bool
window_ready(const struct loop *l)
{
	if (l->cfg->idle)
		return l->st.empty_polls >= l->cfg->warmup;
	return l->lc->cnt.rx >= l->cfg->warmup;
}

static const char *
window_done(const struct loop *l, uint64_t now, uint64_t deadline)
{
	if (l->cfg->idle) {
		if (l->st.empty_polls - l->w.at_start.empty_polls >= l->cfg->idle_polls)
			return "idle_polls";
	} else if (l->lc->cnt.rx - l->w.cnt_at_start.rx >= l->cfg->packets) {
		return "packets";
	}
	if (deadline != 0 && now >= deadline)
		return "duration";
	return NULL;
}

static int
window_open(struct loop *l)
{
	if (perf_control(l->cfg->perf_ctl_fd, l->cfg->perf_ack_fd, "enable") < 0) {
		fprintf(stderr, "perf control: enable failed: %s\n", strerror(errno));
		return -1;
	}
	l->w.open = 1;
	l->w.at_start = l->st;
	l->w.cnt_at_start = l->lc->cnt;
	l->w.start_tsc = rte_rdtsc();
	return 0;
}

static int
window_close(struct loop *l, uint64_t now, const char *reason)
{
	l->w.end_tsc = now;
	l->w.closed = 1;
	l->w.stop_reason = reason;
	if (perf_control(l->cfg->perf_ctl_fd, l->cfg->perf_ack_fd, "disable") < 0) {
		fprintf(stderr, "perf control: disable failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The poll loop. One TSC read per poll attributes the time since the previous
 * read to a busy poll (RX returned packets; fwd_burst ran) or an empty poll.
 * The self harness refills its RX ring in large batches below a low-water
 * mark, timed apart as harness cycles, so that it never counts as forwarding.
 */
static int
poll_loop(struct loop *l)
{
	struct rte_mbuf *pkts[FWD_BURST];
	uint64_t now, prev, deadline = 0;
	bool refill = l->self != NULL && !l->cfg->idle;
	const char *done;
	uint16_t nb;

	prev = rte_rdtsc();
	while (!force_quit) {
		if (!l->w.open && window_ready(l)) {
			if (window_open(l) < 0)
				return -1;
			prev = l->w.start_tsc;
			if (l->cfg->duration_s > 0)
				deadline = l->w.start_tsc +
					(uint64_t)(l->cfg->duration_s * (double)rte_get_tsc_hz());
		}
		if (refill && harness_self_low(l->self)) {
			harness_self_refill(l->self);
			now = rte_rdtsc();
			l->st.harness_cycles += now - prev;
			prev = now;
		}
		nb = rte_eth_rx_burst(l->rx_port, 0, pkts, FWD_BURST);
		if (nb != 0)
			fwd_burst(l->lc, pkts, nb);
		now = rte_rdtsc();
		if (nb != 0) {
			l->st.busy_cycles += now - prev;
			l->st.busy_polls++;
		} else {
			l->st.idle_cycles += now - prev;
			l->st.empty_polls++;
		}
		prev = now;
		if (l->w.open && (done = window_done(l, now, deadline)) != NULL)
			return window_close(l, now, done);
	}
	if (l->w.open)
		return window_close(l, rte_rdtsc(), "signal");
	l->w.stop_reason = "signal";
	return 0;
}

/* Splits argv at "--": EAL options before it, application options after. */
static int
split_args(int argc, char **argv, char ***app_argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			argv[i] = argv[0];	/* the app's argv[0] */
			*app_argv = &argv[i];
			return i;
		}
	}
	*app_argv = &argv[argc - 1];
	return argc;
}

int
main(int argc, char **argv)
{
	static struct route_table rt;
	static struct fwd_lcore lc;
	struct fwd_hop *hops = NULL;
	struct harness self;
	struct app_config cfg;
	struct rte_lpm *lpm = NULL;
	struct rte_mempool *pool;
	struct rte_ether_addr src_mac;
	struct loop l;
	struct report r;
	char err[512];
	char **app_argv;
	FILE *out = stdout;
	int eal_argc, app_argc, ret, socket, status = EXIT_FAILURE;
	char *argv0 = argv[0];

	eal_argc = split_args(argc, argv, &app_argv);
	app_argc = argc - eal_argc;
	if (app_argc == 0) {
		static char *none[] = { NULL, NULL };

		none[0] = argv0;
		app_argv = none;
		app_argc = 1;
	}
	ret = config_parse(&cfg, app_argc, app_argv);
	if (ret != 0)
		return ret > 0 ? EXIT_SUCCESS : EXIT_USAGE;
	if (cfg.routes_path != NULL) {
		if (routes_load(&rt, cfg.routes_path, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s\n", err);
			return EXIT_USAGE;
		}
	} else {
		routes_default(&rt);
	}
	if (cfg.report_path != NULL) {
		out = fopen(cfg.report_path, "w");
		if (out == NULL) {
			fprintf(stderr, "%s: %s\n", cfg.report_path, strerror(errno));
			return EXIT_FAILURE;
		}
	}

	argv[0] = argv0;
	ret = rte_eal_init(eal_argc, argv);
	if (ret < 0) {
		fprintf(stderr, "EAL initialisation failed: %s\n", rte_strerror(rte_errno));
		return EXIT_FAILURE;
	}
	signal(SIGINT, signal_handler);
	signal(SIGTERM, signal_handler);
	socket = (int)rte_socket_id();

	memset(&l, 0, sizeof(l));
	memset(&self, 0, sizeof(self));
	pool = harness_pool_create("mbufs",
			cfg.harness == HARNESS_SELF ? cfg.inflight + 2 * FWD_BURST + 1024 : PORT_POOL_SIZE,
			socket);
	lpm = rte_lpm_create("routes", socket, &(struct rte_lpm_config){
			.max_rules = ROUTES_MAX, .number_tbl8s = LPM_TBL8S });
	hops = rte_zmalloc_socket("hops", sizeof(*hops) * FWD_MAX_HOPS, RTE_CACHE_LINE_SIZE, socket);
	if (pool == NULL || lpm == NULL || hops == NULL) {
		fprintf(stderr, "out of memory (pool, LPM or next hops): %s\n", rte_strerror(rte_errno));
		goto cleanup;
	}

	if (cfg.harness == HARNESS_SELF) {
		/* the LPM is needed to build templates: install routes with a provisional source MAC */
		memset(&src_mac, 0, sizeof(src_mac));
		if (routes_install(&rt, lpm, hops, &src_mac) < 0 ||
		    (ret = harness_self_create(&self, &cfg, &rt, lpm, pool, socket)) < 0) {
			fprintf(stderr, "self harness: %s\n", rte_strerror(-ret));
			goto cleanup;
		}
		l.self = &self;
		cfg.rx_port = cfg.tx_port = self.port;
	}
	ret = port_init(cfg.rx_port, pool);
	if (ret == 0 && cfg.tx_port != cfg.rx_port)
		ret = port_init(cfg.tx_port, pool);
	if (ret != 0) {
		fprintf(stderr, "port %u/%u: %s\n", cfg.rx_port, cfg.tx_port, rte_strerror(-ret));
		goto cleanup;
	}
	rte_eth_macaddr_get(cfg.tx_port, &src_mac);
	if (rte_is_zero_ether_addr(&src_mac))	/* net_ring ports have none */
		src_mac = (struct rte_ether_addr){ .addr_bytes = { 0x02, 0, 0, 0, 0, 0x01 } };
	rte_lpm_delete_all(lpm);
	if (routes_install(&rt, lpm, hops, &src_mac) < 0) {
		fprintf(stderr, "LPM: cannot install routes\n");
		goto cleanup;
	}

	lc.lpm = lpm;
	lc.hops = hops;
	lc.tx_port = cfg.tx_port;
	lc.tx_queue = 0;
	l.cfg = &cfg;
	l.lc = &lc;
	l.rx_port = cfg.rx_port;

	if (poll_loop(&l) == 0) {
		r = (struct report){ .cfg = &cfg, .lc = &lc, .w = &l.w, .end = &l.st,
			.cnt_end = &lc.cnt, .lcore = rte_lcore_id(), .rx_port = cfg.rx_port,
			.tx_port = cfg.tx_port, .tx_mac = &src_mac };
		if (!l.w.open) {
			/* never opened: report an empty window */
			l.w.at_start = l.st;
			l.w.cnt_at_start = lc.cnt;
		}
		report_write(out, &r);
		status = fflush(out) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	port_fini(cfg.rx_port);
	if (cfg.tx_port != cfg.rx_port)
		port_fini(cfg.tx_port);
cleanup:
	if (l.self != NULL)
		harness_self_free(&self);
	rte_free(hops);
	rte_lpm_free(lpm);
	rte_mempool_free(pool);
	rte_eal_cleanup();
	if (out != stdout)
		fclose(out);
	return status;
}
