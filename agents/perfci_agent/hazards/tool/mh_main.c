/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memhazard: a valgrind tool that replays, in program order, every load and
 * store made while one function (default fwd_burst) and what it calls run,
 * through a model of a core's store buffer, and counts the memory hazards a
 * PMU would show as stalls:
 *
 *   sf_blocked   loads that overlap a store still in the store buffer and
 *                cannot take their bytes from it (the family's forwarding
 *                rules below): the load waits for the store to commit;
 *   sf_forwarded loads served by store forwarding (no stall, for reference);
 *   split_loads, split_stores
 *                accesses that cross a 64-byte cache line;
 *   alias_4k     loads that overlap no in-flight store but match one in
 *                address bits 11:0 (4K aliasing);
 *   nt_reloads   loads of a line a non-temporal store (MOVNTI, MOVNTQ,
 *                MOVNTDQ, MOVNTPS, MOVNTPD, VMOVNTDQ, VMOVNTPS, VMOVNTPD)
 *                wrote: never forwarded, a memory round trip (see
 *                "Non-temporal stores" below).
 *
 * Every hazard is also counted per instruction address and reported with its
 * function (the innermost inlined one) and source line.
 *
 * The window is callgrind's --toggle-collect: it opens at the function's first
 * instruction (recording the stack pointer) and closes at the first superblock
 * whose stack pointer is above it (the function returned). Instructions in the
 * window are counted too, in all and by function, so one run yields
 * instructions per packet, where they were spent, and the hazards; the counts
 * are exact and identical from run to run.
 *
 * With several threads (one per forwarding lcore) it also counts the cache-line
 * transfers a coherent cache would make between them (see "Sharing" below):
 *
 *   line_transfers  stores (and read-modify-writes) to a 64-byte line that
 *                   another thread holds a copy of: the store must take the
 *                   line from that thread's cache or invalidate its copy;
 *   read_transfers  loads of a line another thread wrote since this thread
 *                   last had it: the data comes from the other core.
 *
 * The store buffer holds the last N stores (N per family). A store also leaves
 * it when it has committed to L1D, by one of two rules (--commit-rule, see
 * "Store commit" below): "time" (the default) estimates when it retired and
 * committed from the instructions run since, at the family's widths; "rob"
 * lets it stay until more than ROB instructions have executed after it. Every
 * blocked load also records its distance (in instructions) from its store, per
 * site, so a reader can judge how close to the edge a block is. Leaving
 * the window drains it too (the code between two windows runs hundreds of
 * instructions). Fences drain it only where the manuals say the stores before
 * them must have committed (see "Fences" below). Each thread has a store
 * buffer and an instruction clock of its own, as each lcore is a core of its
 * own: one thread's hazards do not depend on when valgrind ran the others.
 */

#include "pub_tool_basics.h"
#include "pub_tool_debuginfo.h"
#include "pub_tool_hashtable.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_machine.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_vki.h"

#define MH_LINE 64
#define MH_PAGE_MASK 0xfffUL
#define MH_MAX_STORE_BUFFER 256
#define MH_MAX_SHARERS 64       /* threads 1..64 have a bit in a line's sharer mask */
#define MH_LINE_TABLE (1u << 19) /* lines tracked for sharing: 32 MiB of data, 12 MiB of table */

/* ------------------------------------------------------------------ */
/* Microarchitecture families                                          */
/* ------------------------------------------------------------------ */

struct mh_access {
	Addr addr;
	UWord size;
	ULong seq; /* instruction number in the window's count */
	ULong committed_at; /* a store, rule "time": when it has committed, in ticks (see "Store commit") */
	Bool nt; /* a non-temporal store: nothing forwards from it */
};

typedef Bool (*mh_forward_fn)(const struct mh_access *st, const struct mh_access *ld);

struct mh_family {
	const HChar *name;
	UInt store_buffer; /* store buffer entries */
	UInt rob;          /* reorder buffer entries */
	mh_forward_fn forwards; /* the load is contained in the store: can it forward? */
	UInt width;        /* instructions allocated and retired per cycle, at best */
	UInt commit_rate;  /* stores committed to L1D per cycle, at best */
	UInt latency;      /* cycles from a store's allocation to its commit, alone in an idle pipeline */
};

static Bool
contained(const struct mh_access *st, const struct mh_access *ld)
{
	return ld->addr >= st->addr && ld->addr + ld->size <= st->addr + st->size;
}

/*
 * Intel cores from Sandy Bridge on (Skylake-SP, Ice Lake-SP / Sunny Cove,
 * Sapphire Rapids / Golden Cove): Intel 64 and IA-32 Architectures
 * Optimization Reference Manual, "Store Forwarding" and "Store-to-Load-
 * Forwarding Restriction on Size and Alignment" (Assembly/Compiler Coding
 * Rules on store forwarding), with the per-size cases measured in Agner Fog's
 * "The microarchitecture of Intel, AMD and VIA CPUs", "Store forwarding
 * stalls" (Skylake and Ice Lake chapters):
 *  - a store of 8 bytes or less forwards to any load contained in it,
 *    whatever the alignment;
 *  - a wider (vector) store forwards to a load of the same address and size,
 *    to a naturally aligned half, quarter, ... of an aligned store, and to a
 *    load of 8 bytes or less that does not cross an 8-byte boundary;
 *  - a load that needs bytes of several stores, or of a store and the cache,
 *    never forwards (it is not contained in one store: decided by the caller).
 */
static Bool
intel_forwards(const struct mh_access *st, const struct mh_access *ld)
{
	if (st->size <= 8)
		return True;
	if (ld->addr == st->addr && ld->size == st->size)
		return True;
	if ((st->addr % st->size) == 0 && (st->size % ld->size) == 0 &&
	    ((ld->addr - st->addr) % ld->size) == 0)
		return True;
	return ld->size <= 8 && (ld->addr >> 3) == ((ld->addr + ld->size - 1) >> 3);
}

/*
 * AMD Zen 4 (family 19h): Software Optimization Guide for AMD Family 19h
 * Processors (pub. 56665), "Load-Store Unit", store-to-load forwarding: a load
 * forwards from an older store that contains all of its bytes, with no
 * particular alignment relative to the store; a load that needs bytes of more
 * than one store (or of a store and the cache) waits for them to commit.
 */
static Bool
zen_forwards(const struct mh_access *st, const struct mh_access *ld)
{
	(void)st;
	(void)ld;
	return True;
}

/*
 * Store buffer and reorder buffer sizes as the vendors publish them: Intel's
 * optimization manual ("Ice Lake Client/Server microarchitecture": 72 store
 * buffer entries, 352 ROB; "Golden Cove microarchitecture": 114 and 512;
 * "Skylake Server microarchitecture": 56 and 224); AMD's Zen 4 guide: 64 store
 * queue entries, 320 ROB entries.
 *
 * The store-commit rule "time" (see "Store commit") needs three more figures:
 *  - width, instructions allocated (renamed) per cycle at best, the narrowest
 *    of the pipeline's in-order stages, NOPs included: Intel's optimization
 *    manual gives 4 uops per cycle for Skylake Server, 5 for Sunny Cove (its
 *    "Ice Lake Client microarchitecture" section: allocation widened from 4)
 *    and 6 for Golden Cove; AMD's Zen 4 guide (pub. 56665, dispatch): 6
 *    macro-ops per cycle.
 *  - commit_rate, stores written to L1D per cycle: 1 on Skylake Server (one
 *    store data port, Intel's manual); 2 on Sunny Cove and Golden Cove (two
 *    store data ports and two stores per cycle, Intel's manual; Agner Fog's
 *    microarchitecture guide, Ice Lake chapter, sees the second only for
 *    stores to the same cache line); 2 on Zen 4 (AMD's guide, load-store
 *    unit: at most two of its three memory operations per cycle are stores).
 *  - latency, cycles from a store's allocation to its commit when nothing
 *    older holds it up: documented by neither vendor. The estimate is the
 *    store's data from an L1D load (load-to-use latency 5 cycles on Sunny Cove
 *    and Golden Cove, 4-5 on Skylake, 4 on Zen 4: Intel's manual, "L1 data
 *    cache", and AMD's guide, "Load-Store Unit") plus about 6 cycles of
 *    scheduling, execution, retirement and the L1D write (Agner Fog's
 *    microarchitecture guide: the pipeline's stages after rename). It is a
 *    best case: the rule never keeps a store longer for a slow older
 *    instruction, so "time" errs towards fewer blocks, "rob" towards more.
 */
