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
 */
static inline bool
ipv4_fast_ok(const struct rte_ether_hdr *eth, uint16_t data_len)
{
	const struct rte_ipv4_hdr *ip = ipv4_of(eth);
	uint32_t vhl_word, total_len = rte_be_to_cpu_16(ip->total_length);

	memcpy(&vhl_word, &eth->ether_type, sizeof(vhl_word));
	return (vhl_word & ETH_IPV4_VHL_MASK) == ETH_IPV4_VHL_WORD &&
		ip->time_to_live > 1 &&
		total_len >= sizeof(*ip) &&
		total_len + sizeof(*eth) <= data_len;
}

/* The full check, for packets the fast path refused: FWD_OK or the drop reason. */
static int
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
 * the constant is rte_cpu_to_be_16(0xfeff). Unlike RFC 1141 (HC + 0x100) it
 * never turns a checksum into 0xffff.
 */
static inline void
ttl_decrement(struct rte_ipv4_hdr *ip)
{
	uint32_t sum = (uint16_t)~ip->hdr_checksum + (uint32_t)RTE_BE16(0xfeff);

	sum = (sum & 0xffff) + (sum >> 16);
	ip->hdr_checksum = (rte_be16_t)~sum;
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

static __rte_noinline void
drop(struct fwd_lcore *lc, struct rte_mbuf *m, int reason)
{
	lc->cnt.drop[reason]++;
	rte_pktmbuf_free(m);
}

/* Forwards one routable packet: TTL and checksum, then MACs. */
static inline void
forward_one(const struct fwd_hop *hops, struct rte_ether_hdr *eth, uint32_t hop)
{
	ttl_decrement((struct rte_ipv4_hdr *)(eth + 1));
	mac_rewrite(eth, &hops[hop]);
}

/* Pass 1 for one packet: its destination, and whether it fails validation. */
static inline uint64_t
validate_one(struct rte_mbuf *m, const struct rte_ether_hdr *eth, rte_be32_t *dst, int8_t *reason,
		uint16_t i)
{
	*dst = ipv4_of(eth)->dst_addr;
	if (likely(ipv4_fast_ok(eth, rte_pktmbuf_data_len(m))))
		return 0;
	*reason = (int8_t)classify(eth, rte_pktmbuf_data_len(m));
	return *reason != FWD_OK ? UINT64_C(1) << i : 0;
}

uint16_t
fwd_burst(struct fwd_lcore *lc, struct rte_mbuf **pkts, uint16_t nb_rx)
{
	struct rte_ether_hdr *eth[FWD_BURST];
	rte_be32_t dst[FWD_BURST] __rte_aligned(16);
	uint32_t hop[FWD_BURST] __rte_aligned(16);
	int8_t reason[FWD_BURST];
	const __m128i bswap32 = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
	/* locals: stores to packet memory would otherwise force reloads through lc */
	const struct fwd_hop *hops = lc->hops;
	const struct rte_lpm *lpm = lc->lpm;
	uint64_t bad = 0;
	uint32_t hop_or = 0;
	uint16_t i, nb_tx = 0, sent;

	lc->cnt.calls++;
	lc->cnt.rx += nb_rx;

	/*
	 * Pass 1: locate and prefetch every header of the burst first, so that
	 * their cache misses overlap; then validate.
	 */
	for (i = 0; i < nb_rx; i++) {
		eth[i] = rte_pktmbuf_mtod(pkts[i], struct rte_ether_hdr *);
		rte_prefetch0(eth[i]);
	}
	for (i = 0; i < nb_rx; i++)
		bad |= validate_one(pkts[i], eth[i], &dst[i], &reason[i], i);

	/*
	 * Pass 2: route lookups four at a time, addresses byte-swapped to host
	 * order in one shuffle. Next-hop ids fit 24 bits, so bit 31 of the OR of
	 * all results says whether any lookup missed. (hop[] is written by scalar
	 * stores: reading it back as one 128-bit load would stall on store forwarding.)
	 */
	for (i = 0; i + 4 <= nb_rx; i += 4) {
		rte_lpm_lookupx4(lpm,
				_mm_shuffle_epi8(_mm_load_si128((const __m128i *)&dst[i]), bswap32),
				&hop[i], FWD_NO_HOP);
		hop_or |= hop[i] | hop[i + 1] | hop[i + 2] | hop[i + 3];
	}
	for (; i < nb_rx; i++) {
		if (rte_lpm_lookup(lpm, rte_be_to_cpu_32(dst[i]), &hop[i]) != 0)
			hop[i] = FWD_NO_HOP;
		hop_or |= hop[i];
	}

	/* Pass 3: rewrite what is routable; the common all-good burst needs no checks. */
	if (likely(bad == 0 && (hop_or & FWD_NO_HOP_BIT) == 0)) {
		for (i = 0; i < nb_rx; i++)
			forward_one(hops, eth[i], hop[i]);
		nb_tx = nb_rx;
	} else {
		for (i = 0; i < nb_rx; i++) {
			if ((bad >> i) & 1)
				drop(lc, pkts[i], reason[i]);
			else if (hop[i] == FWD_NO_HOP)
				drop(lc, pkts[i], FWD_DROP_NO_ROUTE);
			else {
				forward_one(hops, eth[i], hop[i]);
				pkts[nb_tx++] = pkts[i];
			}
		}
	}

	sent = rte_eth_tx_burst(lc->tx_port, lc->tx_queue, pkts, nb_tx);
	if (unlikely(sent < nb_tx)) {
		lc->cnt.drop[FWD_DROP_TX_FULL] += nb_tx - sent;
		rte_pktmbuf_free_bulk(&pkts[sent], nb_tx - sent);
	}
	lc->cnt.tx += sent;
	return sent;
}
