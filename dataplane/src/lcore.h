/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_LCORE_H
#define PERFCI_LCORE_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_common.h>

#include "config.h"
#include "fwd.h"
#include "harness.h"
#include "window.h"

/*
 * The measurement window shared by all forwarding lcores. It opens (perf
 * "enable") once every lcore has warmed up and is in its poll loop, and closes
 * (perf "disable") when the last lcore has received its share of the packets.
 * Each lcore keeps its own counters and its own window within it; nothing here
 * is touched per packet, only at the window's edges.
 */
struct window_sync {
	const struct app_config *cfg;
	unsigned int nb_lcores;
	uint32_t ready;		/* lcores warmed up (atomic) */
	uint32_t finished;	/* lcores out of their window (atomic) */
	uint32_t open;		/* set, with release, once start_tsc and deadline are written */
	uint32_t closed;	/* set, with release, once end_tsc is written */
	uint64_t start_tsc;
	uint64_t last_end_tsc;	/* the latest end of an lcore's window (atomic max) */
	uint64_t end_tsc;
	uint64_t deadline;	/* --duration: TSC at which every lcore stops; 0: none */
	const char *stop_reason;	/* of the lcore that finished last */
	bool failed;		/* perf control failed: every lcore stops */
} __rte_cache_aligned;

/* One forwarding lcore and its RX/TX queue pair; written only by that lcore. */
struct lcore_run {
	struct fwd_lcore lc;
	struct window_sync *sync;
	struct harness *self;	/* its queue of the self harness; NULL for the ports harness */
	unsigned int lcore_id;
	uint16_t rx_port;
	uint16_t queue;
	uint64_t packets;	/* its share of --packets */
	uint64_t idle_polls;	/* its share of --idle-polls */
	struct poll_stats st;
	struct window w;
} __rte_cache_aligned;

/* Set by SIGINT/SIGTERM (or a failed perf control): every lcore closes its window and stops. */
extern volatile bool force_quit;

/* share of a total for the idx-th of n lcores: an even split, the remainder to the first ones */
static inline uint64_t
lcore_share(uint64_t total, unsigned int idx, unsigned int n)
{
	return total / n + (idx < total % n);
}

/* rte_eal_mp_remote_launch entry point; arg is a struct lcore_run *. Returns 0 or -1. */
int lcore_main(void *arg);

#endif /* PERFCI_LCORE_H */