static const struct mh_family families[] = {
	{ "intel-icx", 72, 352, intel_forwards, 5, 2, 11 },
	{ "intel-spr", 114, 512, intel_forwards, 6, 2, 11 },
	{ "intel-skx", 56, 224, intel_forwards, 4, 1, 10 },
	{ "amd-zen4", 64, 320, zen_forwards, 6, 2, 10 },
};

/* ------------------------------------------------------------------ */
/* Options and state                                                   */
/* ------------------------------------------------------------------ */

static const HChar *clo_window_fn = "fwd_burst";
static const HChar *clo_out_file = NULL;
static const HChar *clo_family = "intel-icx";
static const HChar *clo_commit_rule = "time";
static Long clo_store_buffer = 0; /* 0: the family's */
static Long clo_rob = 0;
static Long clo_lcores = 1; /* forwarding threads to wait for before any access is applied */

static const struct mh_family *family;
static UInt sb_size, rob_size;
static Bool commit_by_time; /* --commit-rule=time (else rob) */
static Bool options_ok; /* post_clo_init accepted the options: mh_fini writes nothing before */

/* Read by the instrumented code (guards and the instruction count). */
static ULong collecting;
static ULong window_instrs; /* of every thread: each thread's own clock is this minus its skew */

/* The store buffer: a ring of the youngest stores, newest at head - 1. */
struct mh_store_buffer {
	struct mh_access entry[MH_MAX_STORE_BUFFER];
	UInt head, used;
	ULong last_commit; /* rule "time": when the youngest store commits, in ticks (0: none queued) */
};

struct mh_thread {
	ULong on;
	Addr sp;      /* stack pointer at the window function's first instruction */
	ULong skew;   /* window instructions other threads ran while this one waited */
	ULong out_at; /* window_instrs when this thread last stopped running */
	Bool forwards; /* has opened a window */
	Bool in_syscall, gone;
	ULong base;   /* virtual time at which it joined the others, minus its own clock then */
	struct mh_store_buffer sb; /* each core has its own */
	VgHashTable *nt_lines; /* lines its non-temporal stores took out of the caches (see "Non-temporal stores") */
	UInt nt_count;         /* entries in nt_lines */
};
static struct mh_thread *threads;
static ThreadId running_tid;

enum mh_kind {
	MH_SF_BLOCKED, MH_SF_FORWARDED, MH_SPLIT_LOAD, MH_SPLIT_STORE, MH_ALIAS_4K, MH_LINE_TRANSFER, MH_READ_TRANSFER,
	MH_NT_RELOAD, MH_KINDS
};
static const HChar *const kind_names[MH_KINDS] = {
	"sf_blocked", "sf_forwarded", "split_loads", "split_stores", "alias_4k", "line_transfers", "read_transfers",
	"nt_reloads",
};

static ULong totals[MH_KINDS];
static ULong windows, loads, stores, drains;
static ULong nt_stores, nt_untracked;

/*
 * Hazards per instruction address, and for a blocked load the distances
 * (instructions from its store to it): the smallest, the largest, and how
 * many of each distance below MH_DIST_BUCKETS (for the median; one bucket
 * holds the larger ones), allocated at a site's first block.
 */
#define MH_DIST_BUCKETS 1024
typedef struct {
	VgHashNode node; /* key: instruction address */
	ULong count[MH_KINDS];
	ULong dist_min, dist_max;
	ULong *dist; /* [MH_DIST_BUCKETS] */
} mh_site;
static VgHashTable *sites;

static mh_site *
count_site(Addr iaddr, enum mh_kind kind)
{
	mh_site *s = VG_(HT_lookup)(sites, iaddr);

	if (s == NULL) {
		s = VG_(calloc)("memhazard.site", 1, sizeof(*s));
		s->node.key = iaddr;
		VG_(HT_add_node)(sites, s);
	}
	s->count[kind]++;
	totals[kind]++;
	return s;
}

static void
count_block(Addr iaddr, ULong distance)
{
	mh_site *s = count_site(iaddr, MH_SF_BLOCKED);

	if (s->dist == NULL) {
		s->dist = VG_(calloc)("memhazard.dist", MH_DIST_BUCKETS, sizeof(*s->dist));
		s->dist_min = distance;
	}
	s->dist_min = distance < s->dist_min ? distance : s->dist_min;
	s->dist_max = distance > s->dist_max ? distance : s->dist_max;
	s->dist[distance < MH_DIST_BUCKETS ? distance : MH_DIST_BUCKETS - 1]++;
}

/* The median distance of a site's blocks (MH_DIST_BUCKETS - 1: that many or more). */
static ULong
dist_median(const mh_site *s)
{
	ULong seen = 0, d;

	for (d = 0; d < MH_DIST_BUCKETS - 1; d++) {
		seen += s->dist[d];
		if (2 * seen >= s->count[MH_SF_BLOCKED])
			return d;
	}
	return d;
}

static struct mh_thread *
me(void)
{
	return &threads[running_tid];
}

/* This thread's own instruction clock: what it has run in windows, not what others ran. */
static ULong
own_clock(UWord pending)
{
	return window_instrs + pending - me()->skew;
}

static void
drain(void)
{
	me()->sb.used = 0;
	me()->sb.last_commit = 0;
	drains++;
}

/* ------------------------------------------------------------------ */
/* Fences                                                              */
/* ------------------------------------------------------------------ */

/*
 * VEX turns MFENCE, LFENCE, SFENCE, CPUID and RDTSCP alike into one
 * Imbe_Fence (guest_amd64_toIR.c), so the tool tells them apart by the
 * instruction's bytes. What each does to the store buffer:
 *
 *  - MFENCE: every load and store before it is globally visible before any
 *    after it (Intel SDM vol. 2, MFENCE; AMD APM vol. 3, MFENCE): drains.
 *  - CPUID (and any other serializing instruction): "all modifications to
 *    flags, registers, and memory by previous instructions are completed and
 *    all buffered writes are drained to memory" (Intel SDM vol. 3A,
 *    "Serializing Instructions"): drains. An Imbe_Fence of bytes the tool
 *    does not recognise is taken as one.
 *  - LFENCE: waits for earlier instructions to complete locally, but "an
 *    LFENCE that follows an instruction that stores to memory might complete
 *    before the data being stored have become globally visible" (Intel SDM
 *    vol. 2, LFENCE): the store stays in the buffer, a later load still finds
 *    it. DPDK's rte_rmb() on x86.
 *  - SFENCE: orders stores against stores only (Intel SDM vol. 2, SFENCE;
 *    vol. 3A, "Memory Ordering in P6 and More Recent Processor Families":
 *    loads may be reordered with older stores, and SFENCE does not order
 *    loads): the store stays. DPDK's rte_wmb() on x86.
 *  - RDTSCP: waits for earlier instructions and loads, "but it does not wait
 *    for previous stores to be globally visible" (Intel SDM vol. 2, RDTSCP):
 *    the store stays.
 *  - A locked instruction (LOCK prefix, or XCHG with memory: an IRCAS in
 *    VEX's IR) is a full barrier (Intel SDM vol. 3A, same section: "locked
 *    instructions have a total order", "loads and stores are not reordered
 *    with locked instructions"; AMD APM vol. 2, "Memory Ordering", the same
 *    for locked instructions): the buffer drains before its load, and its own
 *    store commits with it.
 */
enum mh_fence { MH_MFENCE, MH_LFENCE, MH_SFENCE, MH_RDTSCP, MH_SERIALIZING, MH_LOCKED, MH_FENCE_KINDS };
static const HChar *const fence_names[MH_FENCE_KINDS] = { "mfence", "lfence", "sfence", "rdtscp", "serializing", "locked" };
static const Bool fence_drains[MH_FENCE_KINDS] = { True, False, False, False, True, True };
static ULong fences[MH_FENCE_KINDS];

/* The fence kind of the instruction at a (len bytes) that VEX gave an Imbe_Fence: the encodings
 * end in 0F AE /5 /6 /7 with a register ModRM (LFENCE, MFENCE, SFENCE), 0F 01 F9 (RDTSCP). */
static enum mh_fence
fence_kind(Addr a, UInt len)
{
	const UChar *code = (const UChar *)a;

	if (len >= 3 && code[len - 3] == 0x0F && code[len - 2] == 0xAE && (code[len - 1] >> 6) == 3) {
		switch ((code[len - 1] >> 3) & 7) {
		case 5: return MH_LFENCE;
		case 6: return MH_MFENCE;
		case 7: return MH_SFENCE;
		}
	}
	if (len >= 3 && code[len - 3] == 0x0F && code[len - 2] == 0x01 && code[len - 1] == 0xF9)
		return MH_RDTSCP;
	return MH_SERIALIZING;
}

static void
on_fence(UWord kind)
{
	fences[kind]++;
	if (fence_drains[kind])
		drain();
}

