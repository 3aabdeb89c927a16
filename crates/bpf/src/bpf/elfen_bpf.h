/* SPDX-License-Identifier: Apache-2.0 */
/*
 * elfen_bpf.h — the contract between the BPF program (sched.bpf.c) and its
 * Rust reader (crates/bpf/src/contract.rs), in the style of sched-ext/scx's
 * intf.h: every shared struct, constant and map size is defined here once.
 *
 * Who writes what:
 *
 *   struct elfen_cpu_slot   one per possible CPU in the BPF_F_MMAPABLE array
 *                           map `cpu_slots`. Written ONLY by the BPF program,
 *                           ONLY on that CPU (sched_switch runs on the CPU
 *                           that switches, with preemption off), so each
 *                           64-byte slot has exactly one writer and no two
 *                           CPUs share a cache line. User space maps it
 *                           read-only and reads it under the seqlock `seq`.
 *
 *   watch_tgids (hash)      tgid -> ELFEN_WATCH_ON. Written by user space
 *                           (watch_tgid / unwatch_tgid), read by BPF.
 *   watch_cgroups (hash)    v2 cgroup id -> ELFEN_WATCH_ON: the roots of
 *                           watched SUBTREES (a task in the cgroup or in any
 *                           descendant is LC). Written by user space, read
 *                           by BPF.
 *   cgroup_verdicts (LRU)   v2 cgroup id -> struct elfen_cgroup_verdict: whether
 *                           a cgroup lies in a watched subtree, decided by
 *                           BPF walking its ancestors (at most
 *                           ELFEN_MAX_CGROUP_DEPTH levels) the first time a
 *                           task of it switches in. Written and read by BPF;
 *                           an entry counts only while its `gen` equals
 *                           `watch_gen` (.bss), which user space bumps after
 *                           every change of watch_cgroups. Cgroup ids are
 *                           never reused, so an entry never names another
 *                           cgroup.
 *   watch_cpus (array)      cpu -> ELFEN_WATCH_ON or 0. Written by user
 *                           space (set_watched_cpus), read by BPF: only a
 *                           watched CPU emits transition events.
 *
 *   announced (array)       cpu -> bpf_ktime_get_ns() of the last WAKE event
 *                           for it (0: none). Written by BPF only: set on
 *                           the waker's CPU (sched_wakeup), cleared by the
 *                           CPU's own sched_switch. Races are benign (at
 *                           worst one extra or one missed early event).
 *
 *   struct elfen_lc_event   one per LC busy/idle transition on a watched CPU,
 *                           and one WAKE when an LC task is woken onto a
 *                           watched CPU that runs no LC task; written by BPF
 *                           into the ring buffer `events`, consumed by user
 *                           space. BUSY and IDLE are sent with
 *                           BPF_RB_FORCE_WAKEUP, except a BUSY within
 *                           ELFEN_ANNOUNCE_NS of its CPU's WAKE: the reader
 *                           was woken by that WAKE already, so the BUSY
 *                           waits (BPF_RB_NO_WAKEUP) for its next wake-up.
 *
 * The byte layout below is checked twice: _Static_assert here (C side), and
 * `const` assertions plus a test against the skeleton's BTF-generated types
 * in contract.rs (Rust side). Change a field: change both and bump
 * ELFEN_BPF_ABI.
 */
#ifndef ELFEN_BPF_H
#define ELFEN_BPF_H

#ifndef __VMLINUX_H__
#include <stdint.h>
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#endif

/* Version of this contract; stored in every slot's `abi` field by BPF. */
#define ELFEN_BPF_ABI 2

/* Size of one per-CPU slot: one cache line. */
#define ELFEN_SLOT_SIZE 64

/* Most entries in the watched-tgid and watched-cgroup hash maps. */
#define ELFEN_MAX_TGIDS 4096
#define ELFEN_MAX_CGROUPS 1024

/* Most entries in the quiet-tid hash map (the reader's own threads). */
#define ELFEN_MAX_QUIET_TIDS 256

/* Levels of ancestors a task's cgroup is checked against (its own
 * included): a watched subtree root more levels above is not found. */
#define ELFEN_MAX_CGROUP_DEPTH 16

/* Entries of the per-cgroup verdict cache (LRU: the least recently used go). */
#define ELFEN_CGROUP_VERDICTS 4096

/* Bytes of the transition-event ring buffer (a power of two, >= a page). */
#define ELFEN_RING_BYTES (256 * 1024)

/* Placeholder CPU count in the object file: user space sets the real
 * max_entries of cpu_slots and watch_cpus (libbpf_num_possible_cpus)
 * before load. */
#define ELFEN_CPUS_PLACEHOLDER 1

/* How long a WAKE stands for the switch-in it announces: a BUSY on that CPU
 * within it is not woken for, and the reader keeps the lane busy that long
 * waiting for the switch-in. */
#define ELFEN_ANNOUNCE_NS 1000000ULL

/* Value stored in the watch maps. */
#define ELFEN_WATCH_ON 1

/* elfen_cpu_slot.flags */
#define ELFEN_SLOT_LC      (1u << 0) /* the task running here is an LC task */
#define ELFEN_SLOT_WATCHED (1u << 1) /* this CPU emits transition events */
#define ELFEN_SLOT_VALID   (1u << 2) /* at least one switch was recorded */

