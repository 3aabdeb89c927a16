/* SPDX-License-Identifier: Apache-2.0 */
/*
 * elfen_trace.h — the contract between the profiler's BPF program
 * (trace.bpf.c) and its Rust reader (crates/trace/src/contract.rs): every
 * event record, constant and map size, defined once (scx's intf.h style).
 *
 * Who writes what:
 *
 *   targets (hash)        tgid -> ET_ON: the traced processes. Written by
 *                         user space, read by BPF.
 *   lanes (array)         cpu -> ET_ON or 0: CPUs on which EVERY context
 *                         switch is recorded (the request lane and its
 *                         partners), not only the targets' own. Written by
 *                         user space, read by BPF.
 *   events (ring buffer)  the records below, written by BPF without waking
 *                         the reader (BPF_RB_NO_WAKEUP: user space drains
 *                         it on a timer), consumed by user space.
 *   stats (per-CPU array) one struct et_stats per CPU: records emitted and
 *                         lost (ring buffer full) per kind, faults seen.
 *                         Written by BPF, summed by user space at the end.
 *   fault_start (hash)    tid -> struct et_fault_start between a target
 *                         task's page-fault entry and its end. BPF only.
 *   sending (hash)        tid -> fd while a target task is in a send
 *                         system call. BPF only.
 *   last_waker (LRU hash) tid -> struct et_task: who last woke this task,
 *                         for every task (the chain of causes). BPF only.
 *   peer_socks (LRU hash) the 4-tuple seen from the PEER of a socket a
 *                         target sent on -> its struct sock *: lets the
 *                         peer's delayed ACK be named. BPF only.
 *   held (hash)           struct sock * -> struct et_held while a target's
 *                         socket holds written data back. BPF only.
 *
 * The byte layout is checked with _Static_assert here and with const
 * assertions plus a test against the skeleton's BTF types in contract.rs.
 * Change a field: change both and bump ELFEN_TRACE_ABI.
 */
#ifndef ELFEN_TRACE_H
#define ELFEN_TRACE_H

#ifndef __VMLINUX_H__
#include <stdint.h>
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#endif

#define ELFEN_TRACE_ABI 1

#define ET_ON 1
#define ET_COMM_LEN 16
/* Wakers of the waker carried by one wake-up record. */
#define ET_CHAIN 3

#define ET_MAX_TARGETS 1024
#define ET_MAX_FAULTING 4096
#define ET_MAX_WAKERS 32768
#define ET_MAX_SOCKS 4096
#define ET_MAX_SENDING 4096
/* Default ring buffer size (user space may set another power of two). */
#define ET_RING_BYTES (16 * 1024 * 1024)
/* Placeholder CPU count in the object: user space sets the real size. */
#define ET_CPUS_PLACEHOLDER 1

/* et_header.kind */
#define ET_SWITCH 1       /* struct et_switch */
#define ET_WAKING 2       /* struct et_waking */
#define ET_FAULT 3        /* struct et_fault */
#define ET_TCP_HELD 4     /* struct et_tcp: a send left data unsent */
#define ET_TCP_RELEASED 5 /* struct et_tcp: the held data went out (an ACK
			   * covering what was in flight arrived, or a later
			   * send found nothing unsent) */
#define ET_TCP_DELACK 6   /* struct et_tcp: the peer delayed its ACK */
#define ET_EXIT 7         /* struct et_exit */
#define ET_KINDS 8

/* et_fault.flags */
#define ET_FAULT_MAJOR (1u << 0) /* VM_FAULT_MAJOR in the result: I/O */
#define ET_FAULT_HUGE (1u << 1)  /* a transparent huge page was allocated (and zeroed) */

/* et_tcp.flags */
#define ET_TCP_NAGLE (1u << 0)    /* Nagle on (TCP_NODELAY off, not corked) */
#define ET_TCP_INFLIGHT (1u << 1) /* unacknowledged data was in flight */
#define ET_TCP_CORK (1u << 2)     /* TCP_CORK set */

struct et_header {
	__u64 time_ns; /* 0: bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
	__u32 kind;    /* 8: ET_* */
	__u32 cpu;     /* 12: CPU the program ran on */
};

struct et_task {
	__u32 tid;               /* 0 */
	__u32 tgid;              /* 4 */
	char comm[ET_COMM_LEN];  /* 8 */
};

