/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perfci-fwd: the IPv4 forwarder perfci measures. EAL options, then "--",
 * then the application options (see README.md).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
#include "lcore.h"
#include "report.h"
#include "routes.h"
#include "window.h"

#define EXIT_USAGE 2
#define NB_RXD 1024
#define NB_TXD 1024
#define PORT_POOL_SIZE 8191
#define LPM_TBL8S 256u		/* at least */
#define LPM_MIN_RULES 1024u

/*
 * EAL leaves its runtime files (config and fbarrays, 6.5 MB with --no-huge)
 * behind after rte_eal_cleanup; at one process per measured run they would
 * fill an agent's disk. The directory is this process's own: EAL refuses a
 * second primary process on the same --file-prefix.
 */
static void
runtime_dir_remove(const char *path)
{
	struct dirent *e;
	DIR *d;

	if (path[0] == '\0' || (d = opendir(path)) == NULL)
		return;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		    unlinkat(dirfd(d), e->d_name, 0) < 0)
			fprintf(stderr, "%s/%s: %s\n", path, e->d_name, strerror(errno));
	closedir(d);
	if (rmdir(path) < 0)
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
}

static void
signal_handler(int signum)
{
	if (signum == SIGINT || signum == SIGTERM)
		force_quit = true;
}

/*
 * nb_rx RX and nb_tx TX queues, started. Several RX queues need RSS to spread
 * the traffic (rss; the self harness spreads its flows itself): without it, or
 * with too few queues, why says so and -ENOTSUP is returned.
 */
