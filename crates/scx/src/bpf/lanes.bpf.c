// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * lanes.bpf.c — elfen's sched_ext scheduler: Elfen's lanes in the kernel.
 *
 * It schedules only the batch: with SCX_OPS_SWITCH_PARTIAL the kernel hands
 * it just the tasks the loader put in the ext class (policy SCHED_EXT) and
 * their children; every other task stays in the fair class. The classes are
 * ordered fair > ext > idle, so a batch task never delays a fair (LC) task
 * on its own CPU. What this program adds is the SMT sibling — the lane rule:
 *
 *   a batch task runs on a CPU only when no LC task runs on its sibling
 *   (on the CPU itself the class order sees to it).
 *
 * How:
 *   - tp_btf/sched_switch records per CPU whether an LC task runs there
 *     (cpus[].lc; LC = a thread group in lc_tgids or a task whose cgroup, or
 *     an ancestor of it, is in lc_cgroups). When an LC task starts on a CPU,
 *     batch running on the sibling is kicked off (SCX_KICK_PREEMPT: its slice
 *     ends, it goes back through ops.enqueue) and batch parked in this CPU's
 *     own local queue is handed back to the shared queue (it may run on
 *     another core meanwhile). When the CPU's last LC task leaves, the
 *     sibling is kicked awake (SCX_KICK_IDLE) to take batch again.
 *   - ops.dispatch on a CPU whose sibling runs LC dispatches nothing (the
 *     CPU idles); otherwise it takes the next batch task from the one shared
 *     queue (LANES_DSQ, FIFO).
 *   - ops.running is the safety net for the races of the above: a batch task
 *     that starts on a CPU whose sibling runs LC (it was queued locally
 *     before the LC came) kicks its own CPU at once.
 *   - SCX_OPS_ENQ_LAST: a batch task whose slice ended with no other task
 *     to run comes back to ops.enqueue instead of running on, so a kicked
 *     task really leaves; it stays where it is only on an open CPU.
 *
 * The contract with the loader (read-only globals, maps, the stats and exit
 * records) is lanes.h.
 */
#include "scx.h"
#include "lanes.h"

char LICENSE[] SEC("license") = "GPL";

/* set by the loader before load */
const volatile u32 nr_cpus = 1;			 /* possible CPU ids, <= LANES_MAX_CPUS */
const volatile s32 sibling_of[LANES_MAX_CPUS]; /* a CPU's SMT sibling, -1 for none */
const volatile u64 slice_ns = LANES_SLICE_NS;
const volatile u32 abi = LANES_ABI;

/* per CPU, a cache line each (lanes.h) */
struct lanes_cpu cpus[LANES_MAX_CPUS] __attribute__((aligned(64)));
/* why the kernel unloaded the scheduler (ops.exit) */
struct lanes_exit exit_info;

/* LC thread groups (tgid -> 1), filled by the loader */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LANES_MAX_LC);
	__type(key, u32);
	__type(value, u8);
} lc_tgids SEC(".maps");

/* LC cgroups (cgroup v2 id -> 1), filled by the loader */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LANES_MAX_LC);
	__type(key, u64);
	__type(value, u8);
} lc_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct lanes_stats);
} stats SEC(".maps");

static __always_inline void stat_inc(enum lanes_stat s)
{
	u32 zero = 0;
	struct lanes_stats *st = bpf_map_lookup_elem(&stats, &zero);

	if (st && s < LANES_NR_STATS)
		__sync_fetch_and_add(&st->v[s], 1);
}

static __always_inline struct lanes_cpu *cpu_state(s32 cpu)
{
	if (cpu < 0 || cpu >= LANES_MAX_CPUS || (u32)cpu >= nr_cpus)
		return NULL;
	return &cpus[cpu];
}

static __always_inline s32 sibling(s32 cpu)
{
	if (cpu < 0 || cpu >= LANES_MAX_CPUS || (u32)cpu >= nr_cpus)
		return -1;
	return sibling_of[cpu];
}

/* May batch run on @cpu: does its sibling run no LC task? */
static __always_inline bool lane_open(s32 cpu)
{
	struct lanes_cpu *sc = cpu_state(sibling(cpu));

	return !sc || !READ_ONCE(sc->lc);
}

static __always_inline bool is_lc(struct task_struct *p)
{
	struct cgroup *cg;
	u32 tgid;
	int i;

	tgid = BPF_CORE_READ(p, tgid);
	if (tgid == 0) /* the idle task */
		return false;
	if (bpf_map_lookup_elem(&lc_tgids, &tgid))
		return true;
	cg = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	for (i = 0; i < LANES_CGROUP_DEPTH && cg; i++) {
		u64 id = BPF_CORE_READ(cg, kn, id);

		if (bpf_map_lookup_elem(&lc_cgroups, &id))
			return true;
		cg = BPF_CORE_READ(cg, self.parent, cgroup);
	}
	return false;
}

/*
 * Claims an idle CPU where @p may run and batch may run (its sibling runs no
 * LC), scanning from the CPU after @from so queued work spreads; -1 if none.
 */
static __always_inline s32 claim_open_idle_cpu(struct task_struct *p, s32 from)
{
	u32 n = nr_cpus;
	u32 i;

	for (i = 1; i <= LANES_MAX_CPUS; i++) {
		s32 cpu;

		if (i > n)
			break;
		cpu = (s32)(((u32)from + i) % n);
		if (!lane_open(cpu) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_test_and_clear_cpu_idle(cpu))
			return cpu;
	}
	return -1;
}

