/*
 * Non-temporal stores, then a load of what they wrote: one noinline function per instruction (the
 * compiler emits each intrinsic as that one instruction; test_nontemporal.py checks the
 * disassembly), main calls every one CALLS times. The AVX functions are VEX-encoded (target
 * "avx"), the others legacy SSE/MMX encodings.
 */
#include <immintrin.h>
#include <stdint.h>

#define CALLS 1000

static uint8_t buf[4 * 4096] __attribute__((aligned(4096)));
/* values read from memory, not built on the stack: no store of the function's own but the pattern's */
static const __m128i v128 = { 2, 2 };
static const __m256i v256 = { 6, 6, 6, 6 };
static const __m256d v256d = { 8.0, 8.0, 8.0, 8.0 };

/* MOVNTI (64-bit), then an 8-byte load of its bytes. */
__attribute__((noinline)) void
movnti_then_load(uint8_t *b)
{
	_mm_stream_si64((long long *)b, 1);
	(void)*(volatile uint64_t *)b;
}

/* MOVNTI (32-bit), then a 4-byte load of its bytes. */
__attribute__((noinline)) void
movnti32_then_load(uint8_t *b)
{
	_mm_stream_si32((int *)b, 1);
	(void)*(volatile uint32_t *)b;
}

/* MOVNTQ (MMX), then an 8-byte load of its bytes. The intrinsic of a constant may be emitted as
 * MOVNTI: the instruction is written out. */
__attribute__((noinline)) void
movntq_then_load(uint8_t *b)
{
	__asm__ volatile("movq %1, %%mm0\n\tmovntq %%mm0, %0\n\temms" : "=m"(*(uint64_t *)b) : "r"(5ULL) : "mm0");
	(void)*(volatile uint64_t *)b;
}

/* MOVNTDQ, then a 16-byte load of its bytes. */
__attribute__((noinline)) void
movntdq_then_load(uint8_t *b)
{
	_mm_stream_si128((__m128i *)b, v128);
	(void)*(volatile __m128i *)b;
}

/* MOVNTPS, then a 4-byte load of one of its floats. */
__attribute__((noinline)) void
movntps_then_load(uint8_t *b)
{
	_mm_stream_ps((float *)b, _mm_set1_ps(3.0f));
	(void)*(volatile float *)(b + 4);
}

/* MOVNTPD, then an 8-byte load of one of its doubles. */
__attribute__((noinline)) void
movntpd_then_load(uint8_t *b)
{
	_mm_stream_pd((double *)b, _mm_set1_pd(4.0));
	(void)*(volatile double *)(b + 8);
}

/* VMOVNTDQ (VEX.256), then a 32-byte load of its bytes. */
__attribute__((noinline, target("avx"))) void
vmovntdq_then_load(uint8_t *b)
{
	_mm256_stream_si256((__m256i *)b, v256);
	(void)*(volatile __m256i *)b;
}

/* VMOVNTPS (VEX.128), then a 16-byte load of its bytes. */
__attribute__((noinline, target("avx"))) void
vmovntps_then_load(uint8_t *b)
{
	_mm_stream_ps((float *)b, _mm_set1_ps(7.0f));
	(void)*(volatile __m128 *)b;
}

/* VMOVNTPD (VEX.256), then an 8-byte load of one of its doubles. */
__attribute__((noinline, target("avx"))) void
vmovntpd_then_load(uint8_t *b)
{
	_mm256_stream_pd((double *)b, v256d);
	(void)*(volatile double *)(b + 24);
}

/* VMOVNTPD (VEX.128) through r8, which needs the three-byte VEX prefix (C4), then a 16-byte load of
 * its bytes. */
__attribute__((noinline, target("avx"))) void
vmovntpd_c4_then_load(uint8_t *b)
{
	register uint8_t *r8 __asm__("r8") = b;

	__asm__ volatile("vmovntpd %1, (%0)" : : "r"(r8), "x"(_mm256_castpd256_pd128(v256d)) : "memory");
	(void)*(volatile __m128d *)b;
}

/* MOVNTI, then a load of other bytes of its line, another of the same line (the first brought it
 * back), and one of the next line (never written non-temporally). */
__attribute__((noinline)) void
movnti_then_line(uint8_t *b)
{
	_mm_stream_si64((long long *)b, 9);
	(void)*(volatile uint64_t *)(b + 32);
	(void)*(volatile uint64_t *)(b + 40);
	(void)*(volatile uint64_t *)(b + 64);
}

/* MOVNTI, then an ordinary store over the same bytes (its request for ownership brings the line
 * back), then a load of them: forwarded from the ordinary store, no reload. (The MOVNTI is written
 * out: the compiler drops the intrinsic's store as dead.) */
__attribute__((noinline)) void
movnti_then_store_then_load(uint8_t *b)
{
	__asm__ volatile("movnti %1, %0" : "=m"(*(uint64_t *)b) : "r"(10ULL));
	*(volatile uint64_t *)b = 11;
	(void)*(volatile uint64_t *)b;
}

/* An ordinary 8-byte store and load (the same as same_size in patterns.c): forwarded. */
__attribute__((noinline)) void
plain_store_then_load(uint8_t *b)
{
	*(volatile uint64_t *)b = 12;
	(void)*(volatile uint64_t *)b;
}

/* MOVNTDQA is a load with a hint, which changes nothing on write-back memory: an ordinary 8-byte
 * store, then MOVNTDQA over it: blocked like any 16-byte load of an 8-byte store. */
__attribute__((noinline, target("sse4.1"))) void
store_then_movntdqa(uint8_t *b)
{
	__m128i v;

	*(volatile uint64_t *)b = 13;
	v = _mm_stream_load_si128((__m128i *)b);
	__asm__ volatile("" : : "x"(v));
}

int
main(void)
{
	static void (*const patterns[])(uint8_t *) = {
		movnti_then_load, movnti32_then_load, movntq_then_load, movntdq_then_load, movntps_then_load,
		movntpd_then_load, vmovntdq_then_load, vmovntps_then_load, vmovntpd_then_load, vmovntpd_c4_then_load,
		movnti_then_line,
		movnti_then_store_then_load, plain_store_then_load, store_then_movntdqa,
	};
	unsigned int i, p;

	for (p = 0; p < sizeof(patterns) / sizeof(patterns[0]); p++)
		for (i = 0; i < CALLS; i++)
			patterns[p](buf + 4096 * (p % 3));
	return 0;
}
