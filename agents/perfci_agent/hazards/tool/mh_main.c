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
 *                address bits 11:0 (4K aliasing).
 *
 * Every hazard is also counted per instruction address and reported with its
 * function (the innermost inlined one) and source line.
 *
 * The window is callgrind's --toggle-collect: it opens at the function's first
 * instruction (recording the stack pointer) and closes at the first superblock
 * whose stack pointer is above it (the function returned). Instructions in the
 * window are counted too, so one run yields instructions per packet and the
 * hazards; the counts are exact and identical from run to run.
 *
 * The store buffer holds the last N stores (N per family). A store also leaves
 * it once more than ROB instructions have executed after it: by then it has
 * retired and, with the few stores a forwarding loop makes, committed. Fences
 * and locked instructions drain it, and so does leaving the window (the code
 * between two windows runs hundreds of instructions).
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

/* ------------------------------------------------------------------ */
/* Microarchitecture families                                          */
/* ------------------------------------------------------------------ */

struct mh_access {
	Addr addr;
	UWord size;
	ULong seq; /* instruction number in the window's count */
};

typedef Bool (*mh_forward_fn)(const struct mh_access *st, const struct mh_access *ld);

struct mh_family {
	const HChar *name;
	UInt store_buffer; /* store buffer entries */
	UInt rob;          /* reorder buffer entries */
	mh_forward_fn forwards; /* the load is contained in the store: can it forward? */
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
 */
static const struct mh_family families[] = {
	{ "intel-icx", 72, 352, intel_forwards },
	{ "intel-spr", 114, 512, intel_forwards },
	{ "intel-skx", 56, 224, intel_forwards },
	{ "amd-zen4", 64, 320, zen_forwards },
};

/* ------------------------------------------------------------------ */
/* Options and state                                                   */
/* ------------------------------------------------------------------ */

static const HChar *clo_window_fn = "fwd_burst";
static const HChar *clo_out_file = NULL;
static const HChar *clo_family = "intel-icx";
static Long clo_store_buffer = 0; /* 0: the family's */
static Long clo_rob = 0;

static const struct mh_family *family;
static UInt sb_size, rob_size;

/* Read by the instrumented code (guards and the instruction count). */
static ULong collecting;
static ULong window_instrs;

struct mh_thread {
	ULong on;
	Addr sp; /* stack pointer at the window function's first instruction */
};
static struct mh_thread *threads;
static ThreadId running_tid;

enum mh_kind { MH_SF_BLOCKED, MH_SF_FORWARDED, MH_SPLIT_LOAD, MH_SPLIT_STORE, MH_ALIAS_4K, MH_KINDS };
static const HChar *const kind_names[MH_KINDS] = {
	"sf_blocked", "sf_forwarded", "split_loads", "split_stores", "alias_4k",
};

static ULong totals[MH_KINDS];
static ULong windows, loads, stores, drains;

/* The store buffer: a ring of the youngest stores, newest at head - 1. */
static struct mh_access sb[MH_MAX_STORE_BUFFER];
static UInt sb_head, sb_used;

/* Hazards per instruction address. */
typedef struct {
	VgHashNode node; /* key: instruction address */
	ULong count[MH_KINDS];
} mh_site;
static VgHashTable *sites;

static void
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
}

