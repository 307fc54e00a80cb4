/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_ROUTES_H
#define PERFCI_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include <rte_ether.h>

#include "fwd.h"

#define ROUTES_MAX 1024

struct route {
	uint32_t prefix;	/* host order, host bits zero */
	uint8_t depth;		/* 1..32 */
	struct rte_ether_addr nh_mac;
};

struct route_table {
	struct route routes[ROUTES_MAX];
	unsigned int nb_routes;
	struct rte_ether_addr hop_macs[FWD_MAX_HOPS];	/* distinct next hops */
	unsigned int nb_hops;
	uint32_t hop_of[ROUTES_MAX];	/* route -> next-hop id */
};

/*
 * Loads FILE into rt. On a malformed line, writes "FILE:LINE: reason" into err
 * and returns -1. Needs no EAL: it runs before rte_eal_init().
 */
int routes_load(struct route_table *rt, const char *path, char *err, size_t errlen);

/* The built-in table used without --routes. */
void routes_default(struct route_table *rt);

/* Fills the LPM and the next-hop table; src is the TX port's MAC. Returns 0 or -errno. */
int routes_install(const struct route_table *rt, struct rte_lpm *lpm,
		struct fwd_hop *hops, const struct rte_ether_addr *src);

#endif /* PERFCI_ROUTES_H */