/* elfen_lc_event.kind */
#define ELFEN_EVENT_IDLE 0 /* the CPU stopped running an LC task */
#define ELFEN_EVENT_BUSY 1 /* the CPU started running an LC task */
#define ELFEN_EVENT_WAKE 2 /* an LC task was woken onto the CPU, which runs
			    * no LC task: BUSY follows at its switch-in */

/*
 * One CPU's view: who runs here since the last context switch.
 *
 * Seqlock protocol (BPF writer, on this CPU only):
 *   seq += 1 (now odd; an atomic fetch-add, a full barrier)
 *   write every other field
 *   seq += 1 (now even; an atomic fetch-add, a full barrier)
 * A reader loads seq (retry while odd), copies the fields, then loads seq
 * again (acquire fence before it); equal values mean a consistent copy.
 * seq / 2 is the number of context switches recorded on this CPU.
 *
 * `flags` alone (bit ELFEN_SLOT_LC) is the cheap "is an LC task running
 * here" read: one 4-byte load, no seqlock needed.
 */
struct elfen_cpu_slot {
	__u32 seq;          /*  0: seqlock, odd while BPF writes */
	__u32 flags;        /*  4: ELFEN_SLOT_* */
	__u64 switch_ns;    /*  8: bpf_ktime_get_ns() (CLOCK_MONOTONIC) at the last switch */
	__u32 tid;          /* 16: task (thread) id switched in; 0 = idle task */
	__u32 tgid;         /* 20: its process id */
	__u64 cgroup_id;    /* 24: its cgroup v2 (default hierarchy) id; 0 if unknown */
	__u64 lc_since_ns;  /* 32: start of the current LC busy period (valid while LC) */
	__u64 lc_periods;   /* 40: LC busy periods begun on this CPU */
	__u64 lc_busy_ns;   /* 48: ns spent in completed LC busy periods */
	__u32 dropped;      /* 56: transition events lost (ring buffer full), wrapping */
	__u16 abi;          /* 60: ELFEN_BPF_ABI */
	__u16 reserved;     /* 62: zero */
};

/*
 * One LC busy/idle transition on a watched CPU (ring buffer `events`).
 * For BUSY, tid/tgid/cgroup_id name the LC task switched in; for IDLE, the
 * task switched in (not LC; tid 0 = the idle task) and busy_ns the length of
 * the LC busy period that ended; for WAKE, the LC task woken (time_ns: the
 * wake-up, seq: the CPU's slot seq then).
 */
struct elfen_lc_event {
	__u64 time_ns;      /*  0: bpf_ktime_get_ns() at the switch (= the slot's switch_ns), or the wake-up */
	__u32 cpu;          /*  8: CPU that switched */
	__u32 kind;         /* 12: ELFEN_EVENT_BUSY or ELFEN_EVENT_IDLE */
	__u32 tid;          /* 16: task switched in */
	__u32 tgid;         /* 20: its process id */
	__u64 cgroup_id;    /* 24: its cgroup v2 id (0 if unknown) */
	__u64 busy_ns;      /* 32: IDLE: length of the busy period that ended; BUSY: 0 */
	__u32 seq;          /* 40: the slot's seq after this switch */
	__u32 reserved;     /* 44: zero */
};

/*
 * A cached answer to "is this cgroup in a watched subtree" (cgroup_verdicts).
 */
struct elfen_cgroup_verdict {
	__u32 gen;          /*  0: watch_gen when it was decided */
	__u32 lc;           /*  4: 1 if in a watched subtree, else 0 */
};

#define ELFEN_OFFSETOF(t, f) __builtin_offsetof(t, f)
_Static_assert(sizeof(struct elfen_cpu_slot) == ELFEN_SLOT_SIZE, "slot is one cache line");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, seq) == 0, "slot.seq");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, flags) == 4, "slot.flags");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, switch_ns) == 8, "slot.switch_ns");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, tid) == 16, "slot.tid");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, tgid) == 20, "slot.tgid");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, cgroup_id) == 24, "slot.cgroup_id");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, lc_since_ns) == 32, "slot.lc_since_ns");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, lc_periods) == 40, "slot.lc_periods");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, lc_busy_ns) == 48, "slot.lc_busy_ns");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, dropped) == 56, "slot.dropped");
_Static_assert(ELFEN_OFFSETOF(struct elfen_cpu_slot, abi) == 60, "slot.abi");
_Static_assert(sizeof(struct elfen_lc_event) == 48, "event size");
_Static_assert(sizeof(struct elfen_cgroup_verdict) == 8, "verdict size");
_Static_assert(ELFEN_OFFSETOF(struct elfen_lc_event, cpu) == 8, "event.cpu");
_Static_assert(ELFEN_OFFSETOF(struct elfen_lc_event, tid) == 16, "event.tid");
_Static_assert(ELFEN_OFFSETOF(struct elfen_lc_event, cgroup_id) == 24, "event.cgroup_id");
_Static_assert(ELFEN_OFFSETOF(struct elfen_lc_event, busy_ns) == 32, "event.busy_ns");
_Static_assert(ELFEN_OFFSETOF(struct elfen_lc_event, seq) == 40, "event.seq");

#endif /* ELFEN_BPF_H */
