/* SPDX-License-Identifier: Apache-2.0 */
#ifndef PERFCI_WINDOW_H
#define PERFCI_WINDOW_H

#include <stdint.h>

#include "fwd.h"

/* The poll-loop accounting; "window" values cover the measurement window only. */
struct poll_stats {
	uint64_t busy_polls;
	uint64_t empty_polls;
	uint64_t busy_cycles;
	uint64_t idle_cycles;
	uint64_t harness_cycles;
};

struct window {
	uint64_t start_tsc;
	uint64_t end_tsc;
	uint64_t deadline;		/* --duration: TSC to stop at; 0: none */
	struct poll_stats at_start;
	struct fwd_counters cnt_at_start;
	const char *stop_reason;	/* "packets", "duration", "idle_polls", "signal" */
	int open;
	int closed;
};

/*
 * perf stat --control fd:CTL,ACK: writes "enable"/"disable" and waits for perf's
 * "ack", so that exactly the window is counted. A no-op when ctl_fd < 0.
 * Returns 0 or -1 (errno set).
 */
int perf_control(int ctl_fd, int ack_fd, const char *cmd);

#endif /* PERFCI_WINDOW_H */
