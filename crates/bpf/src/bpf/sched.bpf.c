// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * sched.bpf.c — elfen's kernel signal source: who runs on each CPU, and
 * whether it is a task of a watched (LC) process or cgroup.
 *
 * One program on the scheduler's context switch (tp_btf/sched_switch, a BTF
 * raw tracepoint: its arguments are the tracepoint prototype's, read from
 * the u64 context array, never a trace-event record layout). The prototype
 * gained a 4th argument (prev_state) in Linux 5.18, but prev and next are
 * arguments 1 and 2 in both the old and the new one, and only those are read.
 *
 * At every switch on CPU c it writes c's slot in `cpu_slots` under a
 * seqlock (see elfen_bpf.h): the task switched in, its process and cgroup,
 * the time, and the LC accounting; on an LC busy<->idle transition of a
 * watched CPU it also sends an elfen_lc_event through the ring buffer with
 * a forced wakeup, so a reader can sleep in epoll. The switches of the
 * reader's own threads (quiet_tids) are no transitions: the CPU keeps its
 * LC state.
 *
 * A task is LC when its process is watched (watch_tgids) or its cgroup on
 * the v2 hierarchy lies in a watched subtree (watch_cgroups holds subtree
 * roots): the cgroup itself or one of its ancestors, up to
 * ELFEN_MAX_CGROUP_DEPTH levels. The answer per cgroup is cached
 * (cgroup_verdicts, valid for one watch_gen), so a context switch costs one
 * hash lookup, as with exact ids; only the first switch of a cgroup's task
 * after a change of the watched set walks its ancestors.
 *
 * A second program on the wake-up (tp_btf/sched_wakeup, once the task's
 * CPU is chosen) announces a busy edge early: an LC task woken onto a
 * watched CPU that runs no LC task sends a WAKE event. Waking the reader
 * takes interrupts between CPUs; started at the LC's wake-up they overlap
 * with the LC's own way onto its CPU instead of following its switch-in.
 * The BUSY of that switch-in then does not wake the reader again.
 */
#include "core.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "elfen_bpf.h"

/* The kernel reads this string: "GPL" selects the GPL side of this file's
 * dual licence, which tracing programs need. */
char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, ELFEN_CPUS_PLACEHOLDER);
	__type(key, __u32);
	__type(value, struct elfen_cpu_slot);
} cpu_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ELFEN_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u32);
} watch_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ELFEN_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, __u32);
} watch_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ELFEN_CGROUP_VERDICTS);
	__type(key, __u64);
	__type(value, struct elfen_cgroup_verdict);
} cgroup_verdicts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ELFEN_CPUS_PLACEHOLDER);
	__type(key, __u32);
	__type(value, __u32);
} watch_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ELFEN_RING_BYTES);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ELFEN_CPUS_PLACEHOLDER);
	__type(key, __u32);
	__type(value, __u64);
} announced SEC(".maps");

/* Number of entries in watch_cgroups, kept by user space (through the
 * skeleton's .bss): the cgroup lookup is skipped while it is 0. */
__u32 nr_watched_cgroups = 0;

/* Generation of watch_cgroups, bumped by user space (through the
 * skeleton's .bss) after each change: cached verdicts of another
 * generation are decided again. */
__u32 watch_gen = 0;

/* Whether sched_wakeup announces busy edges (WAKE events), set by user
 * space through the skeleton's .bss before any CPU is watched. */
__u32 announce_wakeups = 0;

/* Whether the reader is consuming the ring buffer without sleeping (a
 * daemon thread holding its batch lane reads it in a loop), set by user
 * space through the skeleton's .bss: events are then sent without a
 * wake-up, sparing the watched CPU the interrupt that would wake nobody. */
__u32 reader_polling = 0;

/* Threads whose switches are no transitions (the reader and the threads it
 * wakes: an LC signal writer's guards, freezers, blind isolation), set by
 * user space: tid -> 1. Such a thread woken on a watched CPU preempts
 * whatever runs there; were an LC task preempted so counted idle, the switch
 * back to it would be a BUSY that wakes the reader (and the thread) again,
 * which preempts it again: a loop that keeps the LC task off its CPU for as
 * long as it is runnable there. So while one of them runs, the CPU keeps the
 * LC state it had (its time counts as the preempted task's). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ELFEN_MAX_QUIET_TIDS);
	__type(key, __u32);
	__type(value, __u32);
} quiet_tids SEC(".maps");

/* Never written: exports struct elfen_lc_event into the object's BTF, so the
 * generated skeleton has a Rust type for it (checked against contract.rs). */
struct elfen_lc_event elfen_lc_event_btf = {};

/* The task's cgroup on the v2 (default) hierarchy, task->cgroups->dfl_cgrp;
 * NULL when the kernel has no cgroups. tp_btf arguments are BTF pointers,
 * so these are direct loads (the verifier turns a fault into a 0 read). */
static __always_inline struct cgroup *task_cgroup(struct task_struct *t)
{
	if (!bpf_core_field_exists(t->cgroups))
		return 0;
	struct css_set *cs = t->cgroups;
	if (!cs)
		return 0;
	return cs->dfl_cgrp;
}

/* A cgroup's id: the kernfs node id, the inode number of its directory in
 * cgroup2fs. 0 for none. */
static __always_inline __u64 cgroup_id_of(struct cgroup *cg)
{
	if (!cg)
		return 0;
	struct kernfs_node *kn = cg->kn;
	if (!kn)
		return 0;
	return kn->id;
}

/* Whether cgroup cg (id cgid) is a watched subtree root or below one: its
 * ancestors are looked up in watch_cgroups, nearest first, up to
 * ELFEN_MAX_CGROUP_DEPTH levels; the answer is cached per cgroup id for the
 * current watch_gen. */
