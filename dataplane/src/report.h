/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_REPORT_H
#define PERFCI_REPORT_H

#include <stdio.h>

#include <rte_ether.h>

#include "config.h"
#include "lcore.h"

struct report {
	const struct app_config *cfg;
	const struct lcore_run *runs;	/* every forwarding lcore, main lcore first */
	unsigned int nb_lcores;
	const struct window_sync *sync;	/* the shared window */
	unsigned int lcore;		/* the main lcore */
	uint16_t rx_port;
	uint16_t tx_port;
	const struct rte_ether_addr *tx_mac;
};

/*
 * Writes the JSON report (schema perfci-fwd.report/1, see README.md): the
 * window's counters summed over the lcores, and each lcore's under "lcores".
 */
void report_write(FILE *f, const struct report *r);

#endif /* PERFCI_REPORT_H */
