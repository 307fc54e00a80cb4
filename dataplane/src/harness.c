/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_thash.h>
#include <rte_udp.h>

#include "harness.h"

#define HARNESS_BATCH 64
#define HARNESS_TTL 64
#define POOL_CACHE 256
#define MISS_BASE RTE_IPV4(203, 0, 113, 0)	/* TEST-NET-3: never in the built-in table */

struct flow_tpl {
	uint32_t src;
	uint32_t dst;
	uint16_t sport;
	uint16_t dport;
};

struct rte_mempool *
harness_pool_create(const char *name, unsigned int n, int socket)
{
	struct rte_pktmbuf_pool_private priv = {
		.mbuf_data_room_size = RTE_MBUF_DEFAULT_BUF_SIZE,
		.mbuf_priv_size = 0,
	};
	unsigned int elt = sizeof(struct rte_mbuf) + priv.mbuf_priv_size + priv.mbuf_data_room_size;
	struct rte_mempool *mp;

	mp = rte_mempool_create_empty(name, n, elt, POOL_CACHE, sizeof(priv), socket,
			RTE_MEMPOOL_F_NO_IOVA_CONTIG);
	if (mp == NULL)
		return NULL;
	if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL) != 0)
		goto fail;
	rte_pktmbuf_pool_init(mp, &priv);
	if (rte_mempool_populate_default(mp) < 0)
		goto fail;
	rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
	return mp;
fail:
	rte_mempool_free(mp);
	return NULL;
}

/* Destination for flow i: unroutable for the first miss_flows, else spread over the routes. */
static uint32_t
flow_dst(const struct route_table *rt, struct rte_lpm *lpm, uint32_t miss_flows, uint32_t i)
{
	const struct route *r;
	uint32_t host, span, hop;

	if (i < miss_flows) {
		uint32_t a = MISS_BASE + (i & 0xff);

		/* a custom table may cover TEST-NET-3: walk until the address misses */
		while (rte_lpm_lookup(lpm, a, &hop) == 0 && a != UINT32_MAX)
			a += 256;
		return a;
	}
	r = &rt->routes[i % rt->nb_routes];
	span = r->depth == 32 ? 1 : (uint32_t)1 << (32 - r->depth);
	host = span > 2 ? 1 + (i / rt->nb_routes) % (span - 2) : 0;
	return r->prefix + host;
}

static void
packet_from_template(struct harness *h, struct rte_mbuf *m, const struct flow_tpl *f)
{
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
	uint16_t l3_len = (uint16_t)(h->pkt_size - sizeof(*eth));

	memset(eth, 0, h->pkt_size);
	eth->dst_addr = (struct rte_ether_addr){ .addr_bytes = { 0x02, 0, 0, 0, 0xfe, 0x01 } };
	eth->src_addr = (struct rte_ether_addr){ .addr_bytes = { 0x02, 0, 0, 0, 0xfe, 0x02 } };
	eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->total_length = rte_cpu_to_be_16(l3_len);
	ip->time_to_live = HARNESS_TTL;
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = rte_cpu_to_be_32(f->src);
	ip->dst_addr = rte_cpu_to_be_32(f->dst);
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	udp->src_port = rte_cpu_to_be_16(f->sport);
	udp->dst_port = rte_cpu_to_be_16(f->dport);
	udp->dgram_len = rte_cpu_to_be_16((uint16_t)(l3_len - sizeof(*ip)));
	m->data_len = (uint16_t)h->pkt_size;
	m->pkt_len = h->pkt_size;
}

/*
 * --cold-data: a NIC writes packet data by DMA, so the forwarding core finds it
 * outside its caches (in LLC or memory), while the driver has touched the mbuf
 * header. Flushing the headers' cache line after refill reproduces that.
 */
static inline void
flush_headers(struct rte_mbuf *m)
{
	_mm_clflush(rte_pktmbuf_mtod(m, void *));
}

/*
 * Allocates n fresh packets from flows [0, nb_flows) round-robin, starting at
 * *next, and queues them for RX.
 */
static unsigned int
top_up(struct harness *h, unsigned int n, uint32_t nb_flows, uint32_t *next)
{
	struct rte_mbuf *m[HARNESS_BATCH];
	unsigned int i, done = 0;

	while (done < n) {
		unsigned int k = RTE_MIN(n - done, (unsigned int)HARNESS_BATCH);

		if (rte_pktmbuf_alloc_bulk(h->pool, m, k) != 0)
			break;
		for (i = 0; i < k; i++) {
			packet_from_template(h, m[i], &h->tpl[*next]);
			if (h->cold_data)
				flush_headers(m[i]);
			if (++*next == nb_flows)
				*next = 0;
		}
		rte_ring_sp_enqueue_bulk(h->rx_ring, (void **)m, k, NULL);
		done += k;
	}
	return done;
}