/* ------------------------------------------------------------------ */
/* Non-temporal stores                                                 */
/* ------------------------------------------------------------------ */

/*
 * MOVNTI, MOVNTQ, MOVNTDQ, MOVNTPS, MOVNTPD and their VEX forms VMOVNTDQ,
 * VMOVNTPS, VMOVNTPD store with a non-temporal hint, "implemented by using a
 * write combining (WC) memory type protocol": "the processor does not write
 * the data into the cache hierarchy, nor does it fetch the corresponding
 * cache line from memory" (Intel SDM vol. 2, MOVNTI, MOVNTDQ, MOVNTPS,
 * MOVNTPD); on write-back memory a line the caches hold is updated in place
 * or evicted and the data written to memory with WC semantics, the latter on
 * the processors Intel's optimization manual names ("Memory Type and
 * Non-temporal Stores"; "The Non-temporal Store Instructions": written around
 * the cache, no read for ownership). AMD's APM (vol. 3, MOVNTI and the
 * others) likewise treats them as write-combining writes. Store forwarding
 * is a write-back store's (the forwarding rules above); a load of bytes held
 * in a WC buffer waits until the buffer has gone to memory, then reads the
 * line from there. So in the model, on every family: nothing forwards from a
 * non-temporal store in the buffer, and a load of a line a non-temporal store
 * wrote (its bytes or others of the line: the line left the caches) is an
 * nt_reload, counted once: the load brings the line back, as an ordinary
 * store to the line does (its request for ownership). Measured on an Intel
 * Xeon (family 6 model 207) and an AMD EPYC (family 26), one per packet: an
 * 8-byte MOVNTI then a load of its bytes costs about 1500 and 40 cycles per
 * packet, against 7-14 for a store-forward block.
 *
 * VEX gives these a plain IR store (Ist_Store), so the tool tells them by
 * their bytes: after legacy prefixes and REX, 0F C3 (MOVNTI), 0F E7 (MOVNTQ;
 * with 66, MOVNTDQ), 0F 2B (MOVNTPS; with 66, MOVNTPD), or a two- or
 * three-byte VEX prefix (C5, C4 with opcode map 0F) then E7 or 2B with its pp
 * field none or 66. (V)MOVNTDQA is a load: with write-back memory its hint
 * changes nothing (Intel SDM vol. 2, MOVNTDQA), and it is an ordinary load
 * here. Lines are tracked per thread and forgotten when a window opens (code
 * between windows, not followed, may have loaded them); past
 * MH_NT_LINES_MAX lines, more are counted as nt_untracked.
 */
#define MH_NT_LINES_MAX (1u << 20)

static Bool
is_nt_store(Addr a, UInt len)
{
	const UChar *p = (const UChar *)a, *end = p + len;
	UInt pp = 0;
	Bool vex = False;

	for (; p < end; p++) { /* legacy prefixes: 66 (and F2/F3) select the instruction */
		if (*p == 0x66)
			pp = pp ? pp : 1;
		else if (*p == 0xF3 || *p == 0xF2)
			pp = *p == 0xF3 ? 2 : 3;
		else if (*p != 0xF0 && *p != 0x67 && *p != 0x2E && *p != 0x36 && *p != 0x3E && *p != 0x26 && *p != 0x64 &&
			 *p != 0x65)
			break;
	}
	if (p < end && (*p & 0xF0) == 0x40)
		p++; /* REX */
	if (end - p >= 3 && *p == 0xC5) { /* R.vvvv.L.pp, opcode map 0F */
		pp = p[1] & 3;
		vex = True;
		p += 2;
	} else if (end - p >= 4 && *p == 0xC4) { /* R.X.B.mmmmm, W.vvvv.L.pp */
		if ((p[1] & 0x1F) != 1)
			return False;
		pp = p[2] & 3;
		vex = True;
		p += 3;
	} else if (end - p >= 2 && *p == 0x0F) {
		p++;
	} else {
		return False;
	}
	if (p >= end || pp > 1)
		return False;
	switch (*p) {
	case 0xC3: return !vex && pp == 0; /* MOVNTI */
	case 0xE7:                         /* MOVNTQ, MOVNTDQ, VMOVNTDQ */
	case 0x2B: return True;            /* MOVNTPS, MOVNTPD, VMOVNTPS, VMOVNTPD */
	default: return False;
	}
}

typedef struct {
	VgHashNode node; /* key: line address */
} mh_nt_line;

/* Note the lines a store wrote: a non-temporal one takes them out of the caches, an ordinary one
 * brings them back. */
static void
nt_lines_store(struct mh_thread *t, Addr addr, UWord size, Bool nt)
{
	Addr line;

	if (!nt && t->nt_count == 0)
		return;
	for (line = addr / MH_LINE; line <= (addr + size - 1) / MH_LINE; line++) {
		if (nt) {
			if (t->nt_lines == NULL)
				t->nt_lines = VG_(HT_construct)("memhazard.nt_lines");
			if (VG_(HT_lookup)(t->nt_lines, line) != NULL)
				continue;
			if (t->nt_count >= MH_NT_LINES_MAX) {
				nt_untracked++;
				continue;
			}
			mh_nt_line *n = VG_(malloc)("memhazard.nt_line", sizeof(*n));
			n->node.key = line;
			VG_(HT_add_node)(t->nt_lines, n);
			t->nt_count++;
		} else {
			mh_nt_line *n = VG_(HT_remove)(t->nt_lines, line);

			if (n != NULL) {
				VG_(free)(n);
				t->nt_count--;
			}
		}
	}
}

/* Did a non-temporal store write a line of this load? The load brings them back. */
static Bool
nt_lines_load(struct mh_thread *t, Addr addr, UWord size)
{
	Bool hit = False;
	Addr line;

	if (t->nt_count == 0)
		return False;
	for (line = addr / MH_LINE; line <= (addr + size - 1) / MH_LINE; line++) {
		mh_nt_line *n = VG_(HT_remove)(t->nt_lines, line);

		if (n != NULL) {
			VG_(free)(n);
			t->nt_count--;
			hit = True;
		}
	}
	return hit;
}

static void
nt_lines_forget(struct mh_thread *t)
{
	if (t->nt_count == 0)
		return;
	VG_(HT_destruct)(t->nt_lines, VG_(free));
	t->nt_lines = NULL;
	t->nt_count = 0;
}

/* ------------------------------------------------------------------ */
/* The model (called from instrumented code, only inside the window)   */
/* ------------------------------------------------------------------ */

static Bool
overlaps(Addr a, UWord as, Addr b, UWord bs)
{
	return a < b + bs && b < a + as;
}

static Bool
crosses_line(Addr a, UWord size)
{
	return (a & (MH_LINE - 1)) + size > MH_LINE;
}

/* Page offsets overlap (bits 11:0), the addresses do not. */
static Bool
aliases_4k(const struct mh_access *st, const struct mh_access *ld)
{
	Addr s = st->addr & MH_PAGE_MASK, l = ld->addr & MH_PAGE_MASK;

	return overlaps(s, st->size, l, ld->size) || overlaps(s + MH_PAGE_MASK + 1, st->size, l, ld->size) ||
	       overlaps(s, st->size, l + MH_PAGE_MASK + 1, ld->size);
}

/* ------------------------------------------------------------------ */
/* Store commit                                                        */
/* ------------------------------------------------------------------ */

/*
 * When has a store left the buffer (committed to L1D, where a load reads it
 * from the cache)? Both rules count time in the thread's own instructions
 * only, so the counts are the same on every run and every host.
 *
 *  - rob: it stays while no more than ROB instructions have executed after
 *    it. An upper bound of sorts (the ROB full of older work) that ignores
 *    time: a 4-byte store, 300 NOPs, an 8-byte load is blocked (301 < 352 on
 *    intel-icx) though the store retired and committed some 60 cycles of
 *    NOPs (at 5 per cycle) before the load.
 *  - time: instructions run at the family's width, so instruction i is
 *    allocated at cycle i / width; a store retires `latency` cycles after its
 *    allocation and commits then, or one commit slot (1 / commit_rate cycles)
 *    after the store before it, whichever is later. So a store is in flight
 *    for about latency * width + (stores queued ahead) * width / commit_rate
 *    instructions. Time is kept in ticks, 1 / (width * commit_rate) of a
 *    cycle, so every figure is an integer: an instruction is commit_rate
 *    ticks, a commit slot width ticks.
 *
 * With either rule a store also leaves once N younger stores have pushed it
 * out of the N-entry buffer (on_store).
 */