static __always_inline bool in_watched_subtree(struct cgroup *cg, __u64 cgid)
{
	if (!cgid)
		return false;
	__u32 gen = *(volatile __u32 *)&watch_gen;
	struct elfen_cgroup_verdict *v = bpf_map_lookup_elem(&cgroup_verdicts, &cgid);
	if (v && v->gen == gen)
		return v->lc;
	bool lc = false;
	for (int i = 0; i < ELFEN_MAX_CGROUP_DEPTH && cg; i++) {
		__u64 id = cgroup_id_of(cg);
		if (id && bpf_map_lookup_elem(&watch_cgroups, &id)) {
			lc = true;
			break;
		}
		struct cgroup_subsys_state *parent = cg->self.parent;
		if (!parent)
			break;
		cg = parent->cgroup;
	}
	struct elfen_cgroup_verdict nv = { .gen = gen, .lc = lc };
	bpf_map_update_elem(&cgroup_verdicts, &cgid, &nv, BPF_ANY);
	return lc;
}

/* Whether a task of process tgid in cgroup cg (id cgid) is an LC task. */
static __always_inline bool is_lc(__u32 tgid, struct cgroup *cg, __u64 cgid)
{
	if (tgid == 0) /* the idle task, never LC */
		return false;
	if (bpf_map_lookup_elem(&watch_tgids, &tgid))
		return true;
	return nr_watched_cgroups && in_watched_subtree(cg, cgid);
}

static __always_inline bool is_watched(__u32 cpu)
{
	__u32 *w = bpf_map_lookup_elem(&watch_cpus, &cpu);
	return w && *w == ELFEN_WATCH_ON;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(elfen_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct elfen_cpu_slot *s = bpf_map_lookup_elem(&cpu_slots, &cpu);
	if (!s)
		return 0;

	__u64 now = bpf_ktime_get_ns();
	__u32 tid = next->pid;
	__u32 tgid = next->tgid;
	struct cgroup *cg = task_cgroup(next);
	__u64 cgid = cgroup_id_of(cg);

	bool watched = is_watched(cpu);
	bool was_lc = s->flags & ELFEN_SLOT_LC;
	bool lc = (tid && bpf_map_lookup_elem(&quiet_tids, &tid)) ? was_lc
							     : is_lc(tgid, cg, cgid);
	__u64 busy_ns = 0;

	/* seqlock write side: odd while the fields change (fetch-add: a full
	 * barrier, so the stores below are not seen before it) */
	__sync_fetch_and_add(&s->seq, 1);
	s->switch_ns = now;
	s->tid = tid;
	s->tgid = tgid;
	s->cgroup_id = cgid;
	if (lc && !was_lc) {
		s->lc_since_ns = now;
		s->lc_periods += 1;
	} else if (!lc && was_lc) {
		busy_ns = now - s->lc_since_ns;
		s->lc_busy_ns += busy_ns;
	}
	s->flags = (lc ? ELFEN_SLOT_LC : 0) | (watched ? ELFEN_SLOT_WATCHED : 0) |
		   ELFEN_SLOT_VALID;
	s->abi = ELFEN_BPF_ABI;
	__u32 seq = __sync_fetch_and_add(&s->seq, 1) + 1;

	if (watched && lc != was_lc) {
		/* a BUSY the reader was woken for by its WAKE waits for the
		 * reader's next wake-up */
		__u64 flags = BPF_RB_FORCE_WAKEUP;
		__u64 *a = bpf_map_lookup_elem(&announced, &cpu);
		if (a && *a) {
			if (lc && now - *a < ELFEN_ANNOUNCE_NS)
				flags = BPF_RB_NO_WAKEUP;
			*a = 0;
		}
		if (reader_polling)
			flags = BPF_RB_NO_WAKEUP;
		struct elfen_lc_event e = {
			.time_ns = now,
			.cpu = cpu,
			.kind = lc ? ELFEN_EVENT_BUSY : ELFEN_EVENT_IDLE,
			.tid = tid,
			.tgid = tgid,
			.cgroup_id = cgid,
			.busy_ns = busy_ns,
			.seq = seq,
		};
		if (bpf_ringbuf_output(&events, &e, sizeof(e), flags))
			__sync_fetch_and_add(&s->dropped, 1);
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(elfen_sched_wakeup, struct task_struct *p)
{
	if (!announce_wakeups || !bpf_core_field_exists(p->thread_info.cpu))
		return 0;
	__u32 cpu = p->thread_info.cpu;
	if (!is_watched(cpu))
		return 0;
	__u32 tgid = p->tgid;
	struct cgroup *cg = task_cgroup(p);
	__u64 cgid = cgroup_id_of(cg);
	if (!is_lc(tgid, cg, cgid))
		return 0;
	struct elfen_cpu_slot *s = bpf_map_lookup_elem(&cpu_slots, &cpu);
	if (!s || (s->flags & ELFEN_SLOT_LC))
		return 0; /* an LC task runs there: busy already */
	__u64 *a = bpf_map_lookup_elem(&announced, &cpu);
	if (!a)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (*a && now - *a < ELFEN_ANNOUNCE_NS)
		return 0; /* announced already */
	*a = now;
	struct elfen_lc_event e = {
		.time_ns = now,
		.cpu = cpu,
		.kind = ELFEN_EVENT_WAKE,
		.tid = p->pid,
		.tgid = tgid,
		.cgroup_id = cgid,
		.seq = s->seq,
	};
	if (bpf_ringbuf_output(&events, &e, sizeof(e),
			       reader_polling ? BPF_RB_NO_WAKEUP : BPF_RB_FORCE_WAKEUP))
		__sync_fetch_and_add(&s->dropped, 1);
	return 0;
}