/*
 * Puts a forwarded packet's TTL back to the template's and updates the checksum
 * to match: RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m'), m the 16-bit word holding
 * TTL and protocol (byte-order independent, so on the values as stored). Nothing
 * is kept per packet: a saved copy (in the mbuf's private area) would be one
 * more cache line per in-flight packet in the working set, which no NIC
 * touches. The result is congruent to the template's checksum and never
 * 0xffff; rte_ipv4_cksum, which built the template, never writes 0x0000 but
 * 0xffff: keep its bytes exactly.
 */
static inline void
restore_ttl(struct rte_ipv4_hdr *ip)
{
	rte_be16_t m, m_new;
	uint32_t sum;

	memcpy(&m, &ip->time_to_live, sizeof(m));
	ip->time_to_live = HARNESS_TTL;
	memcpy(&m_new, &ip->time_to_live, sizeof(m_new));
	sum = (uint32_t)(uint16_t)~ip->hdr_checksum + (uint16_t)~m + m_new;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->hdr_checksum = sum == 0xffff ? RTE_BE16(0xffff) : (rte_be16_t)~sum;
}

void
harness_self_refill(struct harness *h)
{
	struct rte_mbuf *m[HARNESS_BATCH];
	unsigned int i, n, held;

	/* Forwarded packets only had TTL, checksum and MACs changed: restore TTL and checksum. */
	while ((n = rte_ring_sc_dequeue_burst(h->tx_ring, (void **)m, HARNESS_BATCH, NULL)) != 0) {
		for (i = 0; i < n; i++) {
			restore_ttl(rte_pktmbuf_mtod_offset(m[i], struct rte_ipv4_hdr *,
					sizeof(struct rte_ether_hdr)));
			if (h->cold_data)
				flush_headers(m[i]);
		}
		rte_ring_sp_enqueue_burst(h->rx_ring, (void **)m, n, NULL);
	}
	/*
	 * Dropped packets went back to the pool. Only unroutable flows are dropped
	 * (templates are otherwise valid), so replacing them from those flows keeps
	 * the traffic mix at --miss-pct.
	 */
	held = rte_ring_count(h->rx_ring);
	if (held < h->inflight && h->miss_flows > 0)
		top_up(h, h->inflight - held, h->miss_flows, &h->next_miss);
}

/*
 * The 40-byte Toeplitz key most NICs (ixgbe, i40e, mlx5) start with, and a
 * redirection table filled round-robin over the queues, as drivers set it up.
 */
static const uint8_t rss_key[40] = {
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};
#define RSS_RETA_SIZE 128

/* The RX queue RSS would steer a flow to. */
static unsigned int
rss_queue(const struct flow_tpl *f, unsigned int nb_queues)
{
	struct rte_ipv4_tuple t = { .src_addr = f->src, .dst_addr = f->dst,
				    .sport = f->sport, .dport = f->dport };

	if (nb_queues == 1)
		return 0;
	return (rte_softrss((uint32_t *)&t, RTE_THASH_V4_L4_LEN, rss_key) % RSS_RETA_SIZE) % nb_queues;
}

