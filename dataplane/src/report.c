/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>

#include <rte_cycles.h>
#include <rte_version.h>

#include "build_id.h"
#include "report.h"

/* JSON string body: escapes what a path or version could contain. */
static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void
report_write(FILE *f, const struct report *r)
{
	const struct app_config *c = r->cfg;
	const struct window *w = r->w;
	const struct poll_stats *s0 = &w->at_start, *s1 = r->end;
	const struct fwd_counters *c0 = &w->cnt_at_start, *c1 = r->cnt_end;
	char mac[RTE_ETHER_ADDR_FMT_SIZE];
	unsigned int i;

	fprintf(f, "{\n  \"schema\": \"perfci-fwd.report/1\",\n  \"build_id\": ");
	json_str(f, PERFCI_BUILD_ID);
	fprintf(f, ",\n  \"dpdk_version\": ");
	json_str(f, rte_version());
	fprintf(f, ",\n  \"lcore\": %u,\n  \"tsc_hz\": %" PRIu64 ",\n", r->lcore, rte_get_tsc_hz());
	rte_ether_format_addr(mac, sizeof(mac), r->tx_mac);
	fprintf(f, "  \"ports\": {\"rx\": %u, \"tx\": %u, \"tx_mac\": \"%s\"},\n",
		r->rx_port, r->tx_port, mac);
	fprintf(f, "  \"mode\": \"%s\",\n  \"stop_reason\": ", c->idle ? "idle" : "forward");
	json_str(f, w->stop_reason != NULL ? w->stop_reason : "not_opened");
	fprintf(f, ",\n  \"config\": {\"harness\": \"%s\", \"pkt_size\": %u, \"flows\": %u, "
		"\"miss_pct\": %u, \"inflight\": %u, \"cold_data\": %s, \"burst\": %d, \"routes\": ",
		c->harness == HARNESS_SELF ? "self" : "ports", c->pkt_size, c->flows,
		c->miss_pct, c->inflight, c->cold_data ? "true" : "false", FWD_BURST);
	json_str(f, c->routes_path != NULL ? c->routes_path : "default");
	fprintf(f, ", \"warmup\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"duration_s\": %g, "
		"\"idle_polls\": %" PRIu64 "},\n", c->warmup, c->packets, c->duration_s, c->idle_polls);

	fprintf(f, "  \"window\": {\n    \"packets\": {\"rx\": %" PRIu64 ", \"tx\": %" PRIu64
		", \"dropped\": {", c1->rx - c0->rx, c1->tx - c0->tx);
	for (i = 0; i < FWD_DROP_MAX; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", fwd_drop_names[i],
			c1->drop[i] - c0->drop[i]);
	fprintf(f, "}},\n    \"polls\": {\"busy\": %" PRIu64 ", \"empty\": %" PRIu64 "},\n",
		s1->busy_polls - s0->busy_polls, s1->empty_polls - s0->empty_polls);
	fprintf(f, "    \"cycles\": {\"busy\": %" PRIu64 ", \"idle\": %" PRIu64 ", \"harness\": %" PRIu64
		", \"window\": %" PRIu64 "}\n  },\n",
		s1->busy_cycles - s0->busy_cycles, s1->idle_cycles - s0->idle_cycles,
		s1->harness_cycles - s0->harness_cycles, w->end_tsc - w->start_tsc);
	fprintf(f, "  \"total\": {\"fwd_calls\": %" PRIu64 ", \"fwd_packets\": %" PRIu64 "}\n}\n",
		r->lc->cnt.calls, r->lc->cnt.rx);
}