static ULong
commit_time(const struct mh_store_buffer *sb, ULong seq)
{
	ULong retired = (seq + (ULong)family->latency * family->width) * family->commit_rate;
	ULong slot = sb->last_commit ? sb->last_commit + family->width : 0;

	return retired > slot ? retired : slot;
}

static Bool
in_flight(const struct mh_access *st, ULong now)
{
	if (commit_by_time)
		return now * family->commit_rate < st->committed_at;
	return now - st->seq <= rob_size;
}

static void share_access(Addr addr, UWord size, Addr iaddr, Bool store, Bool counted, UWord pending);

static void
on_load(Addr addr, UWord size, Addr iaddr, UWord pending, Bool rmw)
{
	struct mh_store_buffer *sb = &me()->sb;
	struct mh_access ld = { addr, size, own_clock(pending), 0, False };
	Bool alias = False, nt = nt_lines_load(me(), addr, size);
	UInt i;

	loads++;
	if (!rmw) /* a read-modify-write's load is part of its store's ownership request */
		share_access(addr, size, iaddr, False, True, pending);
	if (crosses_line(addr, size))
		count_site(iaddr, MH_SPLIT_LOAD);
	/* Youngest store first: the youngest that overlaps decides. */
	for (i = 0; i < sb->used; i++) {
		const struct mh_access *st = &sb->entry[(sb->head + MH_MAX_STORE_BUFFER - 1 - i) % MH_MAX_STORE_BUFFER];

		if (!in_flight(st, ld.seq))
			break; /* older ones have drained too */
		if (overlaps(st->addr, st->size, ld.addr, ld.size)) {
			if (st->nt)
				nt = True; /* never forwarded: the load waits for the line (see "Non-temporal stores") */
			else if (contained(st, &ld) && family->forwards(st, &ld))
				count_site(iaddr, MH_SF_FORWARDED);
			else
				count_block(iaddr, ld.seq - st->seq);
			if (nt)
				count_site(iaddr, MH_NT_RELOAD);
			return;
		}
		if (!alias && aliases_4k(st, &ld))
			alias = True;
	}
	if (nt)
		count_site(iaddr, MH_NT_RELOAD);
	if (alias)
		count_site(iaddr, MH_ALIAS_4K);
}

static void
on_store(Addr addr, UWord size, Addr iaddr, UWord pending, Bool locked, Bool nt)
{
	struct mh_store_buffer *sb = &me()->sb;
	ULong seq;

	stores++;
	nt_stores += nt;
	if (crosses_line(addr, size))
		count_site(iaddr, MH_SPLIT_STORE);
	share_access(addr, size, iaddr, True, True, pending);
	nt_lines_store(me(), addr, size, nt);
	if (locked)
		return; /* commits as part of the locked instruction: never in the buffer */
	seq = own_clock(pending);
	if (sb->used == 0)
		sb->last_commit = 0; /* nothing queued ahead */
	sb->last_commit = commit_time(sb, seq);
	sb->entry[sb->head] = (struct mh_access){ addr, size, seq, sb->last_commit, nt };
	sb->head = (sb->head + 1) % MH_MAX_STORE_BUFFER;
	if (sb->used < sb_size)
		sb->used++;
}

/*
 * The instrumented code passes one word of flags with each access:
 * bit 0 its guard (1 unless a guarded load or store does not happen), bit 1
 * a load that a store of the same instruction to the same address follows (a
 * read-modify-write), bit 2 the store of a locked instruction (see "Fences"),
 * bit 3 the store of a non-temporal instruction (see "Non-temporal stores"),
 * bits 4.. the instructions of its superblock not yet added to window_instrs.
 */
#define MH_F_GUARD 1u
#define MH_F_RMW 2u
#define MH_F_LOCKED 4u
#define MH_F_NT 8u
#define MH_F_PENDING_SHIFT 4

static void
on_load_w(Addr addr, UWord size, Addr iaddr, UWord flags)
{
	if (flags & MH_F_GUARD)
		on_load(addr, size, iaddr, flags >> MH_F_PENDING_SHIFT, (flags & MH_F_RMW) != 0);
}

static void
on_store_w(Addr addr, UWord size, Addr iaddr, UWord flags)
{
	if (flags & MH_F_GUARD)
		on_store(addr, size, iaddr, flags >> MH_F_PENDING_SHIFT, (flags & MH_F_LOCKED) != 0, (flags & MH_F_NT) != 0);
}

/* An access outside this thread's window: it changes who holds the line, counts nothing. */
static UInt lines_used;
static UInt forwarding_threads;
static Bool awaiting_lcores(void);
/*
 * Accesses outside the window are followed once two threads forward, or from
 * the start when --lcores says several will (before, no line can move between
 * forwarding threads); until then the instrumented code does not even call the
 * helper (one lcore pays one test per access).
 */
static ULong touching;

static void
set_collecting(ULong on)
{
	collecting = on;
	touching = !on && (forwarding_threads >= 2 || clo_lcores >= 2);
}

static void
on_touch_w(Addr addr, UWord size, UWord store, UWord flags)
{
	if (flags & MH_F_GUARD)
		share_access(addr, size, 0, store != 0, False, 0); /* code outside the window takes no time */
}

/* ------------------------------------------------------------------ */
/* Sharing                                                             */
/* ------------------------------------------------------------------ */

/*
 * Who holds each 64-byte line, as a MESI directory would know it: the threads
 * with a valid copy (a bit each) and the last writer. A store by T finds the
 * line in another thread's cache when any other bit is set (M/E/S elsewhere:
 * the store's request for ownership fetches or invalidates it) and leaves T
 * alone holding it; a load by T without a valid copy, of a line another
 * thread wrote, fetches what that thread wrote, and adds T's bit. A thread's
 * own later accesses do not drop its copy, nor do they remove others' copies:
 * a line that two threads read and one then writes costs that write a
 * transfer (an invalidation), as it does in hardware. Caches are unbounded
 * here: a copy is lost only to another thread's store, never to capacity,
 * so a line that hardware would have evicted in between is still counted.
 *
 * Only accesses inside a thread's window are counted, but every access of
 * every thread, inside a window or not, changes who holds the line: hardware
 * does not know about windows, and the work an lcore does between two bursts
 * (receive, transmit, refill) takes lines from the other lcores all the same.
 * (Outside the windows, accesses are followed from the moment a second
 * thread forwards: until then no line can pass between forwarding threads.)
 * To keep the cost and the memory bounded, a line enters the table at its
 * first access inside some window; accesses to lines that no window has
 * touched yet are not recorded (the first transfer of a line that another
 * thread used only before any window touched it, e.g. at initialisation, is
 * missed: a one-off, not a per-packet cost). The table has a fixed size; lines
 * that do not fit are counted as untracked and reported.
 */
struct mh_line {
	Addr line;     /* line address + 1 (0: empty slot) */
	ULong sharers; /* bit tid-1: that thread holds a valid copy */
	UInt writer;   /* last thread to write it (0: none since tracked) */
};
static struct mh_line *line_table;
static ULong untracked_lines, untracked_thread_accesses;

static struct mh_line *
line_slot(Addr line, Bool insert)
{
	UInt i = (UInt)((line * 0x9E3779B97F4A7C15ULL) >> 45) & (MH_LINE_TABLE - 1);

	for (;; i = (i + 1) & (MH_LINE_TABLE - 1)) {
		struct mh_line *e = &line_table[i];

		if (e->line == line + 1)
			return e;
		if (e->line != 0)
			continue;
		if (!insert)
			return NULL;
		if (lines_used >= MH_LINE_TABLE / 4 * 3) { /* keep probes short: 3/4 full at most */
			untracked_lines++;
			return NULL;
		}
		lines_used++;
		e->line = line + 1;
		return e;
	}
}

static void
share_line(ThreadId tid, Addr line, Addr iaddr, Bool store, Bool counted)
{
	ULong bit = 1ULL << (tid - 1);
	struct mh_line *e;

	if (lines_used == 0 && !counted)
		return; /* no window has touched any line yet */
	e = line_slot(line, counted);
	if (e == NULL)
		return;
	if (store) {
		if (counted && (e->sharers & ~bit) != 0)
			count_site(iaddr, MH_LINE_TRANSFER);
		e->sharers = bit;
		e->writer = tid;
	} else if ((e->sharers & bit) == 0) {
		if (counted && e->writer != 0 && e->writer != tid)
			count_site(iaddr, MH_READ_TRANSFER);
		e->sharers |= bit;
	}
}

static void share_later(Addr line, Addr iaddr, Bool store, Bool counted, UWord pending);
static Bool logging(void);

