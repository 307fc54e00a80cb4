/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_CONFIG_H
#define PERFCI_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

enum harness_kind {
	HARNESS_SELF,	/* self-fed net_ring port, no NIC */
	HARNESS_PORTS,	/* EAL ports: --vdev (net_pcap, net_null, ...) or PCI */
};

/* Everything after "--" on the command line. */
struct app_config {
	enum harness_kind harness;
	uint16_t rx_port;
	uint16_t tx_port;
	const char *routes_path;	/* NULL: built-in table */
	uint32_t routes_generate;	/* > 0: a generated table of this many routes */
	uint32_t pkt_size;
	uint32_t flows;
	uint32_t miss_pct;
	uint32_t inflight;
	bool cold_data;			/* self: flush refilled packet data, as NIC DMA leaves it */
	uint64_t warmup;
	uint64_t packets;
	double duration_s;		/* 0: no time limit */
	bool idle;
	uint64_t idle_polls;
	const char *report_path;	/* NULL: stdout */
	int perf_ctl_fd;		/* -1: not counting under perf */
	int perf_ack_fd;
};

/*
 * Parses the application options (argv[0] is the program name).
 * Returns 0; 1 after printing the usage for --help; -1 after printing why and
 * the usage to stderr.
 */
int config_parse(struct app_config *cfg, int argc, char **argv);

void config_usage(const char *prog);

#endif /* PERFCI_CONFIG_H */