/* One queue's rings and its share of the flows (in flow order: unroutable ones first). */
static int
queue_create(struct harness *h, uint16_t q, const struct app_config *cfg, const struct flow_tpl *all,
		const uint8_t *queue_of, uint32_t miss_flows, struct rte_mempool *pool, int socket)
{
	unsigned int ring_size = rte_align32pow2(cfg->inflight + 1);
	char name[RTE_RING_NAMESIZE];
	uint32_t i, n = 0;

	memset(h, 0, sizeof(*h));
	h->queue = q;
	h->pool = pool;
	h->inflight = cfg->inflight;
	/* refill a quarter of the ring at a time: few, large, cheap batches */
	h->low_water = cfg->inflight - cfg->inflight / 4;
	h->pkt_size = cfg->pkt_size;
	h->cold_data = cfg->cold_data;
	for (i = 0; i < cfg->flows; i++)
		if (queue_of[i] == q)
			n++;
	if (n == 0)
		return -EINVAL;
	snprintf(name, sizeof(name), q == 0 ? "self_rx" : "self_rx%u", q);
	h->rx_ring = rte_ring_create(name, ring_size, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
	snprintf(name, sizeof(name), q == 0 ? "self_tx" : "self_tx%u", q);
	h->tx_ring = rte_ring_create(name, ring_size, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
	h->tpl = rte_zmalloc_socket("flows", sizeof(*h->tpl) * n, RTE_CACHE_LINE_SIZE, socket);
	if (h->rx_ring == NULL || h->tx_ring == NULL || h->tpl == NULL)
		return -ENOMEM;
	for (i = 0; i < cfg->flows; i++) {
		if (queue_of[i] != q)
			continue;
		if (i < miss_flows)
			h->miss_flows++;
		h->tpl[h->flows++] = all[i];
	}
	return 0;
}

int
harness_self_create(struct harness *h, unsigned int nb_queues, const struct app_config *cfg,
		const struct route_table *rt, struct rte_lpm *lpm, struct rte_mempool *pool, int socket)
{
	char name[RTE_ETH_NAME_MAX_LEN];
	struct flow_tpl *all;
	uint8_t *queue_of;
	uint32_t i, miss_flows;
	unsigned int q;
	int port, ret = 0;

	if (nb_queues == 0 || nb_queues > UINT8_MAX + 1u)	/* queue_of[] holds a byte */
		return -EINVAL;
	memset(h, 0, sizeof(*h) * nb_queues);
	all = rte_zmalloc_socket("all_flows", sizeof(*all) * cfg->flows, RTE_CACHE_LINE_SIZE, socket);
	queue_of = rte_zmalloc_socket("flow_queues", cfg->flows, RTE_CACHE_LINE_SIZE, socket);
	if (all == NULL || queue_of == NULL) {
		ret = -ENOMEM;
		goto out;
	}
	/* flows [0, miss_flows) have no route (see flow_dst) */
	miss_flows = (uint32_t)(((uint64_t)cfg->miss_pct * cfg->flows + 99) / 100);
	for (i = 0; i < cfg->flows; i++) {
		all[i].src = RTE_IPV4(198, 18, 0, 0) + (i & 0xffff);
		all[i].dst = flow_dst(rt, lpm, miss_flows, i);
		all[i].sport = (uint16_t)(1024 + (i & 0x7fff));
		all[i].dport = 9;
		queue_of[i] = (uint8_t)rss_queue(&all[i], nb_queues);
	}
	for (q = 0; q < nb_queues && ret == 0; q++)
		ret = queue_create(&h[q], (uint16_t)q, cfg, all, queue_of, miss_flows, pool, socket);
	if (ret != 0)
		goto out;
	/*
	 * One net_ring port per queue, not one port of nb_queues queues: net_ring
	 * keeps its queues' packet counters side by side in one array (24 bytes a
	 * queue), which every RX and TX burst updates, so lcores on queues of one
	 * port would pass those cache lines between them on every burst. A NIC's
	 * queues share no such line; ports of their own do not either.
	 */
	for (q = 0; q < nb_queues; q++) {
		snprintf(name, sizeof(name), q == 0 ? "net_self" : "net_self%u", q);
		port = rte_eth_from_rings(name, &h[q].rx_ring, 1, &h[q].tx_ring, 1, (unsigned int)socket);
		if (port < 0) {
			ret = -rte_errno;
			goto out;
		}
		h[q].port = (uint16_t)port;
		if (!cfg->idle && top_up(&h[q], h[q].inflight, h[q].flows, &h[q].next_flow) != h[q].inflight) {
			ret = -ENOMEM;
			goto out;
		}
	}
out:
	rte_free(all);
	rte_free(queue_of);
	return ret;
}

void
harness_self_free(struct harness *h, unsigned int nb_queues)
{
	struct rte_mbuf *m[HARNESS_BATCH];
	unsigned int n, q;

	for (q = 0; q < nb_queues; q++) {
		if (h[q].rx_ring != NULL)
			while ((n = rte_ring_sc_dequeue_burst(h[q].rx_ring, (void **)m, HARNESS_BATCH, NULL)) != 0)
				rte_pktmbuf_free_bulk(m, n);
		if (h[q].tx_ring != NULL)
			while ((n = rte_ring_sc_dequeue_burst(h[q].tx_ring, (void **)m, HARNESS_BATCH, NULL)) != 0)
				rte_pktmbuf_free_bulk(m, n);
		rte_free(h[q].tpl);
		rte_ring_free(h[q].rx_ring);
		rte_ring_free(h[q].tx_ring);
	}
}