/* pending: the instructions of the superblock before this access, not yet in window_instrs */
static void
share_access(Addr addr, UWord size, Addr iaddr, Bool store, Bool counted, UWord pending)
{
	Addr first = addr / MH_LINE, last = (addr + size - 1) / MH_LINE, line;

	if (running_tid == 0 || running_tid > MH_MAX_SHARERS) {
		untracked_thread_accesses++;
		return;
	}
	/* Before all lcores have started, one that has not is starting up: whether the others
	 * have yet made its lines theirs depends on valgrind's order, so it moves nothing. */
	if (!me()->forwards && awaiting_lcores())
		return;
	for (line = first; line <= last; line++) { /* a split access touches both lines */
		if (logging())
			share_later(line, iaddr, store, counted, pending);
		else
			share_line(running_tid, line, iaddr, store, counted);
	}
}

/* ------------------------------------------------------------------ */
/* Time                                                                */
/* ------------------------------------------------------------------ */

/*
 * valgrind runs one thread at a time, each for a timeslice of 100000
 * superblocks: two lcores would forward thousands of packets each in turn,
 * and a line they share would move once per timeslice instead of as often as
 * concurrent cores move it. So the table is not updated in the order valgrind
 * runs the threads, but in the order concurrent cores would make the
 * accesses: while two or more threads forward, each access is stamped with
 * its thread's virtual time (the window instructions that thread has run;
 * code outside the window takes no time) and logged; logged accesses
 * older than every forwarding thread's present time can no longer be
 * preceded by another, and are applied, oldest first (ties by thread id).
 * That is the order of cores running in lockstep at the same speed per
 * window instruction, and it does not depend on how valgrind interleaved the
 * threads: the counts are the same run to run as long as each thread's own
 * execution is (lcores that forward from queues of their own, without
 * blocking system calls, each its own warm-up: the dataplane's lcores wait for
 * each other without polling). With --lcores=N the first N threads to forward
 * start at time 0, as lcores launched together do, whenever valgrind first
 * runs them, and nothing is applied until all N have started; a thread that
 * starts later joins at the others' present time. A thread in a system call,
 * or gone, leaves the rotation (its time would hold everyone back) and
 * rejoins at the others' time. --fair-sched=yes (a ticket lock: threads run
 * in turn) keeps the threads within a timeslice of each other, and the logs
 * short.
 */
struct mh_event {
	ULong time_flags; /* virtual time << 2 | counted << 1 | store */
	Addr line;
	Addr iaddr;
};
struct mh_log {
	struct mh_event *ev;
	UInt head, used, size; /* ev[head .. used) wait to be applied */
};
#define MH_LOG_FLUSH (1u << 16)   /* try to apply a thread's log this often */
#define MH_LOG_MAX (1u << 21)     /* apply everything when a log grows this long */

static struct mh_log *logs;
static ULong logged_accesses, unapplied;
static ULong late_accesses; /* applied after younger ones: a thread held the others back too long */
static ULong applied_up_to;
static ThreadId top_tid; /* the highest thread id that can hold a sharer bit and has run */

static Bool
in_rotation(ThreadId tid)
{
	return tid != 0 && tid <= MH_MAX_SHARERS && threads[tid].forwards && !threads[tid].gone && !threads[tid].in_syscall;
}

static UInt rotation; /* threads in the rotation, recounted when one joins or leaves */

static void
count_rotation(void)
{
	ThreadId t;

	rotation = 0;
	for (t = 1; t <= top_tid; t++)
		rotation += in_rotation(t);
}

static UInt
rotation_size(void)
{
	return rotation;
}

/* A thread's own clock is window_instrs minus what others ran meanwhile, frozen while it waits. */
static ULong
virtual_time(ThreadId tid)
{
	const struct mh_thread *t = &threads[tid];

	return (tid == running_tid ? window_instrs : t->out_at) - t->skew + t->base;
}

/* Fewer threads forward than --lcores: a thread yet to start would start at time 0. */
static Bool
awaiting_lcores(void)
{
	return forwarding_threads < (UInt)clo_lcores;
}

/* The present of the thread that is furthest behind: nothing older can still come. */
static ULong
horizon(void)
{
	ULong h = ~0ULL;
	ThreadId t;

	if (awaiting_lcores())
		return 0;

	for (t = 1; t <= top_tid; t++)
		if (in_rotation(t) && virtual_time(t) < h)
			h = virtual_time(t);
	return h;
}

/* Apply, oldest first, every logged access older than `until`. */
static void
apply_logs(ULong until)
{
	for (;;) {
		struct mh_event *next = NULL;
		ThreadId t, from = 0;

		for (t = 1; t <= top_tid; t++) {
			struct mh_log *l = &logs[t];

			if (l->head < l->used && (next == NULL || l->ev[l->head].time_flags >> 2 < next->time_flags >> 2)) {
				next = &l->ev[l->head];
				from = t;
			}
		}
		if (next == NULL || next->time_flags >> 2 >= until)
			break;
		if (next->time_flags >> 2 < applied_up_to)
			late_accesses++;
		else
			applied_up_to = next->time_flags >> 2;
		share_line(from, next->line, next->iaddr, next->time_flags & 1, (next->time_flags & 2) != 0);
		logs[from].head++;
		unapplied--;
	}
	for (ThreadId t = 1; t <= top_tid; t++) {
		struct mh_log *l = &logs[t];

		if (l->head == l->used)
			l->head = l->used = 0;
	}
}

/* Log while two threads forward, and after, until what they logged has been applied. */
static Bool
logging(void)
{
	return in_rotation(running_tid) && (unapplied > 0 || rotation_size() >= 2 || awaiting_lcores());
}

static void
share_later(Addr line, Addr iaddr, Bool store, Bool counted, UWord pending)
{
	struct mh_log *l = &logs[running_tid];

	/* The line enters the table when a window access is logged; other accesses matter only to
	 * lines in it (a thread spinning outside its window on a flag of its own logs nothing). */
	if (line_slot(line, counted) == NULL)
		return;

	if (l->used == l->size) {
		if (l->head > 0) { /* compact */
			VG_(memmove)(l->ev, l->ev + l->head, (l->used - l->head) * sizeof(*l->ev));
			l->used -= l->head;
			l->head = 0;
		}
		if (l->used == l->size) {
			l->size = l->size ? 2 * l->size : 4096;
			l->ev = VG_(realloc)("memhazard.log", l->ev, l->size * sizeof(*l->ev));
		}
	}
	logged_accesses++;
	unapplied++;
	l->ev[l->used++] = (struct mh_event){ (virtual_time(running_tid) + pending) << 2 | (counted ? 2 : 0) | (store ? 1 : 0), line, iaddr };
	if (l->used - l->head >= MH_LOG_MAX)
		apply_logs(~0ULL); /* someone is holding everyone back: its later accesses will be late */
	else if ((l->used - l->head) % MH_LOG_FLUSH == 0)
		apply_logs(horizon());
}

/* A thread (re)joins the rotation at the present of the others. */
static void
join_rotation(ThreadId tid)
{
	ULong now = 0;
	ThreadId t;

	count_rotation();
	for (t = 1; t <= top_tid; t++)
		if (t != tid && in_rotation(t) && virtual_time(t) > now)
			now = virtual_time(t);
	if (now > virtual_time(tid)) /* never back: its logged accesses stay in order */
		threads[tid].base += now - virtual_time(tid);
}

/* Someone left the rotation: what only it held back can be applied. */
static void
left_rotation(void)
{
	count_rotation();
	apply_logs(horizon());
}

static void
on_thread_run(ThreadId tid, ULong blocks_done)
{
	(void)blocks_done;
	if (tid != running_tid) {
		threads[running_tid].out_at = window_instrs;
		threads[tid].skew += window_instrs - threads[tid].out_at;
	}
	running_tid = tid;
	set_collecting(threads[tid].on);
	if (tid > top_tid && tid <= MH_MAX_SHARERS)
		top_tid = tid;
}

static void
on_thread_stop(ThreadId tid, ULong blocks_done)
{
	(void)tid;
	(void)blocks_done;
	if (unapplied > 0)
		apply_logs(horizon());
}

static void
on_syscall(ThreadId tid, UInt syscallno, UWord *args, UInt nargs)
{
	(void)syscallno;
	(void)args;
	(void)nargs;
	if (in_rotation(tid)) {
		threads[tid].in_syscall = True;
		left_rotation();
	}
}

static void
after_syscall(ThreadId tid, UInt syscallno, UWord *args, UInt nargs, SysRes res)
{
	(void)syscallno;
	(void)args;
	(void)nargs;
	(void)res;
	if (threads[tid].in_syscall) {
		threads[tid].in_syscall = False;
		join_rotation(tid);
	}
}

static void
on_thread_exit(ThreadId tid)
{
	if (in_rotation(tid)) {
		threads[tid].gone = True;
		left_rotation();
	}
	threads[tid].gone = True;
}

