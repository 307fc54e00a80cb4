/*
 * A 4-byte store, one fencing instruction, then an 8-byte load over the store: the load is not
 * contained in the store, so it is blocked if the store is still in the store buffer and reads
 * the cache if the fence made it commit. One noinline function per fence kind; main calls each
 * CALLS times (test_fences.py asserts the exact counts per call).
 */
#include <stdint.h>

#define CALLS 1000

static uint8_t buf[4096] __attribute__((aligned(64)));

#define NARROW_STORE(b) (*(volatile uint32_t *)(b) = 1)
#define WIDE_LOAD(b) ((void)*(volatile uint64_t *)(b))

__attribute__((noinline)) void
no_fence(uint8_t *b)
{
	NARROW_STORE(b);
	WIDE_LOAD(b);
}

/* DPDK's rte_rmb() on x86. */
__attribute__((noinline)) void
lfence(uint8_t *b)
{
	NARROW_STORE(b);
	__asm__ volatile("lfence" ::: "memory");
	WIDE_LOAD(b);
}

/* DPDK's rte_wmb() on x86. */
__attribute__((noinline)) void
sfence(uint8_t *b)
{
	NARROW_STORE(b);
	__asm__ volatile("sfence" ::: "memory");
	WIDE_LOAD(b);
}

/* DPDK's rte_mb() on x86 before 20.11 (now a locked add to the stack: see locked_add). */
__attribute__((noinline)) void
mfence(uint8_t *b)
{
	NARROW_STORE(b);
	__asm__ volatile("mfence" ::: "memory");
	WIDE_LOAD(b);
}

/* A locked add elsewhere (DPDK's rte_smp_mb(): lock addl $0, -128(%rsp)). */
__attribute__((noinline)) void
locked_add(uint8_t *b)
{
	NARROW_STORE(b);
	__asm__ volatile("lock addl $0, 256(%0)" : : "r"(b) : "memory", "cc");
	WIDE_LOAD(b);
}

/* XCHG with memory is locked without a prefix. */
__attribute__((noinline)) void
xchg_mem(uint8_t *b)
{
	uint32_t v = 7;

	NARROW_STORE(b);
	__asm__ volatile("xchgl %0, 256(%1)" : "+r"(v) : "r"(b) : "memory");
	WIDE_LOAD(b);
}

/* A locked read-modify-write of the store's own bytes: its load waits for the drain, not blocked. */
__attribute__((noinline)) void
locked_same_address(uint8_t *b)
{
	*(volatile uint16_t *)b = 1;
	__asm__ volatile("lock addl $1, (%0)" : : "r"(b) : "memory", "cc");
	WIDE_LOAD(b);
}

/* CPUID is serializing. */
__attribute__((noinline)) void
cpuid(uint8_t *b)
{
	uint32_t a = 0, bx, c = 0, d;

	NARROW_STORE(b);
	__asm__ volatile("cpuid" : "+a"(a), "=b"(bx), "+c"(c), "=d"(d) : : "memory");
	WIDE_LOAD(b);
}

/* RDTSCP waits for older loads, not for older stores to be visible. */
__attribute__((noinline)) void
rdtscp(uint8_t *b)
{
	uint32_t lo, hi, aux;

	NARROW_STORE(b);
	__asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
	WIDE_LOAD(b);
}

int
main(void)
{
	for (int i = 0; i < CALLS; i++) {
		no_fence(buf);
		lfence(buf + 512);
		sfence(buf + 1024);
		mfence(buf + 1536);
		locked_add(buf + 2048);
		xchg_mem(buf + 2560);
		locked_same_address(buf + 3072);
		cpuid(buf + 3584);
		rdtscp(buf + 3840);
	}
	return 0;
}
