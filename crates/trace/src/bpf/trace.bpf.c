// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * trace.bpf.c — elfen's request-level hazard profiler (`elfen trace`): the
 * kernel events around one LC service's requests, filtered in the kernel
 * to the traced processes (`targets`) and the lanes of interest (`lanes`),
 * sent through one ring buffer without waking the reader.
 *
 * Only tracepoints and software perf events: no kprobes, fentry or fexit,
 * which a kernel in lockdown (integrity) refuses.
 *
 *   tp_btf/sched_switch      every switch on a lane; elsewhere only those a
 *                            target takes part in
 *   tp_btf/sched_waking      wake-ups of or by a target, in the waker's
 *                            context, with the waker's own wakers (the
 *                            chain of causes, from `last_waker`, kept for
 *                            every task)
 *   perf_event (software)    PERF_COUNT_SW_PAGE_FAULTS (taken) and
 *                            ..._MIN / ..._MAJ (handled): a target's page
 *                            faults and their length
 *   tp_btf/mm_page_alloc     an order-9 allocation inside such a fault: a
 *                            transparent huge page, zeroed in the fault
 *   tp_btf/sys_enter, sys_exit   a target's sends (write, writev, sendto,
 *                            sendmsg; x86-64 numbers) on TCP sockets: data
 *                            left unsent at the return (HELD: Nagle with
 *                            data in flight, cork, window), or nothing left
 *                            of what was held (RELEASED)
 *   tp_btf/tcp_probe         an incoming segment on a held socket whose ACK
 *                            covers what was in flight: Nagle lets the held
 *                            data go (RELEASED)
 *   tp_btf/timer_start       the delayed-ACK timer of the peer of a target's
 *                            socket (a local client): DELACK
 *   tp_btf/sched_process_exit   a target's thread exiting
 *
 * Each program is optional: user space switches off those whose hook this
 * kernel lacks and names them. Arguments come from BTF-typed pointers,
 * never from trace-event record layouts; kernel structs from trace_core.h.
 */
#include "trace_core.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "elfen_trace.h"

/* "GPL" selects the GPL side of this file's dual licence, which tracing
 * programs need. */
char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ET_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ET_CPUS_PLACEHOLDER);
	__type(key, __u32);
	__type(value, __u32);
} lanes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ET_RING_BYTES);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct et_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ET_MAX_FAULTING);
	__type(key, __u32);
	__type(value, struct et_fault_start);
} fault_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ET_MAX_WAKERS);
	__type(key, __u32);
	__type(value, struct et_task);
} last_waker SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ET_MAX_SOCKS);
	__type(key, struct et_flow_key);
	__type(value, __u64);
} peer_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ET_MAX_SOCKS);
	__type(key, __u64);
	__type(value, struct et_held);
} held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ET_MAX_SENDING);
	__type(key, __u32);
	__type(value, __u32);
} sending SEC(".maps");

/* Faults shorter than this are counted but not recorded (set by user
 * space through the skeleton's .bss before attaching). */
__u64 min_fault_ns = 0;

/* The kernel address of tcp_delack_timer (from /proc/kallsyms, set by user
 * space; 0: delayed ACKs are not looked for). */
__u64 delack_fn = 0;

/* Never written: export the record types into the object's BTF, so the
 * generated skeleton has Rust types to check contract.rs against. */
struct et_switch et_switch_btf = {};
struct et_waking et_waking_btf = {};
struct et_fault et_fault_btf = {};
struct et_tcp et_tcp_btf = {};
struct et_exit et_exit_btf = {};
struct et_stats et_stats_btf = {};

static __always_inline bool is_target(__u32 tgid)
{
	return tgid && bpf_map_lookup_elem(&targets, &tgid);
}

static __always_inline bool is_lane(__u32 cpu)
{
	__u32 *v = bpf_map_lookup_elem(&lanes, &cpu);
	return v && *v == ET_ON;
}

static __always_inline void emit(void *rec, __u64 size, __u32 kind)
{
	__u32 zero = 0;
	struct et_stats *st = bpf_map_lookup_elem(&stats, &zero);
	long err = bpf_ringbuf_output(&events, rec, size, BPF_RB_NO_WAKEUP);
	if (st && kind < ET_KINDS) {
		if (err)
			st->lost[kind] += 1;
		else
			st->emitted[kind] += 1;
	}
}

static __always_inline void fill_task(struct et_task *d, struct task_struct *t)
{
	d->tid = t->pid;
	d->tgid = t->tgid;
	struct task_struct___et *tt = (void *)t;
	bpf_probe_read_kernel(d->comm, sizeof(d->comm), tt->comm);
}