/* ------------------------------------------------------------------ */
/* The window                                                          */
/* ------------------------------------------------------------------ */

static void
on_window_entry(Addr sp)
{
	struct mh_thread *t = &threads[running_tid];

	if (t->on)
		return; /* recursion: the outermost call owns the window */
	t->on = 1;
	t->sp = sp;
	set_collecting(1);
	windows++;
	t->sb.used = 0; /* the code between windows drained it */
	t->sb.last_commit = 0;
	nt_lines_forget(t); /* and may have loaded them */
	if (!t->forwards) {
		Bool together = awaiting_lcores(); /* one of the --lcores: starts at time 0 */

		t->forwards = True;
		forwarding_threads++;
		if (running_tid <= MH_MAX_SHARERS) {
			if (together)
				count_rotation();
			else
				join_rotation(running_tid);
		}
	}
}

static void
on_superblock(Addr sp)
{
	struct mh_thread *t = &threads[running_tid];

	if (t->on && sp > t->sp) {
		t->on = 0;
		set_collecting(0);
	}
}

/* ------------------------------------------------------------------ */
/* Instructions per function                                           */
/* ------------------------------------------------------------------ */

/*
 * The window's instructions by the function they belong to, named by its
 * symbol as callgrind and cachegrind name a function's self cost: code
 * inlined into a function is that function's, an instruction without a
 * symbol is "??? (OBJECT)".
 *
 * Each run of consecutive instructions of a superblock, up to a point where
 * window_instrs is added to (flush_instrs, with the same `collecting`), gets
 * a counter that the instrumented code increments inline by `collecting`:
 * every instruction the window counts is counted once, in one run, so the
 * functions add up to window_instrs. The runs keep their instructions'
 * addresses; only at the end are the runs that ran in the window resolved to
 * functions, so the rest of the program (EAL initialisation) costs no
 * debug-information lookup.
 */
#define MH_RUN_MAX 128 /* a longer run is split (VEX superblocks hold at most 100 instructions) */

struct mh_run {
	ULong execs;        /* times it ran in the window */
	struct mh_run *next;
	DiEpoch ep;         /* of its translation: its code's debug information */
	UInt n;
	Addr at[];          /* its instructions */
};
static struct mh_run *runs;

/* The instructions of the superblock being instrumented since its last run. */
struct mh_open_run {
	UInt n;
	Addr at[MH_RUN_MAX];
};

/* The instructions so far become a run, counted inline: r->execs += collecting. */
static void
close_run(IRSB *out, struct mh_open_run *pending)
{
	struct mh_run *r;
	IRTemp on, old, sum;

	if (pending->n == 0)
		return;
	r = VG_(malloc)("memhazard.run", sizeof(*r) + pending->n * sizeof(Addr));
	r->execs = 0;
	r->next = runs;
	r->ep = VG_(current_DiEpoch)();
	r->n = pending->n;
	VG_(memcpy)(r->at, pending->at, pending->n * sizeof(Addr));
	runs = r;
	on = newIRTemp(out->tyenv, Ity_I64);
	old = newIRTemp(out->tyenv, Ity_I64);
	sum = newIRTemp(out->tyenv, Ity_I64);
	addStmtToIRSB(out, IRStmt_WrTmp(on, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&collecting))));
	addStmtToIRSB(out, IRStmt_WrTmp(old, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&r->execs))));
	addStmtToIRSB(out, IRStmt_WrTmp(sum, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(old), IRExpr_RdTmp(on))));
	addStmtToIRSB(out, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&r->execs), IRExpr_RdTmp(sum)));
	pending->n = 0;
}

/* One more instruction, at iaddr. A full run is counted early: the instructions before any point
 * of a superblock have run when control reaches it. */
static void
add_to_run(IRSB *out, struct mh_open_run *pending, Addr iaddr)
{
	if (pending->n == MH_RUN_MAX)
		close_run(out, pending);
	pending->at[pending->n++] = iaddr;
}

struct mh_fn {
	VgHashNode node; /* key: a hash of the name */
	const HChar *name;
	ULong instrs;
};

static Word
same_function(const void *a, const void *b)
{
	return VG_(strcmp)(((const struct mh_fn *)a)->name, ((const struct mh_fn *)b)->name);
}

static struct mh_fn *
function_at(VgHashTable *functions, DiEpoch ep, Addr iaddr)
{
	static HChar unnamed[256];
	const HChar *name, *object, *base;
	const UChar *c;
	struct mh_fn probe, *f;
	UWord h = 5381;

	if (!VG_(get_fnname)(ep, iaddr, &name)) {
		if (VG_(get_objname)(ep, iaddr, &object)) {
			base = VG_(strrchr)(object, '/');
			VG_(snprintf)(unnamed, sizeof(unnamed), "??? (%s)", base ? base + 1 : object);
			name = unnamed;
		} else {
			name = "???";
		}
	}
	for (c = (const UChar *)name; *c; c++)
		h = h * 33 + *c;
	probe.node.key = h;
	probe.name = name;
	f = VG_(HT_gen_lookup)(functions, &probe, same_function);
	if (f == NULL) {
		f = VG_(calloc)("memhazard.function", 1, sizeof(*f));
		f->node.key = h;
		f->name = VG_(strdup)("memhazard.function.name", name);
		VG_(HT_add_node)(functions, f);
	}
	return f;
}

/* ------------------------------------------------------------------ */
/* Instrumentation                                                     */
/* ------------------------------------------------------------------ */

struct mh_sb {
	IRSB *out;
	Int sp_offset;
	UInt pending; /* guest instructions since the last flush */
	struct mh_open_run run; /* and by function (see "Instructions per function") */
};

static IRExpr *
load_u64(struct mh_sb *b, ULong *where)
{
	IRTemp t = newIRTemp(b->out->tyenv, Ity_I64);

	addStmtToIRSB(b->out, IRStmt_WrTmp(t, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)where))));
	return IRExpr_RdTmp(t);
}

static IRExpr *
collecting_guard(struct mh_sb *b)
{
	IRTemp g = newIRTemp(b->out->tyenv, Ity_I1);

	addStmtToIRSB(b->out, IRStmt_WrTmp(g, IRExpr_Binop(Iop_CmpNE64, load_u64(b, &collecting), IRExpr_Const(IRConst_U64(0)))));
	return IRExpr_RdTmp(g);
}

static IRExpr *
stack_pointer(struct mh_sb *b)
{
	IRTemp t = newIRTemp(b->out->tyenv, Ity_I64);

	addStmtToIRSB(b->out, IRStmt_WrTmp(t, IRExpr_Get(b->sp_offset, Ity_I64)));
	return IRExpr_RdTmp(t);
}

/* window_instrs += pending * collecting, inline (no call). */
static void
flush_instrs(struct mh_sb *b)
{
	IRTemp prod, sum;

	close_run(b->out, &b->run);
	if (b->pending == 0)
		return;
	prod = newIRTemp(b->out->tyenv, Ity_I64);
	sum = newIRTemp(b->out->tyenv, Ity_I64);
	addStmtToIRSB(b->out, IRStmt_WrTmp(prod, IRExpr_Binop(Iop_Mul64, load_u64(b, &collecting),
								IRExpr_Const(IRConst_U64(b->pending)))));
	addStmtToIRSB(b->out, IRStmt_WrTmp(sum, IRExpr_Binop(Iop_Add64, load_u64(b, &window_instrs), IRExpr_RdTmp(prod))));
	addStmtToIRSB(b->out, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&window_instrs), IRExpr_RdTmp(sum)));
	b->pending = 0;
}

static void
call(struct mh_sb *b, const HChar *name, void *fn, Int regparms, IRExpr **args, IRExpr *guard)
{
	IRDirty *di = unsafeIRDirty_0_N(regparms, name, VG_(fnptr_to_fnentry)(fn), args);

	if (guard != NULL)
		di->guard = guard;
	addStmtToIRSB(b->out, IRStmt_Dirty(di));
}

static IRExpr *
outside_guard(struct mh_sb *b)
{
	IRTemp g = newIRTemp(b->out->tyenv, Ity_I1);

	addStmtToIRSB(b->out, IRStmt_WrTmp(g, IRExpr_Binop(Iop_CmpNE64, load_u64(b, &touching), IRExpr_Const(IRConst_U64(0)))));
	return IRExpr_RdTmp(g);
}

/*
 * One load or store: the model inside the window (on_load_w/on_store_w), who
 * holds the line outside it (on_touch_w). guard: NULL, or the access's own
 * guard (a guarded load or store); how: MH_F_RMW, MH_F_LOCKED or 0.
 */
