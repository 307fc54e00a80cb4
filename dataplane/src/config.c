/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_common.h>

#include "config.h"
#include "routes.h"

#define DEFAULT_PKT_SIZE 64
#define DEFAULT_FLOWS 1024
#define DEFAULT_INFLIGHT 4096
#define DEFAULT_WARMUP 100000
#define DEFAULT_PACKETS 10000000
#define DEFAULT_IDLE_POLLS 1000000
#define MIN_PKT_SIZE 64
#define MAX_PKT_SIZE 1518
#define MAX_INFLIGHT 65536

enum {
	OPT_HARNESS = 256,
	OPT_RX_PORT,
	OPT_TX_PORT,
	OPT_ROUTES,
	OPT_ROUTES_GENERATE,
	OPT_PKT_SIZE,
	OPT_FLOWS,
	OPT_MISS_PCT,
	OPT_INFLIGHT,
	OPT_COLD_DATA,
	OPT_WARMUP,
	OPT_PACKETS,
	OPT_DURATION,
	OPT_IDLE,
	OPT_IDLE_POLLS,
	OPT_REPORT,
	OPT_PERF_CTL,
	OPT_PERF_ACK,
	OPT_HELP,
};

static const struct option long_options[] = {
	{ "harness", required_argument, NULL, OPT_HARNESS },
	{ "rx-port", required_argument, NULL, OPT_RX_PORT },
	{ "tx-port", required_argument, NULL, OPT_TX_PORT },
	{ "routes", required_argument, NULL, OPT_ROUTES },
	{ "routes-generate", required_argument, NULL, OPT_ROUTES_GENERATE },
	{ "pkt-size", required_argument, NULL, OPT_PKT_SIZE },
	{ "flows", required_argument, NULL, OPT_FLOWS },
	{ "miss-pct", required_argument, NULL, OPT_MISS_PCT },
	{ "inflight", required_argument, NULL, OPT_INFLIGHT },
	{ "cold-data", no_argument, NULL, OPT_COLD_DATA },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "packets", required_argument, NULL, OPT_PACKETS },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "idle", no_argument, NULL, OPT_IDLE },
	{ "idle-polls", required_argument, NULL, OPT_IDLE_POLLS },
	{ "report", required_argument, NULL, OPT_REPORT },
	{ "perf-ctl", required_argument, NULL, OPT_PERF_CTL },
	{ "perf-ack", required_argument, NULL, OPT_PERF_ACK },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

void
config_usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [EAL options] -- [options]\n"
		"  --harness self|ports   self-fed net_ring (default) or EAL ports (--vdev/PCI)\n"
		"  --rx-port N            ports harness: RX port (default 0)\n"
		"  --tx-port N            ports harness: TX port (default 0)\n"
		"  --routes FILE          route table (default: built-in)\n"
		"  --routes-generate N    a generated table of N routes (/24s and 1 in 16 /32s), up to %u\n"
		"  --pkt-size BYTES       self: frame size %d-%d (default %d)\n"
		"  --flows N              self: destination addresses (default %d)\n"
		"  --miss-pct P           self: percent of flows without a route (default 0)\n"
		"  --inflight N           self: mbufs cycling, power of two (default %d)\n"
		"  --cold-data            self: flush packet data from the caches after refill (NIC DMA)\n"
		"  --warmup N             packets before the window opens (default %d)\n"
		"  --packets N            window length in packets (default %d)\n"
		"  --duration SEC         window length limit in seconds (default: none)\n"
		"  --idle                 idle calibration: no offered traffic\n"
		"  --idle-polls N         idle: window length in empty polls (default %d)\n"
		"  --report FILE          write the JSON report to FILE (default stdout)\n"
		"  --perf-ctl FD          perf stat --control fd: enable/disable at the window\n"
		"  --perf-ack FD          ... and its ack descriptor\n",
		prog, ROUTES_MAX, MIN_PKT_SIZE, MAX_PKT_SIZE, DEFAULT_PKT_SIZE, DEFAULT_FLOWS,
		DEFAULT_INFLIGHT, DEFAULT_WARMUP, DEFAULT_PACKETS, DEFAULT_IDLE_POLLS);
}

