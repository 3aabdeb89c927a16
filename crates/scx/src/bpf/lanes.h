/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * lanes.h — the contract between elfen's sched_ext scheduler
 * (lanes.bpf.c) and its loader (src/contract.rs mirrors every number here,
 * and its tests compare them with the #defines below).
 *
 * Who writes what:
 *   - the loader, before load: the read-only globals (nr_cpus, sibling_of,
 *     slice_ns); after load: the lc_tgids and lc_cgroups maps.
 *   - the BPF side: cpus[] (each entry by the programs running on that CPU),
 *     the per-CPU stats map, and exit_info (once, in ops.exit).
 */
#ifndef ELFEN_LANES_H
#define ELFEN_LANES_H

/* bumped on any change of a number, struct or map below */
#define LANES_ABI 1

/* the most CPUs (possible CPU ids) the scheduler covers; the loader refuses more */
#define LANES_MAX_CPUS 256
/* the dispatch queue (DSQ) every batch task waits in */
#define LANES_DSQ 0
/* a batch task's slice when nothing takes its CPU earlier (ns) */
#define LANES_SLICE_NS 20000000ULL
/* how many cgroup levels above a task are compared with lc_cgroups */
#define LANES_CGROUP_DEPTH 16
/* entries of lc_tgids and of lc_cgroups */
#define LANES_MAX_LC 4096
/* exit_info's strings */
#define LANES_REASON_LEN 128
#define LANES_MSG_LEN 1024

/* The counters of the per-CPU `stats` map (one struct lanes_stats per CPU). */
enum lanes_stat {
	/* an LC task switched in on a CPU that ran none */
	LANES_STAT_LC_IN = 0,
	/* the CPU's last LC task switched out */
	LANES_STAT_LC_OUT = 1,
	/* preempt kicks sent to a sibling running batch as an LC started */
	LANES_STAT_KICK_PREEMPT = 2,
	/* idle kicks sent to a sibling as its LC left (it may take batch again) */
	LANES_STAT_KICK_IDLE = 3,
	/* local queues handed back (re-enqueued) as an LC took their CPU */
	LANES_STAT_REENQ = 4,
	/* batch tasks queued (ops.enqueue) */
	LANES_STAT_ENQUEUED = 5,
	/* batch tasks sent straight to an idle open CPU at wake-up */
	LANES_STAT_DIRECT = 6,
	/* batch tasks moved to a CPU by ops.dispatch */
	LANES_STAT_DISPATCHED = 7,
	/* ops.dispatch calls that gave nothing because the sibling runs LC */
	LANES_STAT_HELD = 8,
	/* batch tasks that started on a CPU whose sibling ran LC (kicked off at once) */
	LANES_STAT_RAN_HELD = 9,
	LANES_NR_STATS = 10,
};

struct lanes_stats {
	unsigned long long v[LANES_NR_STATS];
};

/*
 * One CPU's state, a cache line each (one writer: programs on that CPU).
 * lc: an LC task runs here; batch: a batch task runs here.
 */
struct lanes_cpu {
	unsigned int lc;
	unsigned int batch;
	unsigned long long lc_since_ns;
	unsigned long long pad[6];
};

/* Why the kernel unloaded the scheduler (ops.exit), for the loader to say. */
struct lanes_exit {
	/* enum scx_exit_kind; 0 while loaded */
	int kind;
	int exit_cpu;
	long long exit_code;
	char reason[LANES_REASON_LEN];
	char msg[LANES_MSG_LEN];
};

#endif /* ELFEN_LANES_H */