static void
instrument_access(struct mh_sb *b, Bool store, IRExpr *addr, Int size, Addr iaddr, IRExpr *guard, UWord how)
{
	ULong fixed = ((ULong)b->pending << MH_F_PENDING_SHIFT) | how;
	IRExpr *flags;

	if (guard == NULL) {
		flags = mkIRExpr_HWord(fixed | MH_F_GUARD);
	} else {
		IRTemp g = newIRTemp(b->out->tyenv, Ity_I64), f = newIRTemp(b->out->tyenv, Ity_I64);

		addStmtToIRSB(b->out, IRStmt_WrTmp(g, IRExpr_Unop(Iop_1Uto64, guard)));
		addStmtToIRSB(b->out, IRStmt_WrTmp(f, IRExpr_Binop(Iop_Or64, IRExpr_RdTmp(g), IRExpr_Const(IRConst_U64(fixed)))));
		flags = IRExpr_RdTmp(f);
	}
	call(b, store ? "on_store_w" : "on_load_w", store ? (void *)on_store_w : (void *)on_load_w, 0,
	     mkIRExprVec_4(addr, mkIRExpr_HWord(size), mkIRExpr_HWord(iaddr), flags), collecting_guard(b));
	call(b, "on_touch_w", (void *)on_touch_w, 0, mkIRExprVec_4(addr, mkIRExpr_HWord(size), mkIRExpr_HWord(store), flags),
	     outside_guard(b));
}

static Bool
same_atom(const IRExpr *a, const IRExpr *b)
{
	if (a->tag == Iex_RdTmp && b->tag == Iex_RdTmp)
		return a->Iex.RdTmp.tmp == b->Iex.RdTmp.tmp;
	if (a->tag == Iex_Const && b->tag == Iex_Const)
		return eqIRConst(a->Iex.Const.con, b->Iex.Const.con);
	return False;
}

/* Does a store of the same guest instruction (statements after i, up to the next IMark) write
 * addr? x86 read-modify-writes (add to memory, lock xadd) load, then store or compare-and-swap. */
static Bool
stored_by_same_instruction(const IRSB *in, Int i, const IRExpr *addr)
{
	for (i++; i < in->stmts_used && in->stmts[i]->tag != Ist_IMark; i++) {
		const IRStmt *st = in->stmts[i];

		if ((st->tag == Ist_Store && same_atom(st->Ist.Store.addr, addr)) ||
		    (st->tag == Ist_CAS && same_atom(st->Ist.CAS.details->addr, addr)))
			return True;
	}
	return False;
}

/* Was addr loaded by a statement of the same guest instruction before i? (x86 locked
 * read-modify-writes load, then compare-and-swap: one load, not two.) */
static Bool
loaded_earlier_by_same_instruction(const IRSB *in, Int i, const IRExpr *addr)
{
	for (i--; i >= 0 && in->stmts[i]->tag != Ist_IMark; i--) {
		const IRStmt *st = in->stmts[i];

		if (st->tag == Ist_WrTmp && st->Ist.WrTmp.data->tag == Iex_Load && same_atom(st->Ist.WrTmp.data->Iex.Load.addr, addr))
			return True;
	}
	return False;
}

/* Is the guest instruction starting at statement i (its IMark) locked? VEX gives x86 locked
 * instructions (LOCK prefix, XCHG with memory) an IRCAS and nothing else does. */
static Bool
is_locked_instruction(const IRSB *in, Int i)
{
	for (i++; i < in->stmts_used && in->stmts[i]->tag != Ist_IMark; i++)
		if (in->stmts[i]->tag == Ist_CAS)
			return True;
	return False;
}

static void
instrument_fence(struct mh_sb *b, enum mh_fence kind)
{
	call(b, "on_fence", (void *)on_fence, 0, mkIRExprVec_1(mkIRExpr_HWord(kind)), collecting_guard(b));
}

static Bool
is_window_entry(Addr a)
{
	const HChar *fn;

	return VG_(get_fnname_if_entry)(VG_(current_DiEpoch)(), a, &fn) && VG_(strcmp)(fn, clo_window_fn) == 0;
}

static IRSB *
mh_instrument(VgCallbackClosure *closure, IRSB *in, const VexGuestLayout *layout, const VexGuestExtents *vge,
	      const VexArchInfo *archinfo_host, IRType gWordTy, IRType hWordTy)
{
	struct mh_sb b = { deepCopyIRSBExceptStmts(in), layout->offset_SP, 0, { 0 } };
	Addr iaddr = 0;
	UInt ilen = 0;
	UWord nt = 0; /* MH_F_NT when the instruction is a non-temporal store */
	Int i = 0;

	(void)closure;
	(void)vge;
	(void)archinfo_host;
	tl_assert(gWordTy == Ity_I64 && hWordTy == Ity_I64);

	while (i < in->stmts_used && in->stmts[i]->tag != Ist_IMark)
		addStmtToIRSB(b.out, in->stmts[i++]);
	/* Has the window function returned? Checked where every superblock starts. */
	call(&b, "on_superblock", (void *)on_superblock, 0, mkIRExprVec_1(stack_pointer(&b)), collecting_guard(&b));

	for (; i < in->stmts_used; i++) {
		IRStmt *st = in->stmts[i];

		switch (st->tag) {
		case Ist_IMark:
			iaddr = st->Ist.IMark.addr;
			ilen = st->Ist.IMark.len;
			nt = is_nt_store(iaddr, ilen) ? MH_F_NT : 0;
			if (is_window_entry(iaddr)) {
				flush_instrs(&b);
				call(&b, "on_window_entry", (void *)on_window_entry, 0, mkIRExprVec_1(stack_pointer(&b)), NULL);
			}
			b.pending++;
			add_to_run(b.out, &b.run, iaddr);
			addStmtToIRSB(b.out, st);
			if (is_locked_instruction(in, i))
				instrument_fence(&b, MH_LOCKED); /* the older stores commit before its load */
			break;
		case Ist_WrTmp:
			if (st->Ist.WrTmp.data->tag == Iex_Load) {
				IRExpr *ld = st->Ist.WrTmp.data;

				instrument_access(&b, False, ld->Iex.Load.addr, sizeofIRType(ld->Iex.Load.ty), iaddr, NULL,
						  stored_by_same_instruction(in, i, ld->Iex.Load.addr) ? MH_F_RMW : 0);
			}
			addStmtToIRSB(b.out, st);
			break;
		case Ist_Store:
			instrument_access(&b, True, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.Store.data)), iaddr, NULL,
					  nt);
			addStmtToIRSB(b.out, st);
			break;
		case Ist_LoadG: {
			IRLoadG *lg = st->Ist.LoadG.details;
			IRType ty = Ity_INVALID, wide = Ity_INVALID;

			typeOfIRLoadGOp(lg->cvt, &wide, &ty);
			instrument_access(&b, False, lg->addr, sizeofIRType(ty), iaddr, lg->guard, 0);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_StoreG: {
			IRStoreG *sg = st->Ist.StoreG.details;

			instrument_access(&b, True, sg->addr, sizeofIRType(typeOfIRExpr(in->tyenv, sg->data)), iaddr, sg->guard, nt);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_Dirty: {
			IRDirty *d = st->Ist.Dirty.details;

			if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify)
				instrument_access(&b, False, d->mAddr, d->mSize, iaddr, NULL, d->mFx == Ifx_Modify ? MH_F_RMW : 0);
			if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify)
				instrument_access(&b, True, d->mAddr, d->mSize, iaddr, NULL, nt);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_CAS: {
			/* A locked read-modify-write (the buffer drained at its IMark): a load unless the
			 * instruction loaded the address already, and a store that commits with it. */
			IRCAS *cas = st->Ist.CAS.details;
			Int size = sizeofIRType(typeOfIRExpr(in->tyenv, cas->dataLo)) * (cas->dataHi ? 2 : 1);

			if (!loaded_earlier_by_same_instruction(in, i, cas->addr))
				instrument_access(&b, False, cas->addr, size, iaddr, NULL, MH_F_RMW);
			instrument_access(&b, True, cas->addr, size, iaddr, NULL, MH_F_LOCKED);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_LLSC:
			instrument_access(&b, st->Ist.LLSC.storedata != NULL, st->Ist.LLSC.addr,
			       sizeofIRType(st->Ist.LLSC.storedata ? typeOfIRExpr(in->tyenv, st->Ist.LLSC.storedata)
								   : typeOfIRTemp(in->tyenv, st->Ist.LLSC.result)),
			       iaddr, NULL, 0); /* not on amd64 (VEX gives x86 locked instructions an IRCAS) */
			addStmtToIRSB(b.out, st);
			break;
		case Ist_MBE:
			if (st->Ist.MBE.event == Imbe_Fence)
				instrument_fence(&b, fence_kind(iaddr, ilen));
			addStmtToIRSB(b.out, st);
			break;
		case Ist_Exit:
			flush_instrs(&b); /* the instructions before a side exit have run */
			addStmtToIRSB(b.out, st);
			break;
		default:
			addStmtToIRSB(b.out, st);
			break;
		}
	}
	flush_instrs(&b);
	return b.out;
}

