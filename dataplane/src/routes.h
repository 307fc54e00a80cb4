/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_ROUTES_H
#define PERFCI_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include <rte_ether.h>

#include "fwd.h"

#define ROUTES_MAX (1u << 22)	/* routes of a file or --routes-generate */

struct route {
	uint32_t prefix;	/* host order, host bits zero */
	uint8_t depth;		/* 1..32 */
	uint8_t hop;		/* next-hop id: index into hop_macs */
	uint32_t line;		/* of the route file; 0 when built in or generated */
};

struct route_table {
	struct route *routes;	/* malloc'ed: tables can hold millions of routes */
	unsigned int nb_routes;
	unsigned int cap;
	struct rte_ether_addr hop_macs[FWD_MAX_HOPS];	/* distinct next hops */
	unsigned int nb_hops;
};

/*
 * Loads FILE into rt. On a malformed line, writes "FILE:LINE: reason" into err
 * and returns -1. Needs no EAL: it runs before rte_eal_init().
 */
int routes_load(struct route_table *rt, const char *path, char *err, size_t errlen);

/* The built-in table used without --routes. */
void routes_default(struct route_table *rt);

/*
 * A large table for --routes-generate N: N distinct prefixes, every 16th a /32
 * inside one of the /24s (so that its lookup takes a tbl8), the rest /24s
 * scattered over the address space (so that lookups spread over rte_lpm's
 * tbl24), over 16 next hops. Deterministic. Returns 0 or -1 (out of memory).
 */
int routes_generate(struct route_table *rt, unsigned int n);

/* tbl8 groups the table needs in rte_lpm: one per /24 holding a longer prefix. */
unsigned int routes_tbl8_groups(const struct route_table *rt);

/*
 * Fills the LPM (once: rte_lpm_add scans the rules of the same length, so a
 * million routes take a while). Returns 0 or -errno.
 */
int routes_install(const struct route_table *rt, struct rte_lpm *lpm);

/* Fills the next-hop table: each next hop's MAC and src, the TX port's MAC. */
void routes_set_hops(const struct route_table *rt, struct fwd_hop *hops, const struct rte_ether_addr *src);

void routes_free(struct route_table *rt);

#endif /* PERFCI_ROUTES_H */
