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

/* Adds one route; returns NULL or the reason it was refused. Duplicates are found afterwards. */
static const char *
route_add(struct route_table *rt, uint32_t prefix, uint8_t depth, const struct rte_ether_addr *mac,
		uint32_t line)
{
	struct route *r;
	int hop;

	if (depth < 1 || depth > 32)
		return "prefix length must be 1-32";
	if (depth < 32 && (prefix & (UINT32_MAX >> depth)) != 0)
		return "host bits set in prefix";
	if (rt->nb_routes == ROUTES_MAX)
		return "too many routes (max 4194304)";
	if (rt->nb_routes == rt->cap) {
		unsigned int cap = rt->cap ? 2 * rt->cap : 64;

		r = realloc(rt->routes, sizeof(*r) * cap);
		if (r == NULL)
			return "out of memory";
		rt->routes = r;
		rt->cap = cap;
	}
	hop = hop_id(rt, mac);
	if (hop < 0)
		return "too many distinct next hops (max 256)";
	rt->routes[rt->nb_routes++] = (struct route){ .prefix = prefix, .depth = depth,
						      .hop = (uint8_t)hop, .line = line };
	return NULL;
}

static int
by_prefix_then_line(const void *a, const void *b)
{
	const struct route *x = a, *y = b;

	if (x->prefix != y->prefix)
		return x->prefix < y->prefix ? -1 : 1;
	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* The first line (in file order) that repeats an earlier prefix; 0 when none does. */
static uint32_t
first_duplicate(const struct route_table *rt)
{
	struct route *sorted;
	uint32_t line = 0;
	unsigned int i;

	if (rt->nb_routes < 2)
		return 0;
	sorted = malloc(sizeof(*sorted) * rt->nb_routes);
	if (sorted == NULL)
		return 0;
	memcpy(sorted, rt->routes, sizeof(*sorted) * rt->nb_routes);
	qsort(sorted, rt->nb_routes, sizeof(*sorted), by_prefix_then_line);
	for (i = 1; i < rt->nb_routes; i++)
		if (sorted[i].prefix == sorted[i - 1].prefix && sorted[i].depth == sorted[i - 1].depth &&
		    (line == 0 || sorted[i].line < line))
			line = sorted[i].line;
	free(sorted);
	return line;
}

static const char *
parse_line(struct route_table *rt, char *line, uint32_t lineno)
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
	return route_add(rt, ntohl(addr.s_addr), (uint8_t)depth, &mac, lineno);
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
		why = parse_line(rt, line, lineno);
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
	lineno = first_duplicate(rt);
	if (lineno != 0) {
		snprintf(err, errlen, "%s:%u: duplicate prefix", path, lineno);
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
		route_add(rt, ntohl(addr.s_addr), default_routes[i].depth, &mac, 0);
	}
}

int
routes_generate(struct route_table *rt, unsigned int n)
{
	unsigned int k;

	memset(rt, 0, sizeof(*rt));
	for (k = 0; k < n; k++) {
		struct rte_ether_addr mac = { .addr_bytes = { 0x02, 0x00, 0x00, 0x00, 0x02, (uint8_t)(k % 16) } };
		/* an odd multiplier is a bijection of the 24-bit /24 numbers: distinct, scattered */
		uint32_t net = (uint32_t)(k - (k % 16 == 15)) * 2654435761u & 0xffffff;
		const char *why;

		if (k % 16 == 15)	/* a host route inside the previous route's /24 */
			why = route_add(rt, net << 8 | (1 + k % 254), 32, &mac, 0);
		else
			why = route_add(rt, net << 8, 24, &mac, 0);
		if (why != NULL)
			return -1;
	}
	return 0;
}

static int
by_value(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

unsigned int
routes_tbl8_groups(const struct route_table *rt)
{
	uint32_t *nets;
	unsigned int i, n = 0, groups = 0;

	nets = malloc(sizeof(*nets) * (rt->nb_routes + 1));
	if (nets == NULL)
		return rt->nb_routes;	/* an upper bound */
	for (i = 0; i < rt->nb_routes; i++)
		if (rt->routes[i].depth > 24)
			nets[n++] = rt->routes[i].prefix >> 8;
	qsort(nets, n, sizeof(*nets), by_value);
	for (i = 0; i < n; i++)
		groups += i == 0 || nets[i] != nets[i - 1];
	free(nets);
	return groups;
}

void
routes_free(struct route_table *rt)
{
	free(rt->routes);
	rt->routes = NULL;
	rt->nb_routes = rt->cap = 0;
}

void
routes_set_hops(const struct route_table *rt, struct fwd_hop *hops, const struct rte_ether_addr *src)
{
	unsigned int i;

	for (i = 0; i < rt->nb_hops; i++) {
		uint8_t b[16] = { 0 };

		memcpy(b, rt->hop_macs[i].addr_bytes, RTE_ETHER_ADDR_LEN);
		memcpy(b + RTE_ETHER_ADDR_LEN, src->addr_bytes, RTE_ETHER_ADDR_LEN);
		hops[i].eth_hdr = _mm_loadu_si128((const __m128i *)b);
	}
}

int
routes_install(const struct route_table *rt, struct rte_lpm *lpm)
{
	unsigned int i;
	int ret;

	for (i = 0; i < rt->nb_routes; i++) {
		ret = rte_lpm_add(lpm, rt->routes[i].prefix, rt->routes[i].depth, rt->routes[i].hop);
		if (ret < 0)
			return ret;
	}
	return 0;
}
