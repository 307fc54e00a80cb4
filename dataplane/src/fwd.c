/* SPDX-License-Identifier: Apache-2.0 */
#include <stdbool.h>
#include <string.h>

#include <rte_byteorder.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_prefetch.h>

#include "fwd.h"

const char *const fwd_drop_names[FWD_DROP_MAX] = {
	[FWD_DROP_NOT_IPV4] = "not_ipv4",
	[FWD_DROP_BAD_IPV4] = "bad_ipv4",
	[FWD_DROP_TTL_EXPIRED] = "ttl_expired",
	[FWD_DROP_NO_ROUTE] = "no_route",
	[FWD_DROP_TX_FULL] = "tx_full",
};

#define FWD_OK (-1)
#define ETH_IPV4_MIN_LEN (sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr))
/* Bytes 12-14 of a frame (ethertype, version/IHL) for IPv4 without options, as read by a 32-bit load. */
#define ETH_IPV4_VHL_WORD rte_cpu_to_be_32(RTE_ETHER_TYPE_IPV4 << 16 | RTE_IPV4_VHL_DEF << 8)
#define ETH_IPV4_VHL_MASK rte_cpu_to_be_32(0xffffff00)

static inline const struct rte_ipv4_hdr *
ipv4_of(const struct rte_ether_hdr *eth)
{
	return (const struct rte_ipv4_hdr *)(eth + 1);
}

/* RFC 1812 checks we forward on: version 4, IHL >= 5, total length inside the frame, TTL > 1. */
static inline int
ipv4_hdr_check(const struct rte_ipv4_hdr *ip, uint32_t l3_len)
{
	uint32_t hdr_len = (ip->version_ihl & RTE_IPV4_HDR_IHL_MASK) * RTE_IPV4_IHL_MULTIPLIER;
	uint32_t total_len = rte_be_to_cpu_16(ip->total_length);

	if ((ip->version_ihl >> 4) != 4 || hdr_len < sizeof(*ip) ||
	    total_len < hdr_len || total_len > l3_len)
		return FWD_DROP_BAD_IPV4;
	if (ip->time_to_live <= 1)
		return FWD_DROP_TTL_EXPIRED;
	return FWD_OK;
}

/*
 * The common case in one pass over the first 24 bytes: IPv4 without options,
 * TTL > 1, total length within the frame. Anything else takes classify().
 * 20 <= total_len <= data_len - 14 is one sign test: the OR of the two
 * differences is negative when either bound fails.
 */
static inline bool
ipv4_fast_ok(const struct rte_ether_hdr *eth, uint16_t data_len)
{
	const struct rte_ipv4_hdr *ip = ipv4_of(eth);
	uint32_t vhl_word;
	int32_t total_len = rte_be_to_cpu_16(ip->total_length);

	memcpy(&vhl_word, &eth->ether_type, sizeof(vhl_word));
	if (unlikely((vhl_word & ETH_IPV4_VHL_MASK) != ETH_IPV4_VHL_WORD))
		return false;
	if (unlikely(ip->time_to_live <= 1))
		return false;
	return likely(((data_len - (int32_t)sizeof(*eth) - total_len) |
			(total_len - (int32_t)sizeof(*ip))) >= 0);
}

/*
 * The full check, for packets the fast path refused: FWD_OK or the drop reason.
 * Out of line, so that the fast path keeps no values live for it.
 */
static __rte_noinline int
classify(const struct rte_ether_hdr *eth, uint16_t data_len)
{
	if (eth->ether_type != RTE_BE16(RTE_ETHER_TYPE_IPV4))
		return FWD_DROP_NOT_IPV4;
	if (data_len < ETH_IPV4_MIN_LEN)
		return FWD_DROP_BAD_IPV4;
	return ipv4_hdr_check(ipv4_of(eth), data_len - sizeof(*eth));
}

/*
 * TTL - 1 with the incremental checksum update of RFC 1624, eqn. 3:
 * HC' = ~(~HC + ~m + m'), m the 16-bit word holding TTL and protocol.
 * In network order m' = m - 0x0100, so ~m + m' = 0xfeff; the one's-complement
 * sum is byte-order independent, so on the checksum as stored (no byte swap)
 * the constant is K = rte_cpu_to_be_16(0xfeff). Unlike RFC 1141 (HC + 0x100)
 * it never turns a checksum into 0xffff. With the end-around carry c of
 * ~HC + K, which is set exactly when HC < K, the complement of the sum is
 * HC - K - c (mod 2^16): one subtract with borrow.
 */
static inline void
ttl_decrement(struct rte_ipv4_hdr *ip)
{
	uint16_t hc;
	bool borrow = __builtin_sub_overflow(ip->hdr_checksum, RTE_BE16(0xfeff), &hc);

	ip->hdr_checksum = (rte_be16_t)(hc - borrow);
	ip->time_to_live--;
}