/* Whole decimal number in [lo, hi]; -1 when it is not one. */
static int
parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (s == NULL || *s == '\0' || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int
bad(const char *opt, const char *arg, const char *why)
{
	fprintf(stderr, "invalid --%s '%s': %s\n", opt, arg, why);
	return -1;
}

static int
parse_one(struct app_config *cfg, int opt, const char *arg)
{
	uint64_t v;
	char *end;

	switch (opt) {
	case OPT_HARNESS:
		if (strcmp(arg, "self") == 0)
			cfg->harness = HARNESS_SELF;
		else if (strcmp(arg, "ports") == 0)
			cfg->harness = HARNESS_PORTS;
		else
			return bad("harness", arg, "expected self or ports");
		return 0;
	case OPT_RX_PORT:
	case OPT_TX_PORT:
		if (parse_u64(arg, 0, UINT16_MAX - 1, &v) < 0)
			return bad(opt == OPT_RX_PORT ? "rx-port" : "tx-port", arg, "expected a port id");
		*(opt == OPT_RX_PORT ? &cfg->rx_port : &cfg->tx_port) = (uint16_t)v;
		return 0;
	case OPT_ROUTES:
		cfg->routes_path = arg;
		return 0;
	case OPT_ROUTES_GENERATE:
		if (parse_u64(arg, 1, ROUTES_MAX, &v) < 0)
			return bad("routes-generate", arg, "expected a route count, 1-4194304");
		cfg->routes_generate = (uint32_t)v;
		return 0;
	case OPT_PKT_SIZE:
		if (parse_u64(arg, MIN_PKT_SIZE, MAX_PKT_SIZE, &v) < 0)
			return bad("pkt-size", arg, "expected 64-1518");
		cfg->pkt_size = (uint32_t)v;
		return 0;
	case OPT_FLOWS:
		if (parse_u64(arg, 1, 1 << 20, &v) < 0)
			return bad("flows", arg, "expected 1-1048576");
		cfg->flows = (uint32_t)v;
		return 0;
	case OPT_MISS_PCT:
		if (parse_u64(arg, 0, 100, &v) < 0)
			return bad("miss-pct", arg, "expected 0-100");
		cfg->miss_pct = (uint32_t)v;
		return 0;
	case OPT_INFLIGHT:
		if (parse_u64(arg, 64, MAX_INFLIGHT, &v) < 0 || !rte_is_power_of_2((uint32_t)v))
			return bad("inflight", arg, "expected a power of two, 64-65536");
		cfg->inflight = (uint32_t)v;
		return 0;
	case OPT_COLD_DATA:
		cfg->cold_data = true;
		return 0;
	case OPT_WARMUP:
		if (parse_u64(arg, 0, UINT64_MAX >> 1, &v) < 0)
			return bad("warmup", arg, "expected a packet count");
		cfg->warmup = v;
		return 0;
	case OPT_PACKETS:
		if (parse_u64(arg, 1, UINT64_MAX >> 1, &v) < 0)
			return bad("packets", arg, "expected a positive packet count");
		cfg->packets = v;
		return 0;
	case OPT_DURATION:
		errno = 0;
		cfg->duration_s = strtod(arg, &end);
		if (errno != 0 || *end != '\0' || end == arg || !(cfg->duration_s > 0) ||
		    cfg->duration_s > 86400)
			return bad("duration", arg, "expected seconds, 0-86400");
		return 0;
	case OPT_IDLE:
		cfg->idle = true;
		return 0;
	case OPT_IDLE_POLLS:
		if (parse_u64(arg, 1, UINT64_MAX >> 1, &v) < 0)
			return bad("idle-polls", arg, "expected a positive poll count");
		cfg->idle_polls = v;
		return 0;
	case OPT_REPORT:
		cfg->report_path = arg;
		return 0;
	case OPT_PERF_CTL:
	case OPT_PERF_ACK:
		if (parse_u64(arg, 0, INT_MAX, &v) < 0)
			return bad(opt == OPT_PERF_CTL ? "perf-ctl" : "perf-ack", arg,
				   "expected a file descriptor");
		*(opt == OPT_PERF_CTL ? &cfg->perf_ctl_fd : &cfg->perf_ack_fd) = (int)v;
		return 0;
	}
	return -1;
}

int
config_parse(struct app_config *cfg, int argc, char **argv)
{
	int opt;

	memset(cfg, 0, sizeof(*cfg));
	cfg->harness = HARNESS_SELF;
	cfg->pkt_size = DEFAULT_PKT_SIZE;
	cfg->flows = DEFAULT_FLOWS;
	cfg->inflight = DEFAULT_INFLIGHT;
	cfg->warmup = DEFAULT_WARMUP;
	cfg->packets = DEFAULT_PACKETS;
	cfg->idle_polls = DEFAULT_IDLE_POLLS;
	cfg->perf_ctl_fd = -1;
	cfg->perf_ack_fd = -1;

	optind = 1;
	opterr = 1;
	while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
		if (opt == OPT_HELP) {
			config_usage(argv[0]);
			return 1;
		}
		if (opt == '?' || parse_one(cfg, opt, optarg) < 0)
			goto usage;
	}
	if (optind < argc) {
		fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
		goto usage;
	}
	if (cfg->routes_path != NULL && cfg->routes_generate != 0) {
		fprintf(stderr, "--routes and --routes-generate exclude each other\n");
		goto usage;
	}
	if ((cfg->perf_ctl_fd < 0) != (cfg->perf_ack_fd < 0)) {
		fprintf(stderr, "--perf-ctl and --perf-ack go together\n");
		goto usage;
	}
	return 0;
usage:
	config_usage(argv[0]);
	return -1;
}