static void
drain(void)
{
	sb_used = 0;
	drains++;
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

static Bool
in_flight(const struct mh_access *st, ULong now)
{
	return now - st->seq <= rob_size;
}

static void
on_load(Addr addr, UWord size, Addr iaddr, UWord pending)
{
	struct mh_access ld = { addr, size, window_instrs + pending };
	Bool alias = False;
	UInt i;

	loads++;
	if (crosses_line(addr, size))
		count_site(iaddr, MH_SPLIT_LOAD);
	/* Youngest store first: the youngest that overlaps decides. */
	for (i = 0; i < sb_used; i++) {
		const struct mh_access *st = &sb[(sb_head + MH_MAX_STORE_BUFFER - 1 - i) % MH_MAX_STORE_BUFFER];

		if (!in_flight(st, ld.seq))
			break; /* older ones have drained too */
		if (overlaps(st->addr, st->size, ld.addr, ld.size)) {
			if (contained(st, &ld) && family->forwards(st, &ld))
				count_site(iaddr, MH_SF_FORWARDED);
			else
				count_site(iaddr, MH_SF_BLOCKED);
			return;
		}
		if (!alias && aliases_4k(st, &ld))
			alias = True;
	}
	if (alias)
		count_site(iaddr, MH_ALIAS_4K);
}

static void
on_store(Addr addr, UWord size, Addr iaddr, UWord pending)
{
	stores++;
	if (crosses_line(addr, size))
		count_site(iaddr, MH_SPLIT_STORE);
	sb[sb_head] = (struct mh_access){ addr, size, window_instrs + pending };
	sb_head = (sb_head + 1) % MH_MAX_STORE_BUFFER;
	if (sb_used < sb_size)
		sb_used++;
}

/* A guarded load or store: the access happens only when its own guard holds. */
static void
on_load_guarded(Addr addr, UWord size, Addr iaddr, UWord pending_and_guard)
{
	if (pending_and_guard & 1)
		on_load(addr, size, iaddr, pending_and_guard >> 1);
}

static void
on_store_guarded(Addr addr, UWord size, Addr iaddr, UWord pending_and_guard)
{
	if (pending_and_guard & 1)
		on_store(addr, size, iaddr, pending_and_guard >> 1);
}

static void
on_fence(void)
{
	drain();
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
	collecting = 1;
	windows++;
	sb_used = 0; /* the code between windows drained it */
}

static void
on_superblock(Addr sp)
{
	struct mh_thread *t = &threads[running_tid];

	if (t->on && sp > t->sp) {
		t->on = 0;
		collecting = 0;
	}
}

static void
on_thread_run(ThreadId tid, ULong blocks_done)
{
	(void)blocks_done;
	running_tid = tid;
	collecting = threads[tid].on;
}

/* ------------------------------------------------------------------ */
/* Instrumentation                                                     */
/* ------------------------------------------------------------------ */

struct mh_sb {
	IRSB *out;
	Int sp_offset;
	UInt pending; /* guest instructions since the last flush */
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

static void
instrument_access(struct mh_sb *b, Bool store, IRExpr *addr, Int size, Addr iaddr, IRExpr *guard)
{
	IRExpr *pending;

	if (guard == NULL) {
		pending = mkIRExpr_HWord(b->pending);
		call(b, store ? "on_store" : "on_load", store ? (void *)on_store : (void *)on_load, 0,
		     mkIRExprVec_4(addr, mkIRExpr_HWord(size), mkIRExpr_HWord(iaddr), pending), collecting_guard(b));
		return;
	}
	/* pending << 1 | guard, so that one word carries both */
	{
		IRTemp g = newIRTemp(b->out->tyenv, Ity_I64), pg = newIRTemp(b->out->tyenv, Ity_I64);

		addStmtToIRSB(b->out, IRStmt_WrTmp(g, IRExpr_Unop(Iop_1Uto64, guard)));
		addStmtToIRSB(b->out, IRStmt_WrTmp(pg, IRExpr_Binop(Iop_Or64, IRExpr_RdTmp(g),
								     IRExpr_Const(IRConst_U64((ULong)b->pending << 1)))));
		call(b, store ? "on_store_guarded" : "on_load_guarded",
		     store ? (void *)on_store_guarded : (void *)on_load_guarded, 0,
		     mkIRExprVec_4(addr, mkIRExpr_HWord(size), mkIRExpr_HWord(iaddr), IRExpr_RdTmp(pg)), collecting_guard(b));
	}
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
	struct mh_sb b = { deepCopyIRSBExceptStmts(in), layout->offset_SP, 0 };
	Addr iaddr = 0;
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
			if (is_window_entry(iaddr)) {
				flush_instrs(&b);
				call(&b, "on_window_entry", (void *)on_window_entry, 0, mkIRExprVec_1(stack_pointer(&b)), NULL);
			}
			b.pending++;
			addStmtToIRSB(b.out, st);
			break;
		case Ist_WrTmp:
			if (st->Ist.WrTmp.data->tag == Iex_Load) {
				IRExpr *ld = st->Ist.WrTmp.data;

				instrument_access(&b, False, ld->Iex.Load.addr, sizeofIRType(ld->Iex.Load.ty), iaddr, NULL);
			}
			addStmtToIRSB(b.out, st);
			break;
		case Ist_Store:
			instrument_access(&b, True, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.Store.data)), iaddr, NULL);
			addStmtToIRSB(b.out, st);
			break;
		case Ist_LoadG: {
			IRLoadG *lg = st->Ist.LoadG.details;
			IRType ty = Ity_INVALID, wide = Ity_INVALID;

			typeOfIRLoadGOp(lg->cvt, &wide, &ty);
			instrument_access(&b, False, lg->addr, sizeofIRType(ty), iaddr, lg->guard);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_StoreG: {
			IRStoreG *sg = st->Ist.StoreG.details;

			instrument_access(&b, True, sg->addr, sizeofIRType(typeOfIRExpr(in->tyenv, sg->data)), iaddr, sg->guard);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_Dirty: {
			IRDirty *d = st->Ist.Dirty.details;

			if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify)
				instrument_access(&b, False, d->mAddr, d->mSize, iaddr, NULL);
			if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify)
				instrument_access(&b, True, d->mAddr, d->mSize, iaddr, NULL);
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_CAS: {
			/* A locked read-modify-write: a load, a store, and a full barrier. */
			IRCAS *cas = st->Ist.CAS.details;
			Int size = sizeofIRType(typeOfIRExpr(in->tyenv, cas->dataLo)) * (cas->dataHi ? 2 : 1);

			instrument_access(&b, False, cas->addr, size, iaddr, NULL);
			instrument_access(&b, True, cas->addr, size, iaddr, NULL);
			call(&b, "on_fence", (void *)on_fence, 0, mkIRExprVec_0(), collecting_guard(&b));
			addStmtToIRSB(b.out, st);
			break;
		}
		case Ist_LLSC:
			instrument_access(&b, st->Ist.LLSC.storedata != NULL, st->Ist.LLSC.addr,
			       sizeofIRType(st->Ist.LLSC.storedata ? typeOfIRExpr(in->tyenv, st->Ist.LLSC.storedata)
								   : typeOfIRTemp(in->tyenv, st->Ist.LLSC.result)),
			       iaddr, NULL);
			addStmtToIRSB(b.out, st);
			break;
		case Ist_MBE:
			if (st->Ist.MBE.event == Imbe_Fence)
				call(&b, "on_fence", (void *)on_fence, 0, mkIRExprVec_0(), collecting_guard(&b));
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

static void
mh_fini(Int exitcode)
{
	DiEpoch ep = VG_(current_DiEpoch)();
	SysRes res;
	mh_site *s;
	Int fd, k;

	(void)exitcode;
	res = VG_(open)(clo_out_file, VKI_O_CREAT | VKI_O_WRONLY | VKI_O_TRUNC, VKI_S_IRUSR | VKI_S_IWUSR);
	if (sr_isError(res)) {
		VG_(umsg)("memhazard: cannot write %s\n", clo_out_file);
		return;
	}
	fd = sr_Res(res);
	out_printf(fd, "memhazard 1\n");
	out_printf(fd, "family %s\nstore_buffer %u\nrob %u\nwindow_fn %s\n", family->name, sb_size, rob_size, clo_window_fn);
	out_printf(fd, "windows %llu\ninstructions %llu\nloads %llu\nstores %llu\ndrains %llu\n", windows, window_instrs,
		   loads, stores, drains);
	for (k = 0; k < MH_KINDS; k++)
		out_printf(fd, "%s %llu\n", kind_names[k], totals[k]);
	/* site KIND COUNT | ADDRESS: function (file:line) | ... the innermost inlined call first */
	VG_(HT_ResetIter)(sites);
	while ((s = VG_(HT_Next)(sites)) != NULL) {
		for (k = 0; k < MH_KINDS; k++) {
			if (s->count[k] == 0)
				continue;
			{
				InlIPCursor *iipc = VG_(new_IIPC)(ep, s->node.key);

				out_printf(fd, "site %s %llu", kind_names[k], s->count[k]);
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
	} else if VG_BINT_CLO (arg, "--store-buffer", clo_store_buffer, 1, MH_MAX_STORE_BUFFER) {
	} else if VG_BINT_CLO (arg, "--rob", clo_rob, 1, 1 << 20) {
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
		    "    --store-buffer=N --rob=N  override the family's sizes\n");
}

static void
mh_print_debug_usage(void)
{
}

static void
mh_post_clo_init(void)
{
	UInt i;

	if (clo_out_file == NULL)
		VG_(fmsg_bad_option)("--out-file", "memhazard needs --out-file=FILE\n");
	family = NULL;
	for (i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (VG_(strcmp)(families[i].name, clo_family) == 0)
			family = &families[i];
	if (family == NULL)
		VG_(fmsg_bad_option)("--family", "unknown family %s (intel-icx, intel-spr, intel-skx, amd-zen4)\n", clo_family);
	sb_size = clo_store_buffer ? (UInt)clo_store_buffer : family->store_buffer;
	rob_size = clo_rob ? (UInt)clo_rob : family->rob;
	threads = VG_(calloc)("memhazard.threads", VG_N_THREADS, sizeof(*threads));
	sites = VG_(HT_construct)("memhazard.sites");
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
}

VG_DETERMINE_INTERFACE_VERSION(mh_pre_clo_init)