s32 BPF_STRUCT_OPS(elfen_lanes_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (!is_idle || !lane_open(cpu)) {
		/* the kernel's choice is busy or held: another idle open CPU? */
		s32 open = claim_open_idle_cpu(p, cpu);

		if (open < 0)
			return cpu; /* ops.enqueue queues it */
		cpu = open;
	}
	/* an idle CPU whose sibling runs no LC: run there now */
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
	stat_inc(LANES_STAT_DIRECT);
	return cpu;
}

void BPF_STRUCT_OPS(elfen_lanes_enqueue, struct task_struct *p, u64 enq_flags)
{
	s32 cpu = scx_bpf_task_cpu(p);

	stat_inc(LANES_STAT_ENQUEUED);
	/*
	 * The last runnable task of a CPU whose slice ended: it keeps its CPU
	 * while the lane is open (nothing else wants it), else it waits.
	 */
	if ((enq_flags & SCX_ENQ_LAST) && lane_open(cpu)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		return;
	}
	scx_bpf_dsq_insert(p, LANES_DSQ, slice_ns, enq_flags);
	cpu = claim_open_idle_cpu(p, cpu);
	if (cpu >= 0)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
}

void BPF_STRUCT_OPS(elfen_lanes_dispatch, s32 cpu, struct task_struct *prev)
{
	if (!lane_open(cpu)) {
		stat_inc(LANES_STAT_HELD);
		return;
	}
	if (scx_bpf_dsq_move_to_local(LANES_DSQ))
		stat_inc(LANES_STAT_DISPATCHED);
}

void BPF_STRUCT_OPS(elfen_lanes_running, struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);
	struct lanes_cpu *c = cpu_state(cpu);

	/*
	 * Store, then load the sibling's LC flag, the mirror of the
	 * sched_switch program (store LC flag, load batch flag): both stores
	 * are exchanges (full barriers), so at least one side sees the other
	 * and either the kick is sent or this check catches it.
	 */
	if (c)
		__sync_lock_test_and_set(&c->batch, 1);
	if (!lane_open(cpu)) {
		/* queued here before the sibling's LC came: off at once */
		stat_inc(LANES_STAT_RAN_HELD);
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
	}
}

void BPF_STRUCT_OPS(elfen_lanes_stopping, struct task_struct *p, bool runnable)
{
	struct lanes_cpu *c = cpu_state(scx_bpf_task_cpu(p));

	if (c)
		WRITE_ONCE(c->batch, 0);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(elfen_lanes_init)
{
	return scx_bpf_create_dsq(LANES_DSQ, -1);
}

void BPF_STRUCT_OPS(elfen_lanes_exit, struct scx_exit_info *ei)
{
	exit_info.exit_cpu = BPF_CORE_READ(ei, exit_cpu);
	exit_info.exit_code = BPF_CORE_READ(ei, exit_code);
	bpf_probe_read_kernel_str(exit_info.reason, sizeof(exit_info.reason),
				  BPF_CORE_READ(ei, reason));
	bpf_probe_read_kernel_str(exit_info.msg, sizeof(exit_info.msg), BPF_CORE_READ(ei, msg));
	/* last: the loader reads a non-zero kind as "the record is complete" */
	asm volatile("" ::: "memory");
	WRITE_ONCE(exit_info.kind, (int)BPF_CORE_READ(ei, kind));
}

/*
 * Every context switch: does an LC task run on this CPU now? On a change,
 * act on the sibling (above).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(elfen_lanes_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	s32 cpu = bpf_get_smp_processor_id();
	struct lanes_cpu *c = cpu_state(cpu);
	struct lanes_cpu *sc;
	s32 sib;
	bool lc;

	if (!c)
		return 0;
	lc = is_lc(next);
	if (lc == (READ_ONCE(c->lc) != 0))
		return 0;
	/* an exchange: a full barrier before the sibling's batch flag is read */
	__sync_lock_test_and_set(&c->lc, lc);
	sib = sibling(cpu);
	sc = cpu_state(sib);
	if (lc) {
		c->lc_since_ns = bpf_ktime_get_ns();
		stat_inc(LANES_STAT_LC_IN);
		/* batch on the sibling: off (its dispatch holds from now on) */
		if (sc && READ_ONCE(sc->batch)) {
			scx_bpf_kick_cpu(sib, SCX_KICK_PREEMPT);
			stat_inc(LANES_STAT_KICK_PREEMPT);
		}
		/* batch parked in this CPU's local queue: back to the shared one */
		if (bpf_ksym_exists(scx_bpf_reenqueue_local___v2___compat) &&
		    scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL) > 0) {
			scx_bpf_reenqueue_local___v2___compat();
			stat_inc(LANES_STAT_REENQ);
		}
	} else {
		stat_inc(LANES_STAT_LC_OUT);
		/* the sibling may take batch again */
		if (sc) {
			scx_bpf_kick_cpu(sib, SCX_KICK_IDLE);
			stat_inc(LANES_STAT_KICK_IDLE);
		}
	}
	return 0;
}

SEC(".struct_ops.link")
struct sched_ext_ops elfen_lanes = {
	.select_cpu = (void *)elfen_lanes_select_cpu,
	.enqueue = (void *)elfen_lanes_enqueue,
	.dispatch = (void *)elfen_lanes_dispatch,
	.running = (void *)elfen_lanes_running,
	.stopping = (void *)elfen_lanes_stopping,
	.init = (void *)elfen_lanes_init,
	.exit = (void *)elfen_lanes_exit,
	.flags = SCX_OPS_SWITCH_PARTIAL | SCX_OPS_ENQ_LAST,
	.name = "elfen_lanes",
};
