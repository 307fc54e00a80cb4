/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_pause.h>

#include "lcore.h"

#define WAIT_SLEEP_US 20	/* an lcore done early sleeps: perf counts no spinning */

volatile bool force_quit;

static bool
warmed_up(const struct lcore_run *r)
{
	if (r->sync->cfg->idle)
		return r->st.empty_polls >= r->sync->cfg->warmup;
	return r->lc.cnt.rx >= r->sync->cfg->warmup;
}

static const char *
window_done(const struct lcore_run *r, uint64_t now)
{
	if (r->sync->cfg->idle) {
		if (r->st.empty_polls - r->w.at_start.empty_polls >= r->idle_polls)
			return "idle_polls";
	} else if (r->lc.cnt.rx - r->w.cnt_at_start.rx >= r->packets) {
		return "packets";
	}
	if (r->w.deadline != 0 && now >= r->w.deadline)
		return "duration";
	return NULL;
}

/* The last lcore to warm up opens the shared window: perf enable, then the start time. */
static int
sync_open(struct window_sync *s)
{
	const struct app_config *cfg = s->cfg;

	if (perf_control(cfg->perf_ctl_fd, cfg->perf_ack_fd, "enable") < 0) {
		fprintf(stderr, "perf control: enable failed: %s\n", strerror(errno));
		s->failed = true;
		force_quit = true;
		return -1;
	}
	s->start_tsc = rte_rdtsc();
	if (cfg->duration_s > 0)
		s->deadline = s->start_tsc + (uint64_t)(cfg->duration_s * (double)rte_get_tsc_hz());
	__atomic_store_n(&s->open, 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * The last lcore out of its window closes the shared one: the latest lcore's
 * end time, then perf disable. Not its own: lcores stopping at one deadline
 * read the TSC within cycles of each other, and the last to count itself out
 * may have read it first.
 */
static int
sync_close(struct window_sync *s, const char *reason)
{
	const struct app_config *cfg = s->cfg;
	int ret = 0;

	s->end_tsc = __atomic_load_n(&s->last_end_tsc, __ATOMIC_ACQUIRE);
	s->stop_reason = reason;
	if (perf_control(cfg->perf_ctl_fd, cfg->perf_ack_fd, "disable") < 0) {
		fprintf(stderr, "perf control: disable failed: %s\n", strerror(errno));
		s->failed = true;
		ret = -1;
	}
	__atomic_store_n(&s->closed, 1, __ATOMIC_RELEASE);
	return ret;
}

/* Raise the shared window's end to this lcore's, if later. */
static void
note_end(struct window_sync *s, uint64_t end)
{
	uint64_t seen = __atomic_load_n(&s->last_end_tsc, __ATOMIC_RELAXED);

	while (seen < end && !__atomic_compare_exchange_n(&s->last_end_tsc, &seen, end, true,
							  __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

/* This lcore's own window starts at the shared start if it opened it, else when it sees it open. */
static void
window_open(struct lcore_run *r, uint64_t now)
{
	r->w.open = 1;
	r->w.at_start = r->st;
	r->w.cnt_at_start = r->lc.cnt;
	r->w.start_tsc = now;
	r->w.deadline = r->sync->deadline;
}

/*
 * Out of the loop, window open or not: the last lcore out closes the shared
 * window (if it opened); the others sleep until it has, so that nothing runs
 * in the window that the counters do not cover.
 */
static int
finish(struct lcore_run *r, uint64_t now, const char *reason)
{
	struct window_sync *s = r->sync;

	if (r->w.open) {
		r->w.end_tsc = now;
		r->w.closed = 1;
		note_end(s, now);
	}
	r->w.stop_reason = reason;
	if (__atomic_add_fetch(&s->finished, 1, __ATOMIC_ACQ_REL) == s->nb_lcores) {
		if (__atomic_load_n(&s->open, __ATOMIC_ACQUIRE))
			return sync_close(s, reason);
		s->stop_reason = reason;
		return s->failed ? -1 : 0;
	}
	while (__atomic_load_n(&s->finished, __ATOMIC_ACQUIRE) < s->nb_lcores ||
	       (__atomic_load_n(&s->open, __ATOMIC_ACQUIRE) && !__atomic_load_n(&s->closed, __ATOMIC_ACQUIRE)))
		rte_delay_us_sleep(WAIT_SLEEP_US);
	return s->failed ? -1 : 0;
}

/*
 * The poll loop of one lcore. One TSC read per poll attributes the time since
 * the previous read to a busy poll (RX returned packets; fwd_burst ran) or an
 * empty poll. The self harness refills this queue's RX ring in large batches
 * below a low-water mark, timed apart as harness cycles, so that it never
 * counts as forwarding. Before the window opens the lcore forwards as in the
 * window (warm-up), then waits without polling for the others to warm up: each
 * lcore forwards the same packets however late its start (what keeps the sim
 * counts of several lcores identical run to run). After its share it leaves
 * the loop.
 */
int
lcore_main(void *arg)
{
	struct lcore_run *r = arg;
	struct window_sync *s = r->sync;
	struct rte_mbuf *pkts[FWD_BURST];
	uint64_t now, prev;
	bool refill = r->self != NULL && !s->cfg->idle;
	bool ready = false;
	const char *done;
	uint16_t nb;

	prev = rte_rdtsc();
	while (!force_quit) {
		if (unlikely(!r->w.open)) {
			if (!ready && warmed_up(r)) {
				ready = true;
				if (__atomic_add_fetch(&s->ready, 1, __ATOMIC_ACQ_REL) == s->nb_lcores) {
					if (sync_open(s) < 0)
						break;
					window_open(r, s->start_tsc);
					prev = r->w.start_tsc;
				}
			}
			if (ready && !r->w.open) {
				if (!__atomic_load_n(&s->open, __ATOMIC_ACQUIRE)) {
					rte_pause();
					continue;
				}
				window_open(r, rte_rdtsc());
				prev = r->w.start_tsc;
			}
		}
		if (refill && harness_self_low(r->self)) {
			harness_self_refill(r->self);
			now = rte_rdtsc();
			r->st.harness_cycles += now - prev;
			prev = now;
		}
		nb = rte_eth_rx_burst(r->rx_port, r->queue, pkts, FWD_BURST);
		if (nb != 0)
			fwd_burst(&r->lc, pkts, nb);
		now = rte_rdtsc();
		if (nb != 0) {
			r->st.busy_cycles += now - prev;
			r->st.busy_polls++;
		} else {
			r->st.idle_cycles += now - prev;
			r->st.empty_polls++;
		}
		prev = now;
		if (r->w.open && (done = window_done(r, now)) != NULL)
			return finish(r, now, done);
	}
	/* the window ends where the last poll's accounting did: busy + idle + harness = window */
	return finish(r, prev, "signal");
}