static __always_inline __u32 task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(((struct task_struct___et *)t)->__state))
		return BPF_CORE_READ((struct task_struct___et *)t, __state);
	return (__u32)BPF_CORE_READ((struct task_struct___et_old *)t, state);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(et_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 cpu = bpf_get_smp_processor_id();
	if (!is_lane(cpu) && !is_target(prev->tgid) && !is_target(next->tgid))
		return 0;
	struct et_switch e = {};
	e.h.time_ns = bpf_ktime_get_ns();
	e.h.kind = ET_SWITCH;
	e.h.cpu = cpu;
	fill_task(&e.prev, prev);
	fill_task(&e.next, next);
	e.preempt = preempt;
	e.prev_state = preempt ? 0 : task_state(prev);
	emit(&e, sizeof(e), ET_SWITCH);
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(et_sched_waking, struct task_struct *p)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct et_task waker = {};
	fill_task(&waker, cur);
	__u32 wakee_tid = p->pid;
	/* every task's last waker, for the chains of later wake-ups */
	bpf_map_update_elem(&last_waker, &wakee_tid, &waker, BPF_ANY);
	if (!is_target(p->tgid) && !is_target(waker.tgid))
		return 0;
	struct et_waking e = {};
	e.h.time_ns = bpf_ktime_get_ns();
	e.h.kind = ET_WAKING;
	e.h.cpu = bpf_get_smp_processor_id();
	fill_task(&e.wakee, p);
	e.waker = waker;
	__u32 tid = waker.tid;
	for (int i = 0; i < ET_CHAIN; i++) {
		if (!tid)
			break;
		struct et_task *w = bpf_map_lookup_elem(&last_waker, &tid);
		if (!w || w->tid == tid || w->tid == wakee_tid)
			break;
		e.chain[i] = *w;
		e.depth = i + 1;
		tid = w->tid;
	}
	emit(&e, sizeof(e), ET_WAKING);
	return 0;
}

/* Page faults: the software event counted where a fault is taken ... */
SEC("perf_event")
int et_fault_begin(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!is_target(id >> 32))
		return 0;
	__u32 tid = (__u32)id;
	struct et_fault_start s = {};
	s.start_ns = bpf_ktime_get_ns();
	s.address = ctx->addr;
	bpf_map_update_elem(&fault_start, &tid, &s, BPF_ANY);
	return 0;
}

/* ... and the one counted once it is handled. */
static __always_inline int fault_end(__u32 flags)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct et_fault_start *s = bpf_map_lookup_elem(&fault_start, &tid);
	if (!s)
		return 0;
	struct et_fault e = {};
	e.h.time_ns = s->start_ns;
	e.h.kind = ET_FAULT;
	e.h.cpu = bpf_get_smp_processor_id();
	e.tid = tid;
	e.tgid = id >> 32;
	e.duration_ns = bpf_ktime_get_ns() - s->start_ns;
	e.address = s->address;
	e.flags = flags | (s->huge ? ET_FAULT_HUGE : 0);
	bpf_map_delete_elem(&fault_start, &tid);
	__u32 zero = 0;
	struct et_stats *st = bpf_map_lookup_elem(&stats, &zero);
	if (st)
		st->faults += 1;
	if (e.duration_ns >= min_fault_ns)
		emit(&e, sizeof(e), ET_FAULT);
	return 0;
}

SEC("perf_event")
int et_fault_end_min(struct bpf_perf_event_data *ctx)
{
	return fault_end(0);
}

SEC("perf_event")
int et_fault_end_maj(struct bpf_perf_event_data *ctx)
{
	return fault_end(ET_FAULT_MAJOR);
}

/* A huge page allocated inside a target's fault. */
SEC("tp_btf/mm_page_alloc")
int BPF_PROG(et_page_alloc, struct page *page, unsigned int order)
{
	if (order < HUGE_ORDER)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct et_fault_start *s = bpf_map_lookup_elem(&fault_start, &tid);
	if (s)
		s->huge = 1;
	return 0;
}

