/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <string.h>

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

/* One lcore's window: its counters at the end minus those at the start. */
struct lcore_delta {
	struct fwd_counters cnt;
	struct poll_stats st;
	uint64_t window_cycles;
};

static void
lcore_delta(const struct lcore_run *run, struct lcore_delta *d)
{
	const struct poll_stats *s0 = &run->w.at_start, *s1 = &run->st;
	const struct fwd_counters *c0 = &run->w.cnt_at_start, *c1 = &run->lc.cnt;
	unsigned int i;

	d->cnt.rx = c1->rx - c0->rx;
	d->cnt.tx = c1->tx - c0->tx;
	for (i = 0; i < FWD_DROP_MAX; i++)
		d->cnt.drop[i] = c1->drop[i] - c0->drop[i];
	d->st.busy_polls = s1->busy_polls - s0->busy_polls;
	d->st.empty_polls = s1->empty_polls - s0->empty_polls;
	d->st.busy_cycles = s1->busy_cycles - s0->busy_cycles;
	d->st.idle_cycles = s1->idle_cycles - s0->idle_cycles;
	d->st.harness_cycles = s1->harness_cycles - s0->harness_cycles;
	d->window_cycles = run->w.end_tsc - run->w.start_tsc;
}

static void
delta_add(struct lcore_delta *sum, const struct lcore_delta *d)
{
	unsigned int i;

	sum->cnt.rx += d->cnt.rx;
	sum->cnt.tx += d->cnt.tx;
	for (i = 0; i < FWD_DROP_MAX; i++)
		sum->cnt.drop[i] += d->cnt.drop[i];
	sum->st.busy_polls += d->st.busy_polls;
	sum->st.empty_polls += d->st.empty_polls;
	sum->st.busy_cycles += d->st.busy_cycles;
	sum->st.idle_cycles += d->st.idle_cycles;
	sum->st.harness_cycles += d->st.harness_cycles;
}

static void
lcores_write(FILE *f, const struct report *r)
{
	struct lcore_delta d;
	uint64_t dropped;
	unsigned int n, i;

	fprintf(f, "  \"lcores\": [");
	for (n = 0; n < r->nb_lcores; n++) {
		const struct lcore_run *run = &r->runs[n];

		lcore_delta(run, &d);
		for (dropped = 0, i = 0; i < FWD_DROP_MAX; i++)
			dropped += d.cnt.drop[i];
		fprintf(f, "%s\n    {\"lcore\": %u, \"port\": %u, \"queue\": %u, \"packets\": {\"rx\": %" PRIu64
			", \"tx\": %" PRIu64 ", \"dropped\": %" PRIu64 "}, \"polls\": {\"busy\": %" PRIu64
			", \"empty\": %" PRIu64 "}, \"cycles\": {\"busy\": %" PRIu64 ", \"idle\": %" PRIu64
			", \"harness\": %" PRIu64 ", \"window\": %" PRIu64 "}}",
			n ? "," : "", run->lcore_id, run->rx_port, run->queue, d.cnt.rx, d.cnt.tx, dropped,
			d.st.busy_polls, d.st.empty_polls, d.st.busy_cycles, d.st.idle_cycles,
			d.st.harness_cycles, d.window_cycles);
	}
	fprintf(f, "\n  ],\n");
}

void
report_write(FILE *f, const struct report *r)
{
	const struct app_config *c = r->cfg;
	const struct window_sync *s = r->sync;
	struct lcore_delta d, sum;
	uint64_t calls = 0, packets = 0;
	char mac[RTE_ETHER_ADDR_FMT_SIZE];
	unsigned int i, n;

	memset(&sum, 0, sizeof(sum));
	for (n = 0; n < r->nb_lcores; n++) {
		lcore_delta(&r->runs[n], &d);
		delta_add(&sum, &d);
		calls += r->runs[n].lc.cnt.calls;
		packets += r->runs[n].lc.cnt.rx;
	}

	fprintf(f, "{\n  \"schema\": \"perfci-fwd.report/1\",\n  \"build_id\": ");
	json_str(f, PERFCI_BUILD_ID);
	fprintf(f, ",\n  \"dpdk_version\": ");
	json_str(f, rte_version());
	fprintf(f, ",\n  \"lcore\": %u,\n  \"tsc_hz\": %" PRIu64 ",\n", r->lcore, rte_get_tsc_hz());
	rte_ether_format_addr(mac, sizeof(mac), r->tx_mac);
	fprintf(f, "  \"ports\": {\"rx\": %u, \"tx\": %u, \"tx_mac\": \"%s\"},\n",
		r->rx_port, r->tx_port, mac);
	fprintf(f, "  \"mode\": \"%s\",\n  \"stop_reason\": ", c->idle ? "idle" : "forward");
	json_str(f, s->stop_reason != NULL ? s->stop_reason : "not_opened");
	fprintf(f, ",\n  \"config\": {\"harness\": \"%s\", \"pkt_size\": %u, \"flows\": %u, "
		"\"miss_pct\": %u, \"inflight\": %u, \"cold_data\": %s, \"burst\": %d, \"routes\": ",
		c->harness == HARNESS_SELF ? "self" : "ports", c->pkt_size, c->flows,
		c->miss_pct, c->inflight, c->cold_data ? "true" : "false", FWD_BURST);
	if (c->routes_generate != 0)
		fprintf(f, "\"generated:%u\"", c->routes_generate);
	else
		json_str(f, c->routes_path != NULL ? c->routes_path : "default");
	fprintf(f, ", \"warmup\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"duration_s\": %g, "
		"\"idle_polls\": %" PRIu64 "},\n", c->warmup, c->packets, c->duration_s, c->idle_polls);

	fprintf(f, "  \"window\": {\n    \"packets\": {\"rx\": %" PRIu64 ", \"tx\": %" PRIu64
		", \"dropped\": {", sum.cnt.rx, sum.cnt.tx);
	for (i = 0; i < FWD_DROP_MAX; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", fwd_drop_names[i], sum.cnt.drop[i]);
	fprintf(f, "}},\n    \"polls\": {\"busy\": %" PRIu64 ", \"empty\": %" PRIu64 "},\n",
		sum.st.busy_polls, sum.st.empty_polls);
	fprintf(f, "    \"cycles\": {\"busy\": %" PRIu64 ", \"idle\": %" PRIu64 ", \"harness\": %" PRIu64
		", \"window\": %" PRIu64 "}\n  },\n",
		sum.st.busy_cycles, sum.st.idle_cycles, sum.st.harness_cycles, s->end_tsc - s->start_tsc);
	lcores_write(f, r);
	fprintf(f, "  \"total\": {\"fwd_calls\": %" PRIu64 ", \"fwd_packets\": %" PRIu64 "}\n}\n",
		calls, packets);
}