/* A context switch on `cpu`: a lane's, or one a target takes part in. */
struct et_switch {
	struct et_header h;      /* 0 */
	struct et_task prev;     /* 16 */
	struct et_task next;     /* 40 */
	__u32 prev_state;        /* 64: 0 runnable (preempted or yielded), else the sleep state */
	__u32 preempt;           /* 68: 1 when prev was preempted */
};

/* A wake-up (sched_waking, in the waker's context) of or by a target. */
struct et_waking {
	struct et_header h;      /* 0 */
	struct et_task wakee;    /* 16 */
	struct et_task waker;    /* 40: the task running when the wake-up was issued */
	__u32 depth;             /* 64: valid entries of chain */
	__u32 reserved;          /* 68 */
	struct et_task chain[ET_CHAIN]; /* 72: who woke the waker, who woke that one, ... */
};

/* One page fault of a target task: from the software event counted where
 * the fault is taken (PERF_COUNT_SW_PAGE_FAULTS) to the one counted once it
 * is handled (..._MIN or ..._MAJ). */
struct et_fault {
	struct et_header h;      /* 0: time of the entry */
	__u32 tid;               /* 16 */
	__u32 tgid;              /* 20 */
	__u64 duration_ns;       /* 24 */
	__u64 address;           /* 32 */
	__u32 flags;             /* 40: ET_FAULT_* */
	__u32 reserved;          /* 44 */
};

/* TCP: a target's socket holding data back, the data going out, or the
 * peer of a target's socket delaying its ACK. */
struct et_tcp {
	struct et_header h;      /* 0 */
	__u64 sock;              /* 16: the target's struct sock * (an id) */
	__u64 since_ns;          /* 24: RELEASED: when the hold began */
	__u32 tid;               /* 32: the task running (sender, releaser or peer) */
	__u32 tgid;              /* 36 */
	__u32 unsent;            /* 40: bytes written but not sent (write_seq - snd_nxt) */
	__u32 in_flight;         /* 44: bytes sent, not acknowledged (snd_nxt - snd_una) */
	__u32 saddr;             /* 48: the target socket's local IPv4 address (network order) */
	__u32 daddr;             /* 52: its peer's */
	__u16 sport;             /* 56: local port (host order) */
	__u16 dport;             /* 58: peer port (host order) */
	__u32 flags;             /* 60: ET_TCP_* */
	char comm[ET_COMM_LEN];  /* 64: the running task's name */
};

/* A target task exited. */
struct et_exit {
	struct et_header h;      /* 0 */
	struct et_task task;     /* 16 */
	__u32 leader;            /* 40: it was the thread group leader (tid == tgid) */
	__u32 reserved;          /* 44 */
};

struct et_stats {
	__u64 emitted[ET_KINDS]; /* 0 */
	__u64 lost[ET_KINDS];    /* 64 */
	__u64 faults;            /* 128: faults of target tasks, recorded or not */
	__u64 reserved;          /* 136 */
};

/* BPF-private values. */
struct et_fault_start {
	__u64 start_ns;
	__u64 address;
	__u32 huge; /* a transparent huge page was allocated */
	__u32 reserved;
};

struct et_held {
	__u64 since_ns;
	__u32 acked; /* snd_nxt when the hold was seen: an ACK of it releases Nagle */
	__u32 reserved;
};

struct et_flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
};

#define ET_OFFSETOF(t, f) __builtin_offsetof(t, f)
_Static_assert(sizeof(struct et_header) == 16, "header");
_Static_assert(sizeof(struct et_task) == 24, "task");
_Static_assert(sizeof(struct et_switch) == 72, "switch");
_Static_assert(ET_OFFSETOF(struct et_switch, next) == 40, "switch.next");
_Static_assert(ET_OFFSETOF(struct et_switch, prev_state) == 64, "switch.prev_state");
_Static_assert(sizeof(struct et_waking) == 72 + 24 * ET_CHAIN, "waking");
_Static_assert(ET_OFFSETOF(struct et_waking, chain) == 72, "waking.chain");
_Static_assert(sizeof(struct et_fault) == 48, "fault");
_Static_assert(ET_OFFSETOF(struct et_fault, address) == 32, "fault.address");
_Static_assert(sizeof(struct et_tcp) == 80, "tcp");
_Static_assert(ET_OFFSETOF(struct et_tcp, sport) == 56, "tcp.sport");
_Static_assert(ET_OFFSETOF(struct et_tcp, comm) == 64, "tcp.comm");
_Static_assert(sizeof(struct et_exit) == 48, "exit");
_Static_assert(sizeof(struct et_stats) == 144, "stats");

#endif /* ELFEN_TRACE_H */
