/*
 * Memory-access patterns with known store-buffer outcomes, one noinline function each; main calls
 * every one CALLS times. Accesses go through volatile pointers so that the compiler emits each of
 * them with exactly the written size (test_hazards.py asserts the exact counts per call).
 */
#include <stdint.h>

#define CALLS 1000

static uint8_t buf[3 * 4096] __attribute__((aligned(4096)));

/* An 8-byte store, then an 8-byte load of the same bytes: forwarded, no block. */
__attribute__((noinline)) void
same_size(uint8_t *b)
{
	*(volatile uint64_t *)b = 1;
	(void)*(volatile uint64_t *)b;
}

/* Two 2-byte stores, then a 4-byte load over both: not in one store, blocked. */
__attribute__((noinline)) void
narrow_then_wide(uint8_t *b)
{
	*(volatile uint16_t *)b = 1;
	*(volatile uint16_t *)(b + 2) = 2;
	(void)*(volatile uint32_t *)b;
}

/* An 8-byte load across a 64-byte line (bytes 60-67) and an 8-byte store across the next one. */
__attribute__((noinline)) void
line_split(uint8_t *b)
{
	(void)*(volatile uint64_t *)(b + 60);
	*(volatile uint64_t *)(b + 124) = 3;
}

/* A 4-byte store, then a 4-byte load 4096 bytes further: same bits 11:0, other page. */
__attribute__((noinline)) void
alias_4k(uint8_t *b)
{
	*(volatile uint32_t *)(b + 256) = 4;
	(void)*(volatile uint32_t *)(b + 4096 + 256);
}

/* An 8-byte store, three younger stores elsewhere, then a load of the first store's bytes. */
__attribute__((noinline)) void
evicted(uint8_t *b)
{
	*(volatile uint64_t *)b = 1;
	*(volatile uint64_t *)(b + 64) = 2;
	*(volatile uint64_t *)(b + 128) = 3;
	*(volatile uint64_t *)(b + 192) = 4;
	(void)*(volatile uint64_t *)b;
}

typedef long long v2di __attribute__((vector_size(16)));

/* A 16-byte aligned store, then a 4-byte load at offset 6 (crosses an 8-byte boundary inside it):
 * Intel cores forward a narrow load from a vector store only within 8-byte chunks; Zen 4 forwards
 * any contained load. */
__attribute__((noinline)) void
vector_then_straddling(uint8_t *b)
{
	*(volatile v2di *)(b + 512) = (v2di){ 5, 6 };
	(void)*(volatile uint32_t *)(b + 512 + 6);
}

/* A 4-byte store, N NOPs, then an 8-byte load over it (not contained in the store: blocked while the
 * store is in flight). How long it is in flight is the store-commit rule's business. */
#define STORE_NOPS_LOAD(name, nops)                                            \
	__attribute__((noinline)) void name(uint8_t *b)                        \
	{                                                                      \
		*(volatile uint32_t *)(b + 768) = 7;                           \
		__asm__ volatile(".rept " #nops "\n\tnop\n\t.endr" ::: "memory"); \
		(void)*(volatile uint64_t *)(b + 768);                         \
	}
STORE_NOPS_LOAD(store_10_nops_load, 10)
STORE_NOPS_LOAD(store_40_nops_load, 40)
STORE_NOPS_LOAD(store_300_nops_load, 300)

/* 20 8-byte stores to other lines queue ahead of the 4-byte store, then 70 NOPs and the 8-byte load:
 * under the "time" rule the store commits only after the 20 before it, at the family's commit rate. */
__attribute__((noinline)) void
queued_store_70_nops_load(uint8_t *b)
{
#pragma GCC unroll 20 /* back to back, one instruction each: they queue for the commit port */
	for (int i = 0; i < 20; i++)
		*(volatile uint64_t *)(b + 1024 + 64 * i) = i;
	*(volatile uint32_t *)(b + 768) = 7;
	__asm__ volatile(".rept 70\n\tnop\n\t.endr" ::: "memory");
	(void)*(volatile uint64_t *)(b + 768);
}

int
main(void)
{
	for (int i = 0; i < CALLS; i++) {
		same_size(buf);
		narrow_then_wide(buf + 1024);
		line_split(buf + 2048);
		alias_4k(buf);
		vector_then_straddling(buf);
		evicted(buf + 8192);
		store_10_nops_load(buf);
		store_40_nops_load(buf);
		store_300_nops_load(buf);
		queued_store_70_nops_load(buf + 4096);
	}
	return 0;
}