/* The TCP socket behind file descriptor fd of the current task, or 0. */
static __always_inline struct sock *tcp_sock_of_fd(int fd)
{
	struct task_struct___et *t = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	if (!f)
		return 0;
	if ((BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	struct socket *so = BPF_CORE_READ(f, private_data);
	struct sock *sk = BPF_CORE_READ(so, sk);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	return sk;
}

/* The TCP record of socket sk as it is now. */
static __always_inline void tcp_record(struct et_tcp *e, __u32 kind, struct sock *sk)
{
	e->h.time_ns = bpf_ktime_get_ns();
	e->h.kind = kind;
	e->h.cpu = bpf_get_smp_processor_id();
	e->sock = (__u64)sk;
	__u64 id = bpf_get_current_pid_tgid();
	e->tid = (__u32)id;
	e->tgid = id >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->saddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
	e->daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	struct tcp_sock *tp = (void *)sk;
	__u32 nxt = BPF_CORE_READ(tp, snd_nxt);
	e->unsent = BPF_CORE_READ(tp, write_seq) - nxt;
	e->in_flight = nxt - BPF_CORE_READ(tp, snd_una);
	__u32 nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	e->flags = ((nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) ? 0 : ET_TCP_NAGLE) |
		   (BPF_CORE_READ(tp, packets_out) ? ET_TCP_INFLIGHT : 0) |
		   ((nonagle & TCP_NAGLE_CORK) ? ET_TCP_CORK : 0);
}

static __always_inline void release(struct sock *sk, struct et_held *h)
{
	struct et_tcp e = {};
	tcp_record(&e, ET_TCP_RELEASED, sk);
	e.since_ns = h->since_ns;
	__u64 key = (__u64)sk;
	bpf_map_delete_elem(&held, &key);
	emit(&e, sizeof(e), ET_TCP_RELEASED);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(et_sys_enter, struct pt_regs *regs, long id)
{
	if (id != NR_WRITE && id != NR_WRITEV && id != NR_SENDTO && id != NR_SENDMSG)
		return 0;
	__u64 pt = bpf_get_current_pid_tgid();
	if (!is_target(pt >> 32))
		return 0;
	__u32 tid = (__u32)pt;
	__u32 fd = (__u32)BPF_CORE_READ(regs, di);
	bpf_map_update_elem(&sending, &tid, &fd, BPF_ANY);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(et_sys_exit, struct pt_regs *regs, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *fdp = bpf_map_lookup_elem(&sending, &tid);
	if (!fdp)
		return 0;
	int fd = *fdp;
	bpf_map_delete_elem(&sending, &tid);
	if (ret <= 0)
		return 0;
	struct sock *sk = tcp_sock_of_fd(fd);
	if (!sk)
		return 0;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	/* remember the socket by the 4-tuple its peer sees, to name the
	 * peer's delayed ACKs */
	struct et_flow_key peer = {
		.saddr = BPF_CORE_READ(sk, __sk_common.skc_daddr),
		.daddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr),
		.sport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport)),
		.dport = BPF_CORE_READ(sk, __sk_common.skc_num),
	};
	__u64 skv = (__u64)sk;
	bpf_map_update_elem(&peer_socks, &peer, &skv, BPF_ANY);
	struct tcp_sock *tp = (void *)sk;
	__u32 nxt = BPF_CORE_READ(tp, snd_nxt);
	struct et_held *h = bpf_map_lookup_elem(&held, &skv);
	if (BPF_CORE_READ(tp, write_seq) == nxt) {
		if (h)
			release(sk, h);
		return 0;
	}
	if (h)
		return 0; /* more written behind what waits */
	struct et_held nh = {.since_ns = bpf_ktime_get_ns(), .acked = nxt};
	bpf_map_update_elem(&held, &skv, &nh, BPF_ANY);
	struct et_tcp e = {};
	tcp_record(&e, ET_TCP_HELD, sk);
	e.since_ns = nh.since_ns;
	emit(&e, sizeof(e), ET_TCP_HELD);
	return 0;
}

/* An incoming segment on a held socket (tcp_rcv_established, before the
 * ACK is processed): an ACK of everything that was in flight lets Nagle
 * send the held data now. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(et_tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	__u64 key = (__u64)sk;
	struct et_held *h = bpf_map_lookup_elem(&held, &key);
	if (!h)
		return 0;
	struct tcphdr *th = (void *)(skb->head + skb->transport_header);
	__u32 ack = bpf_ntohl(BPF_CORE_READ(th, ack_seq));
	if ((__s32)(ack - h->acked) >= 0)
		release(sk, h);
	return 0;
}

/* The delayed-ACK timer started on the peer of a target's socket. */
SEC("tp_btf/timer_start")
int BPF_PROG(et_timer_start, struct timer_list *timer)
{
	if (!delack_fn || (__u64)timer->function != delack_fn)
		return 0;
	struct sock *sk = (void *)timer -
			  bpf_core_field_offset(struct inet_connection_sock, icsk_delack_timer);
	struct et_flow_key k = {
		.saddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr),
		.daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr),
		.sport = BPF_CORE_READ(sk, __sk_common.skc_num),
		.dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport)),
	};
	__u64 *target_sk = bpf_map_lookup_elem(&peer_socks, &k);
	if (!target_sk)
		return 0;
	struct et_tcp e = {};
	tcp_record(&e, ET_TCP_DELACK, sk);
	e.sock = *target_sk;
	emit(&e, sizeof(e), ET_TCP_DELACK);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(et_exit, struct task_struct *p)
{
	if (!is_target(p->tgid))
		return 0;
	struct et_exit e = {};
	e.h.time_ns = bpf_ktime_get_ns();
	e.h.kind = ET_EXIT;
	e.h.cpu = bpf_get_smp_processor_id();
	fill_task(&e.task, p);
	e.leader = p->pid == p->tgid;
	emit(&e, sizeof(e), ET_EXIT);
	return 0;
}
