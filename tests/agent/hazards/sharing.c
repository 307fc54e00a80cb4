/*
 * Two threads and 64-byte lines, in the ways that do and do not move a line between cores. The
 * window function is `step`; ./sharing MODE runs ROUNDS steps in each thread (after one step each
 * on a line of its own, see start_together). Nothing synchronises the steps: memhazard orders
 * the two threads' accesses as cores running in lockstep would make them.
 *
 *   counter   both threads increment one counter (a load, then a store)
 *   atomic    both threads add to one counter with a locked add (a read-modify-write)
 *   handoff   thread 0 writes a line, thread 1 reads it
 *   separate  each thread increments a counter of its own, on a line of its own
 *   false     each thread increments a counter of its own, both in one line (false sharing)
 *   single    one thread increments a counter alone
 */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define ROUNDS 1000

struct line {
	volatile int v[16];
} __attribute__((aligned(64)));

static struct line shared, mine[2], warm[2];
static const char *mode;
static int arrived;

__attribute__((noinline)) int
step(volatile int *p, int op)
{
	switch (op) {
	case 0:
		(*p)++; /* two instructions: a load, then a store */
		return 0;
	case 1:
		__atomic_fetch_add(p, 1, __ATOMIC_SEQ_CST);
		return 0;
	case 2:
		*p = 1;
		return 0;
	default:
		return *p;
	}
}

/*
 * Each thread calls step once on a line of its own, so that both forward before either starts
 * the rounds, and waits for the other by spinning (no system call: a thread in one leaves
 * memhazard's rotation).
 */
static void
start_together(int me, int n)
{
	step(&warm[me].v[0], 2);
	__atomic_fetch_add(&arrived, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < n)
		;
}

static void *
run(void *arg)
{
	int me = (int)(long)arg;

	start_together(me, strcmp(mode, "single") == 0 ? 1 : 2);
	for (int i = 0; i < ROUNDS; i++) {
		if (strcmp(mode, "counter") == 0 || strcmp(mode, "single") == 0)
			step(&shared.v[0], 0);
		else if (strcmp(mode, "atomic") == 0)
			step(&shared.v[0], 1);
		else if (strcmp(mode, "handoff") == 0)
			step(&shared.v[0], me == 0 ? 2 : 3);
		else if (strcmp(mode, "separate") == 0)
			step(&mine[me].v[0], 0);
		else /* false */
			step(&shared.v[me * 8], 0);
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	pthread_t t[2];
	int n;

	if (argc != 2)
		return 2;
	mode = argv[1];
	n = strcmp(mode, "single") == 0 ? 1 : 2;
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, run, (void *)i) != 0)
			return 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
