/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perfci-clockcal: a fixed calibration loop on every given CPU at once, one
 * thread pinned to each, timed with the TSC (the clock the dataplane's busy
 * cycles are counted in).
 *
 *   dependent   one multiply-add chain: each iteration waits for the one
 *               before (imul + add latency), so its TSC cycles per iteration
 *               move with the core clock only;
 *   throughput  eight independent chains: bound by the multiplier's
 *               throughput, so they also slow when a sibling hyperthread
 *               takes the core's execution units.
 *
 * Neither loop touches memory: no cache line, no bandwidth, nothing the
 * dataplane's own contention could move. Every thread runs the same loop at
 * the same time (a barrier before each), ROUNDS times; each figure is the
 * thread's median round. Every chain lives in a register (the empty asm
 * statements): one multiply and one add per chain and iteration, never
 * vectorised, folded or spilled.
 *
 *   perfci-clockcal CPU[,CPU...] [ITERATIONS [ROUNDS]]
 *
 * prints one JSON document: {"schema": "perfci-clockcal/1", "iterations": N,
 * "rounds": R, "cpus": [{"cpu": C, "ran_on": C, "dependent": X,
 * "throughput": Y}, ...]}, X and Y in TSC cycles per iteration. Exit status 2
 * on bad arguments or a CPU this process may not run on, 1 on other failures.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#define MAX_CPUS 256
#define MAX_ROUNDS 64
#define MUL 0x9E3779B97F4A7C15ULL	/* odd: the chains never collapse to a constant */
#define DEFAULT_ITERATIONS (1ULL << 22)
#define DEFAULT_ROUNDS 5

struct worker {
	pthread_t thread;
	int cpu;
	int ran_on;
	int error;	/* errno of pinning, 0 when pinned */
	double dependent[MAX_ROUNDS];
	double throughput[MAX_ROUNDS];
	uint64_t sink;	/* the chains' results, kept so that no loop is dead code */
};

static pthread_barrier_t start;
static uint64_t iterations = DEFAULT_ITERATIONS;
static unsigned int rounds = DEFAULT_ROUNDS;

static uint64_t
dependent_chain(uint64_t n)
{
	uint64_t x = 1, i;

	for (i = 0; i < n; i++) {
		x = x * MUL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

static uint64_t
independent_chains(uint64_t n)
{
	uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8, i;

	for (i = 0; i < n; i++) {
		a = a * MUL + 1;
		b = b * MUL + 1;
		c = c * MUL + 1;
		d = d * MUL + 1;
		e = e * MUL + 1;
		f = f * MUL + 1;
		g = g * MUL + 1;
		h = h * MUL + 1;
		__asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
	}
	return a + b + c + d + e + f + g + h;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
median(double *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *
run(void *arg)
{
	struct worker *w = arg;
	cpu_set_t set;
	uint64_t t0;
	unsigned int r;

	CPU_ZERO(&set);
	CPU_SET(w->cpu, &set);
	w->error = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	pthread_barrier_wait(&start);	/* every thread pinned (or failed) before any loop */
	if (w->error != 0)
		return NULL;
	for (r = 0; r < rounds; r++) {
		pthread_barrier_wait(&start);
		t0 = __rdtsc();
		w->sink += dependent_chain(iterations);
		w->dependent[r] = (double)(__rdtsc() - t0) / (double)iterations;
		pthread_barrier_wait(&start);
		t0 = __rdtsc();
		w->sink += independent_chains(iterations);
		w->throughput[r] = (double)(__rdtsc() - t0) / (double)iterations;
	}
	w->ran_on = sched_getcpu();
	return NULL;
}

static int
parse_cpus(const char *text, struct worker *w)
{
	char *copy = strdup(text), *tok, *save = NULL, *end;
	int n = 0;

	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		long cpu = strtol(tok, &end, 10);

		if (*end != '\0' || end == tok || cpu < 0 || cpu >= CPU_SETSIZE || n == MAX_CPUS) {
			n = -1;
			break;
		}
		w[n++].cpu = (int)cpu;
	}
	free(copy);
	return n;
}

int
main(int argc, char **argv)
{
	static struct worker w[MAX_CPUS];
	int n, i, failed = 0;
	char *end;

	if (argc < 2 || argc > 4 || (n = parse_cpus(argv[1], w)) <= 0) {
		fprintf(stderr, "usage: %s CPU[,CPU...] [ITERATIONS [ROUNDS]]\n", argv[0]);
		return 2;
	}
	if (argc > 2) {
		iterations = strtoull(argv[2], &end, 10);
		if (*end != '\0' || iterations == 0) {
			fprintf(stderr, "ITERATIONS must be a positive integer, got %s\n", argv[2]);
			return 2;
		}
	}
	if (argc > 3) {
		rounds = (unsigned int)strtoul(argv[3], &end, 10);
		if (*end != '\0' || rounds == 0 || rounds > MAX_ROUNDS) {
			fprintf(stderr, "ROUNDS must be 1 to %d, got %s\n", MAX_ROUNDS, argv[3]);
			return 2;
		}
	}
	if (pthread_barrier_init(&start, NULL, (unsigned int)n) != 0)
		return 1;
	for (i = 0; i < n; i++) {
		if (pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) {
			fprintf(stderr, "cannot start a thread for CPU %d\n", w[i].cpu);
			return 1;	/* the others wait at the barrier: exiting ends them */
		}
	}
	for (i = 0; i < n; i++)
		pthread_join(w[i].thread, NULL);
	for (i = 0; i < n; i++) {
		if (w[i].error != 0) {
			fprintf(stderr, "cannot pin a thread to CPU %d: %s\n", w[i].cpu, strerror(w[i].error));
			failed = 1;
		}
	}
	if (failed)
		return 2;
	printf("{\"schema\": \"perfci-clockcal/1\", \"iterations\": %llu, \"rounds\": %u, \"cpus\": [",
	       (unsigned long long)iterations, rounds);
	for (i = 0; i < n; i++)
		printf("%s{\"cpu\": %d, \"ran_on\": %d, \"dependent\": %.4f, \"throughput\": %.4f}",
		       i ? ", " : "", w[i].cpu, w[i].ran_on, median(w[i].dependent, rounds),
		       median(w[i].throughput, rounds));
	printf("]}\n");
	return fflush(stdout) == 0 ? 0 : 1;
}