static int
port_init(uint16_t port, struct rte_mempool *pool, uint16_t nb_rx, uint16_t nb_tx, bool rss,
		char *why, size_t len)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	uint16_t nb_rxd = NB_RXD, nb_txd = NB_TXD, q;
	int socket = rte_eth_dev_socket_id(port);
	uint64_t hf;
	int ret;

	snprintf(why, len, "port %u", port);
	if (!rte_eth_dev_is_valid_port(port))
		return -ENODEV;
	ret = rte_eth_dev_info_get(port, &info);
	if (ret != 0)
		return ret;
	memset(&conf, 0, sizeof(conf));
	if (info.max_rx_queues < nb_rx || info.max_tx_queues < nb_tx) {
		snprintf(why, len, "port %u (%s) has %u RX / %u TX queues; one lcore per queue pair needs %u / %u",
			 port, info.driver_name, info.max_rx_queues, info.max_tx_queues, nb_rx, nb_tx);
		return -ENOTSUP;
	}
	if (rss && nb_rx > 1) {
		hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP);
		if (hf == 0) {
			snprintf(why, len, "port %u (%s) has no RSS: it cannot spread traffic over %u RX "
				 "queues; forward on one lcore", port, info.driver_name, nb_rx);
			return -ENOTSUP;
		}
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_hf = hf;	/* with the PMD's default key */
	}
	ret = rte_eth_dev_configure(port, nb_rx, nb_tx, &conf);
	if (ret == 0)
		ret = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
	for (q = 0; q < nb_rx && ret == 0; q++)
		ret = rte_eth_rx_queue_setup(port, q, nb_rxd, socket, NULL, pool);
	for (q = 0; q < nb_tx && ret == 0; q++)
		ret = rte_eth_tx_queue_setup(port, q, nb_txd, socket, NULL);
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
	static struct lcore_run runs[RTE_MAX_LCORE];
	static struct harness self[RTE_MAX_LCORE];
	static struct window_sync sync;
	struct fwd_hop *hops = NULL;
	struct app_config cfg;
	struct rte_lpm *lpm = NULL;
	struct rte_mempool *pool;
	struct rte_ether_addr src_mac;
	struct report r;
	char err[512], runtime_dir[PATH_MAX];
	char **app_argv;
	FILE *out = stdout;
	int eal_argc, app_argc, ret, socket, status = EXIT_FAILURE;
	unsigned int lcore_id, n, nb_lcores;
	bool self_made = false;
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
	} else if (cfg.routes_generate != 0) {
		if (routes_generate(&rt, cfg.routes_generate) < 0) {
			fprintf(stderr, "--routes-generate %u: out of memory\n", cfg.routes_generate);
			return EXIT_FAILURE;
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
	snprintf(runtime_dir, sizeof(runtime_dir), "%s", rte_eal_get_runtime_dir());
	signal(SIGINT, signal_handler);
	signal(SIGTERM, signal_handler);
	socket = (int)rte_socket_id();

	/* every lcore of -l forwards, the main one included, each on its own queue pair */
	nb_lcores = rte_lcore_count();
	if ((cfg.idle ? cfg.idle_polls : cfg.packets) < nb_lcores) {
		fprintf(stderr, "--%s %" PRIu64 " gives some of the %u lcores nothing to do\n",
			cfg.idle ? "idle-polls" : "packets", cfg.idle ? cfg.idle_polls : cfg.packets, nb_lcores);
		status = EXIT_USAGE;
		goto eal_done;
	}
	/* the self harness's pool: each queue's in-flight packets, a burst either side, a spare */
	pool = harness_pool_create("mbufs", cfg.harness == HARNESS_SELF ?
			nb_lcores * (cfg.inflight + 2 * FWD_BURST + 1024) : nb_lcores * PORT_POOL_SIZE, socket);
	lpm = rte_lpm_create("routes", socket, &(struct rte_lpm_config){
			.max_rules = RTE_MAX(rt.nb_routes, LPM_MIN_RULES),
			.number_tbl8s = RTE_MAX(routes_tbl8_groups(&rt), LPM_TBL8S) });
	hops = rte_zmalloc_socket("hops", sizeof(*hops) * FWD_MAX_HOPS, RTE_CACHE_LINE_SIZE, socket);
	if (pool == NULL || lpm == NULL || hops == NULL) {
		fprintf(stderr, "out of memory (pool, LPM or next hops): %s\n", rte_strerror(rte_errno));
		goto cleanup;
	}

	/* before the self harness: it builds its unroutable flows from LPM misses */
	if (routes_install(&rt, lpm) < 0) {
		fprintf(stderr, "LPM: cannot install routes\n");
		goto cleanup;
	}
	if (cfg.harness == HARNESS_SELF) {
		ret = harness_self_create(self, nb_lcores, &cfg, &rt, lpm, pool, socket);
		self_made = true;
		if (ret == -EINVAL) {
			fprintf(stderr, "self harness: --flows %u leaves one of the %u lcores' queues without a flow\n",
				cfg.flows, nb_lcores);
			status = EXIT_USAGE;
			goto cleanup;
		}
		if (ret < 0) {
			fprintf(stderr, "self harness: %s\n", rte_strerror(-ret));
			goto cleanup;
		}
		cfg.rx_port = cfg.tx_port = self[0].port;
	}
	if (cfg.harness == HARNESS_SELF) {	/* a port of one queue pair per lcore */
		for (n = 0, ret = 0; n < nb_lcores && ret == 0; n++)
			ret = port_init(self[n].port, pool, 1, 1, false, err, sizeof(err));
	} else if (cfg.tx_port == cfg.rx_port) {
		ret = port_init(cfg.rx_port, pool, nb_lcores, nb_lcores, true, err, sizeof(err));
	} else {
		ret = port_init(cfg.rx_port, pool, nb_lcores, 1, true, err, sizeof(err));
		if (ret == 0)
			ret = port_init(cfg.tx_port, pool, 1, nb_lcores, false, err, sizeof(err));
	}
	if (ret != 0) {
		if (ret == -ENOTSUP) {	/* why says it all */
			fprintf(stderr, "%s\n", err);
			status = EXIT_USAGE;
		} else {
			fprintf(stderr, "%s: %s\n", err, rte_strerror(-ret));
		}
		goto cleanup;
	}
	rte_eth_macaddr_get(cfg.tx_port, &src_mac);
	if (rte_is_zero_ether_addr(&src_mac))	/* net_ring ports have none */
		src_mac = (struct rte_ether_addr){ .addr_bytes = { 0x02, 0, 0, 0, 0, 0x01 } };
	routes_set_hops(&rt, hops, &src_mac);

	sync.cfg = &cfg;
	sync.nb_lcores = nb_lcores;
	/* runs[0] is the main lcore's (queue 0), then the workers' in increasing id */
	runs[0].lcore_id = rte_get_main_lcore();
	n = 1;
	RTE_LCORE_FOREACH_WORKER(lcore_id)
		runs[n++].lcore_id = lcore_id;
	for (n = 0; n < nb_lcores; n++) {
		struct lcore_run *run = &runs[n];

		run->lc.lpm = lpm;
		run->lc.hops = hops;
		run->sync = &sync;
		run->self = cfg.harness == HARNESS_SELF ? &self[n] : NULL;
		run->lc.tx_port = run->self != NULL ? run->self->port : cfg.tx_port;
		run->lc.tx_queue = run->self != NULL ? 0 : (uint16_t)n;
		run->rx_port = run->self != NULL ? run->self->port : cfg.rx_port;
		run->queue = run->self != NULL ? 0 : (uint16_t)n;
		run->packets = lcore_share(cfg.packets, n, nb_lcores);
		run->idle_polls = lcore_share(cfg.idle_polls, n, nb_lcores);
	}
	for (n = 1; n < nb_lcores; n++)
		rte_eal_remote_launch(lcore_main, &runs[n], runs[n].lcore_id);
	ret = lcore_main(&runs[0]);
	for (n = 1; n < nb_lcores; n++)
		if (rte_eal_wait_lcore(runs[n].lcore_id) != 0)
			ret = -1;

	if (ret == 0 && !sync.failed) {
		for (n = 0; n < nb_lcores; n++) {
			if (!runs[n].w.open) {
				/* never opened: report an empty window */
				runs[n].w.at_start = runs[n].st;
				runs[n].w.cnt_at_start = runs[n].lc.cnt;
			}
		}
		r = (struct report){ .cfg = &cfg, .runs = runs, .nb_lcores = nb_lcores, .sync = &sync,
			.lcore = rte_get_main_lcore(), .rx_port = cfg.rx_port, .tx_port = cfg.tx_port,
			.tx_mac = &src_mac };
		report_write(out, &r);
		status = fflush(out) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	if (cfg.harness == HARNESS_SELF) {
		for (n = 0; n < nb_lcores; n++)
			port_fini(self[n].port);
	} else {
		port_fini(cfg.rx_port);
		if (cfg.tx_port != cfg.rx_port)
			port_fini(cfg.tx_port);
	}
cleanup:
	if (self_made)
		harness_self_free(self, nb_lcores);
	/*
	 * hops, the LPM table and the mbuf pool are left to the process's end: rte_free zeroes what
	 * it frees, about 80 MB here (tbl24 alone is 64 MiB), a few ms natively but most of a sim run's
	 * instructions under valgrind. Nothing is measured after the report.
	 */
eal_done:
	rte_eal_cleanup();
	runtime_dir_remove(runtime_dir);
	routes_free(&rt);
	if (out != stdout)
		fclose(out);
	return status;
}
