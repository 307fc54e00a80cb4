/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes.h"

#define LINE_MAX_LEN 512

/*
 * Built-in table: a mix of /8 to /32 prefixes so that lookups exercise both
 * the tbl24 and tbl8 levels of rte_lpm, over eight next hops.
 */
static const struct {
	const char *prefix;
	uint8_t depth;
	uint8_t hop;
} default_routes[] = {
	{ "10.0.0.0", 8, 1 },
	{ "10.1.0.0", 16, 2 },
	{ "10.1.1.0", 24, 3 },
	{ "10.1.2.128", 25, 4 },
	{ "10.2.0.0", 16, 5 },
	{ "172.16.0.0", 12, 6 },
	{ "172.16.5.0", 24, 7 },
	{ "192.168.0.0", 16, 8 },
	{ "192.168.1.0", 24, 1 },
	{ "192.168.2.0", 24, 2 },
	{ "192.168.3.7", 32, 3 },
	{ "198.51.100.0", 24, 4 },
	{ "100.64.0.0", 10, 5 },
	{ "100.64.10.0", 28, 6 },
	{ "169.254.0.0", 16, 7 },
	{ "11.0.0.0", 8, 8 },
};

static int
hop_id(struct route_table *rt, const struct rte_ether_addr *mac)
{
	unsigned int i;

	for (i = 0; i < rt->nb_hops; i++)
		if (rte_is_same_ether_addr(&rt->hop_macs[i], mac))
			return (int)i;
	if (rt->nb_hops == FWD_MAX_HOPS)
		return -1;
	rt->hop_macs[rt->nb_hops] = *mac;
	return (int)rt->nb_hops++;
}

/* Adds one route; returns NULL or the reason it was refused. */
static const char *
route_add(struct route_table *rt, uint32_t prefix, uint8_t depth, const struct rte_ether_addr *mac)
{
	unsigned int i;
	int hop;

	if (depth < 1 || depth > 32)
		return "prefix length must be 1-32";
	if (depth < 32 && (prefix & (UINT32_MAX >> depth)) != 0)
		return "host bits set in prefix";
	for (i = 0; i < rt->nb_routes; i++)
		if (rt->routes[i].prefix == prefix && rt->routes[i].depth == depth)
			return "duplicate prefix";
	if (rt->nb_routes == ROUTES_MAX)
		return "too many routes (max 1024)";
	hop = hop_id(rt, mac);
	if (hop < 0)
		return "too many distinct next hops (max 256)";
	rt->routes[rt->nb_routes].prefix = prefix;
	rt->routes[rt->nb_routes].depth = depth;
	rt->routes[rt->nb_routes].nh_mac = *mac;
	rt->hop_of[rt->nb_routes] = (uint32_t)hop;
	rt->nb_routes++;
	return NULL;
}

static const char *
parse_line(struct route_table *rt, char *line)
{
	char *tok[3], *save = NULL, *slash, *end;
	struct rte_ether_addr mac;
	struct in_addr addr;
	unsigned long depth;
	int n = 0;
	char *t;

	for (t = strtok_r(line, " \t\r\n", &save); t != NULL; t = strtok_r(NULL, " \t\r\n", &save)) {
		if (n == 2)
			return "extra text after next-hop MAC";
		tok[n++] = t;
	}
	if (n == 0)
		return NULL;
	if (n == 1)
		return "expected 'PREFIX/LEN NEXT-HOP-MAC'";
	slash = strchr(tok[0], '/');
	if (slash == NULL)
		return "prefix needs a length (PREFIX/LEN)";
	*slash = '\0';
	if (inet_pton(AF_INET, tok[0], &addr) != 1)
		return "bad IPv4 prefix";
	if (!isdigit((unsigned char)slash[1]))
		return "bad prefix length";
	errno = 0;
	depth = strtoul(slash + 1, &end, 10);
	if (errno != 0 || *end != '\0' || depth < 1 || depth > 32)
		return "prefix length must be 1-32";
	if (rte_ether_unformat_addr(tok[1], &mac) != 0 || strlen(tok[1]) != 17)
		return "bad next-hop MAC (expected xx:xx:xx:xx:xx:xx)";
	return route_add(rt, ntohl(addr.s_addr), (uint8_t)depth, &mac);
}

int
routes_load(struct route_table *rt, const char *path, char *err, size_t errlen)
{
	char line[LINE_MAX_LEN];
	unsigned int lineno = 0;
	const char *why;
	FILE *f;

	memset(rt, 0, sizeof(*rt));
	f = fopen(path, "r");
	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *hash;

		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			snprintf(err, errlen, "%s:%u: line too long", path, lineno);
			fclose(f);
			return -1;
		}
		hash = strchr(line, '#');
		if (hash != NULL)
			*hash = '\0';
		why = parse_line(rt, line);
		if (why != NULL) {
			snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (rt->nb_routes == 0) {
		snprintf(err, errlen, "%s: no routes", path);
		return -1;
	}
	return 0;
}

void
routes_default(struct route_table *rt)
{
	unsigned int i;

	memset(rt, 0, sizeof(*rt));
	for (i = 0; i < RTE_DIM(default_routes); i++) {
		struct rte_ether_addr mac = {
			.addr_bytes = { 0x02, 0x00, 0x00, 0x00, 0x01, default_routes[i].hop },
		};
		struct in_addr addr;

		inet_pton(AF_INET, default_routes[i].prefix, &addr);
		route_add(rt, ntohl(addr.s_addr), default_routes[i].depth, &mac);
	}
}

int
routes_install(const struct route_table *rt, struct rte_lpm *lpm,
		struct fwd_hop *hops, const struct rte_ether_addr *src)
{
	unsigned int i;
	int ret;

	for (i = 0; i < rt->nb_hops; i++) {
		uint8_t b[16] = { 0 };

		memcpy(b, rt->hop_macs[i].addr_bytes, RTE_ETHER_ADDR_LEN);
		memcpy(b + RTE_ETHER_ADDR_LEN, src->addr_bytes, RTE_ETHER_ADDR_LEN);
		hops[i].eth_hdr = _mm_loadu_si128((const __m128i *)b);
	}
	for (i = 0; i < rt->nb_routes; i++) {
		ret = rte_lpm_add(lpm, rt->routes[i].prefix, rt->routes[i].depth, rt->hop_of[i]);
		if (ret < 0)
			return ret;
	}
	return 0;
}
