/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_HARNESS_H
#define PERFCI_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_mempool.h>
#include <rte_ring.h>

#include "config.h"
#include "routes.h"

/*
 * The self-fed harness: one queue per forwarding lcore, each a net_ring port
 * of its own with one RX/TX ring pair. Each queue's lcore keeps its RX ring
 * full of packets built from its own flows' templates, recycling what it
 * transmitted; one struct harness per queue, touched only by that queue's
 * lcore.
 */
struct harness {
	struct rte_ring *rx_ring;
	struct rte_ring *tx_ring;
	struct rte_mempool *pool;
	uint16_t port;		/* this queue's net_ring port (RX and TX queue 0) */
	uint16_t queue;		/* the queue's index: which flows it carries */
	uint32_t inflight;
	uint32_t low_water;	/* refill when the RX ring holds fewer packets */
	uint32_t flows;		/* this queue's flows */
	uint32_t miss_flows;	/* its flows [0, miss_flows) have no route */
	uint32_t next_flow;	/* initial fill: round-robin over all flows */
	uint32_t next_miss;	/* replacements for drops: over the unroutable flows */
	uint32_t pkt_size;
	bool cold_data;
	struct flow_tpl *tpl;	/* one template per flow of this queue */
} __rte_cache_aligned;

/*
 * mbuf pool that needs no IOVA-contiguous memory: with --no-huge, objects are
 * laid out back to back instead of one per page, which avoids every mbuf
 * aliasing onto the same cache sets (2-3x slower forwarding otherwise).
 */
struct rte_mempool *harness_pool_create(const char *name, unsigned int n, int socket);

/*
 * Creates nb_queues queues (h[0..nb_queues)), each a net_ring port with one
 * RX/TX queue pair, spreads the flows over the queues as RSS would (Toeplitz
 * hash of the 4-tuple with the common default key, round-robin redirection
 * table) and fills every RX ring with --inflight packets unless idle. Returns
 * 0 or -errno; -EINVAL when a queue would get no flow (too few --flows for the
 * lcores).
 */
int harness_self_create(struct harness *h, unsigned int nb_queues, const struct app_config *cfg,
		const struct route_table *rt, struct rte_lpm *lpm, struct rte_mempool *pool, int socket);

/* Recycles transmitted packets into the RX ring and replaces dropped ones. */
void harness_self_refill(struct harness *h);

/* True when the RX ring has drained below the low-water mark. */
static inline bool
harness_self_low(const struct harness *h)
{
	return rte_ring_count(h->rx_ring) < h->low_water;
}

void harness_self_free(struct harness *h, unsigned int nb_queues);

#endif /* PERFCI_HARNESS_H */
