/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_FWD_H
#define PERFCI_FWD_H

#include <stdint.h>

#include <rte_common.h>
#include <rte_lpm.h>
#include <rte_mbuf.h>
#include <rte_vect.h>

#define FWD_BURST 32		/* packets per RX/TX burst */
#define FWD_MAX_HOPS 256	/* next hops (LPM next-hop ids) */
#define FWD_NO_HOP UINT32_MAX	/* LPM miss */

/* Why a packet was dropped; reported by name in the JSON report. */
enum fwd_drop {
	FWD_DROP_NOT_IPV4,	/* ethertype is not IPv4 */
	FWD_DROP_BAD_IPV4,	/* bad version/IHL, bad total length, frame too short */
	FWD_DROP_TTL_EXPIRED,	/* TTL <= 1 */
	FWD_DROP_NO_ROUTE,	/* LPM miss */
	FWD_DROP_TX_FULL,	/* TX queue refused the packet */
	FWD_DROP_MAX
};

extern const char *const fwd_drop_names[FWD_DROP_MAX];

/*
 * Next hop: the first 16 bytes of the rewritten frame, dst MAC (next hop) and
 * src MAC (TX port) in bytes 0-11; bytes 12-15 come from the packet.
 */
struct fwd_hop {
	__m128i eth_hdr;
};

struct fwd_counters {
	uint64_t rx;
	uint64_t tx;
	uint64_t drop[FWD_DROP_MAX];
	uint64_t calls;		/* fwd_burst invocations */
};

/* Per-lcore forwarding state: written only by its lcore, so cache aligned. */
struct fwd_lcore {
	struct rte_lpm *lpm;
	const struct fwd_hop *hops;
	uint16_t tx_port;
	uint16_t tx_queue;
	struct fwd_counters cnt;	/* cumulative, warm-up included */
	uint16_t nb_dropped;		/* this burst's drops so far, freed at its end */
	struct rte_mbuf *dropped[FWD_BURST];
} __rte_cache_aligned;

/*
 * All per-packet forwarding work: validate, route, rewrite, transmit, drop.
 * Non-static and not inlined on purpose: valgrind --toggle-collect=fwd_burst
 * counts exactly the forwarding work. Returns the number of packets sent.
 */
uint16_t fwd_burst(struct fwd_lcore *lc, struct rte_mbuf **pkts, uint16_t nb_rx);

#endif /* PERFCI_FWD_H */
