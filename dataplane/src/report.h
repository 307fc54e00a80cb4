/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_REPORT_H
#define PERFCI_REPORT_H

#include <stdio.h>

#include <rte_ether.h>

#include "config.h"
#include "fwd.h"
#include "window.h"

struct report {
	const struct app_config *cfg;
	const struct fwd_lcore *lc;
	const struct window *w;
	const struct poll_stats *end;	/* poll stats when the window closed */
	const struct fwd_counters *cnt_end;
	unsigned int lcore;
	uint16_t rx_port;
	uint16_t tx_port;
	const struct rte_ether_addr *tx_mac;
};

/* Writes the JSON report (schema perfci-fwd.report/1, see README.md). */
void report_write(FILE *f, const struct report *r);

#endif /* PERFCI_REPORT_H */