/* New MACs in bytes 0-11, ethertype and the first IPv4 bytes (12-15) kept: one 16-byte blend. */
static inline void
mac_rewrite(struct rte_ether_hdr *eth, const struct fwd_hop *nh)
{
	__m128i hdr = _mm_loadu_si128((const __m128i *)eth);

	hdr = _mm_blend_epi16(nh->eth_hdr, hdr, 0xC0);
	_mm_storeu_si128((__m128i *)eth, hdr);
}

/*
 * A dropped packet is counted by reason and set aside; fwd_burst frees the
 * burst's drops with one bulk free (one call instead of one per packet).
 */
static inline void
drop(struct fwd_lcore *lc, struct rte_mbuf *m, int reason)
{
	lc->cnt.drop[reason]++;
	lc->dropped[lc->nb_dropped++] = m;
}

/*
 * The next hop of a packet that passed validation, FWD_NO_HOP when no route
 * covers it. The common case, a valid tbl24 entry with no tbl8 below it, costs
 * one test (entry layout and flags from rte_lpm.h); rte_lpm_lookup does the rest.
 */
static inline uint32_t
route(const struct rte_lpm *lpm, const struct rte_ether_hdr *eth)
{
	uint32_t dst = rte_be_to_cpu_32(ipv4_of(eth)->dst_addr);
	uint32_t entry, hop;

	memcpy(&entry, &lpm->tbl24[dst >> 8], sizeof(entry));
	if (likely((entry & RTE_LPM_VALID_EXT_ENTRY_BITMASK) == RTE_LPM_LOOKUP_SUCCESS))
		return entry & 0x00ffffff;
	if (rte_lpm_lookup(lpm, dst, &hop) != 0)
		return FWD_NO_HOP;
	return hop;
}

/*
 * Everything for one packet: validate, route, TTL and checksum, MACs; or drop
 * it (counted by reason, freed). Returns whether the packet is to be sent.
 */
static inline bool
forward_one(struct fwd_lcore *lc, const struct rte_lpm *lpm, const struct fwd_hop *hops,
		struct rte_mbuf *m, struct rte_ether_hdr *eth)
{
	uint32_t hop;
	int reason;

	if (unlikely(!ipv4_fast_ok(eth, rte_pktmbuf_data_len(m)))) {
		reason = classify(eth, rte_pktmbuf_data_len(m));
		if (reason != FWD_OK) {
			drop(lc, m, reason);
			return false;
		}
	}
	hop = route(lpm, eth);
	if (unlikely(hop == FWD_NO_HOP)) {
		drop(lc, m, FWD_DROP_NO_ROUTE);
		return false;
	}
	ttl_decrement((struct rte_ipv4_hdr *)(eth + 1));
	mac_rewrite(eth, &hops[hop]);
	return true;
}

uint16_t
fwd_burst(struct fwd_lcore *lc, struct rte_mbuf **pkts, uint16_t nb_rx)
{
	struct rte_ether_hdr *eth[FWD_BURST];
	/* locals: stores to packet memory would otherwise force reloads through lc */
	const struct fwd_hop *hops = lc->hops;
	const struct rte_lpm *lpm = lc->lpm;
	uint16_t i, nb_tx, sent;

	lc->cnt.calls++;
	lc->cnt.rx += nb_rx;

	/*
	 * Pass 1: locate and prefetch every header of the burst first, so that
	 * their cache misses overlap; then forward.
	 */
#pragma GCC unroll 4
	for (i = 0; i < nb_rx; i++) {
		eth[i] = rte_pktmbuf_mtod(pkts[i], struct rte_ether_hdr *);
		rte_prefetch0(eth[i]);
	}

	/*
	 * Pass 2, one packet at a time. Until the first drop, pkts[] is already
	 * the TX list; after it, the packets kept move up to fill the gaps.
	 */
	for (i = 0; i < nb_rx; i++)
		if (unlikely(!forward_one(lc, lpm, hops, pkts[i], eth[i])))
			break;
	nb_tx = i;
	for (i++; i < nb_rx; i++)
		if (forward_one(lc, lpm, hops, pkts[i], eth[i]))
			pkts[nb_tx++] = pkts[i];

	if (unlikely(lc->nb_dropped != 0)) {
		rte_pktmbuf_free_bulk(lc->dropped, lc->nb_dropped);
		lc->nb_dropped = 0;
	}
	sent = rte_eth_tx_burst(lc->tx_port, lc->tx_queue, pkts, nb_tx);
	if (unlikely(sent < nb_tx)) {
		lc->cnt.drop[FWD_DROP_TX_FULL] += nb_tx - sent;
		rte_pktmbuf_free_bulk(&pkts[sent], nb_tx - sent);
	}
	lc->cnt.tx += sent;
	return sent;
}