/* ------------------------------------------------------------------ */
/* Output                                                              */
/* ------------------------------------------------------------------ */

static void
out_printf(Int fd, const HChar *format, ...)
{
	HChar buf[1024];
	va_list vargs;
	Int n;

	va_start(vargs, format);
	n = VG_(vsnprintf)(buf, sizeof(buf), format, vargs);
	va_end(vargs);
	VG_(write)(fd, buf, n < (Int)sizeof(buf) ? n : (Int)sizeof(buf) - 1);
}

/* function COUNT NAME: one line per function that ran in the window (see "Instructions per function"). */
static void
write_functions(Int fd)
{
	VgHashTable *functions = VG_(HT_construct)("memhazard.functions");
	const struct mh_run *r;
	struct mh_fn *f;
	UInt i;

	for (r = runs; r != NULL; r = r->next)
		for (i = 0; r->execs && i < r->n; i++)
			function_at(functions, r->ep, r->at[i])->instrs += r->execs;
	VG_(HT_ResetIter)(functions);
	while ((f = VG_(HT_Next)(functions)) != NULL)
		out_printf(fd, "function %llu %s\n", f->instrs, f->name);
}

static void
mh_fini(Int exitcode)
{
	DiEpoch ep = VG_(current_DiEpoch)();
	SysRes res;
	mh_site *s;
	Int fd, k;

	(void)exitcode;
	if (!options_ok)
		return;
	apply_logs(~0ULL);
	res = VG_(open)(clo_out_file, VKI_O_CREAT | VKI_O_WRONLY | VKI_O_TRUNC, VKI_S_IRUSR | VKI_S_IWUSR);
	if (sr_isError(res)) {
		VG_(umsg)("memhazard: cannot write %s\n", clo_out_file);
		return;
	}
	fd = sr_Res(res);
	out_printf(fd, "memhazard 4\n");
	out_printf(fd, "family %s\nstore_buffer %u\nrob %u\nwindow_fn %s\n", family->name, sb_size, rob_size, clo_window_fn);
	out_printf(fd, "commit_rule %s\nwidth %u\ncommit_rate %u\nlatency %u\n", commit_by_time ? "time" : "rob", family->width,
		   family->commit_rate, family->latency);
	out_printf(fd, "windows %llu\ninstructions %llu\nloads %llu\nstores %llu\ndrains %llu\n", windows, window_instrs,
		   loads, stores, drains);
	out_printf(fd, "nt_stores %llu\nnt_untracked %llu\n", nt_stores, nt_untracked);
	for (k = 0; k < MH_FENCE_KINDS; k++)
		out_printf(fd, "%s %llu\n", fence_names[k], fences[k]);
	for (k = 0; k < MH_KINDS; k++)
		out_printf(fd, "%s %llu\n", kind_names[k], totals[k]);
	out_printf(fd, "forwarding_threads %u\nlines_tracked %u\nuntracked_lines %llu\nuntracked_thread_accesses %llu\n"
		   "logged_accesses %llu\nlate_accesses %llu\n", forwarding_threads, lines_used, untracked_lines, untracked_thread_accesses,
		   logged_accesses, late_accesses);
	write_functions(fd);
	/* site KIND COUNT [dist=MIN,MEDIAN,MAX] | ADDRESS: function (file:line) | ... the innermost inlined call first */
	VG_(HT_ResetIter)(sites);
	while ((s = VG_(HT_Next)(sites)) != NULL) {
		for (k = 0; k < MH_KINDS; k++) {
			if (s->count[k] == 0)
				continue;
			{
				InlIPCursor *iipc = VG_(new_IIPC)(ep, s->node.key);

				out_printf(fd, "site %s %llu", kind_names[k], s->count[k]);
				if (k == MH_SF_BLOCKED)
					out_printf(fd, " dist=%llu,%llu,%llu", s->dist_min, dist_median(s), s->dist_max);
				do
					out_printf(fd, " | %s", VG_(describe_IP)(ep, s->node.key, iipc));
				while (VG_(next_IIPC)(iipc));
				out_printf(fd, "\n");
				VG_(delete_IIPC)(iipc);
			}
		}
	}
	VG_(close)(fd);
}

static Bool
mh_process_cmd_line_option(const HChar *arg)
{
	if VG_STR_CLO (arg, "--window-fn", clo_window_fn) {
	} else if VG_STR_CLO (arg, "--out-file", clo_out_file) {
	} else if VG_STR_CLO (arg, "--family", clo_family) {
	} else if VG_STR_CLO (arg, "--commit-rule", clo_commit_rule) {
	} else if VG_BINT_CLO (arg, "--store-buffer", clo_store_buffer, 1, MH_MAX_STORE_BUFFER) {
	} else if VG_BINT_CLO (arg, "--rob", clo_rob, 1, 1 << 20) {
	} else if VG_BINT_CLO (arg, "--lcores", clo_lcores, 1, MH_MAX_SHARERS) {
	} else
		return False;
	return True;
}

static void
mh_print_usage(void)
{
	VG_(printf)("    --out-file=FILE        where the counts go (required)\n"
		    "    --window-fn=NAME       count while NAME and its callees run [fwd_burst]\n"
		    "    --family=NAME          intel-icx|intel-spr|intel-skx|amd-zen4 [intel-icx]\n"
		    "    --commit-rule=time|rob when a store has left the buffer: estimated time, or ROB instructions [time]\n"
		    "    --store-buffer=N --rob=N  override the family's sizes (--rob: of the rule rob)\n"
		    "    --lcores=N             threads that forward: accesses wait until all N have started [1]\n");
}

static void
mh_print_debug_usage(void)
{
}

/* VG_(fmsg_bad_option) returns (valgrind 3.19, after the options were parsed): stop here, with status 1. */
#define bad_option(...)                          \
	do {                                     \
		VG_(fmsg_bad_option)(__VA_ARGS__); \
		VG_(exit)(1);                    \
	} while (0)

static void
mh_post_clo_init(void)
{
	UInt i;

	if (clo_out_file == NULL)
		bad_option("--out-file", "memhazard needs --out-file=FILE\n");
	family = NULL;
	for (i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (VG_(strcmp)(families[i].name, clo_family) == 0)
			family = &families[i];
	if (family == NULL)
		bad_option("--family", "unknown family %s (intel-icx, intel-spr, intel-skx, amd-zen4)\n", clo_family);
	if (VG_(strcmp)(clo_commit_rule, "time") != 0 && VG_(strcmp)(clo_commit_rule, "rob") != 0)
		bad_option("--commit-rule", "unknown commit rule %s (time, rob)\n", clo_commit_rule);
	commit_by_time = VG_(strcmp)(clo_commit_rule, "time") == 0;
	sb_size = clo_store_buffer ? (UInt)clo_store_buffer : family->store_buffer;
	rob_size = clo_rob ? (UInt)clo_rob : family->rob;
	threads = VG_(calloc)("memhazard.threads", VG_N_THREADS, sizeof(*threads));
	sites = VG_(HT_construct)("memhazard.sites");
	line_table = VG_(calloc)("memhazard.lines", MH_LINE_TABLE, sizeof(*line_table));
	logs = VG_(calloc)("memhazard.logs", MH_MAX_SHARERS + 1, sizeof(*logs));
	options_ok = True;
}

static void
mh_pre_clo_init(void)
{
	VG_(details_name)("memhazard");
	VG_(details_version)("1");
	VG_(details_description)("store-forwarding, split-line and 4K-aliasing hazards of one function's window");
	VG_(details_copyright_author)("perfci");
	VG_(details_bug_reports_to)("perfci");
	VG_(details_avg_translation_sizeB)(400);
	VG_(basic_tool_funcs)(mh_post_clo_init, mh_instrument, mh_fini);
	VG_(needs_command_line_options)(mh_process_cmd_line_option, mh_print_usage, mh_print_debug_usage);
	VG_(track_start_client_code)(on_thread_run);
	VG_(track_stop_client_code)(on_thread_stop);
	VG_(track_pre_thread_ll_exit)(on_thread_exit);
	VG_(needs_syscall_wrapper)(on_syscall, after_syscall);
}

VG_DETERMINE_INTERFACE_VERSION(mh_pre_clo_init)
