/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * scx.h — what lanes.bpf.c needs of sched_ext beyond the kernel's types:
 * the struct_ops program macro and the declarations of the sched_ext kfuncs
 * it calls, written for this scheduler after the kernel's
 * tools/sched_ext/include/scx/common.bpf.h and sched-ext/scx's compat
 * headers (their prototypes as the 7.3 kernel's BTF has them).
 *
 * Kernel types and the SCX_* enum constants come from vmlinux.h (generated
 * from the 7.3 kernel's BTF by scripts/scx-vmlinux.sh); libbpf relocates
 * field offsets (CO-RE) and resolves the kfuncs (__ksym) against the
 * running kernel's BTF at load.
 */
#ifndef ELFEN_SCX_H
#define ELFEN_SCX_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* a sched_ext_ops callback: a struct_ops program with typed arguments */
#define BPF_STRUCT_OPS(name, args...) SEC("struct_ops/" #name) BPF_PROG(name, ##args)
/* one that may sleep (ops.init: scx_bpf_create_dsq allocates) */
#define BPF_STRUCT_OPS_SLEEPABLE(name, args...) SEC("struct_ops.s/" #name) BPF_PROG(name, ##args)

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

/* v6.12: a user DSQ; -1 node: any (sleepable: from ops.init) */
s32 scx_bpf_create_dsq(u64 dsq_id, s32 node) __ksym;
/* v6.12: the default idle-CPU choice at wake-up; *is_idle: the CPU was idle and is now claimed */
s32 scx_bpf_select_cpu_dfl(struct task_struct *p, s32 prev_cpu, u64 wake_flags,
			   bool *is_idle) __ksym;
/* v6.13 (was scx_bpf_dispatch): queue p on a DSQ with a slice */
void scx_bpf_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym;
/* v6.13 (was scx_bpf_consume): move the first task of a DSQ to this CPU's local DSQ */
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym;
/* v6.12: make a CPU reschedule (SCX_KICK_PREEMPT: end its ext task's slice) */
void scx_bpf_kick_cpu(s32 cpu, u64 flags) __ksym;
/* v6.12: tasks queued on a DSQ (SCX_DSQ_LOCAL: this CPU's) */
s32 scx_bpf_dsq_nr_queued(u64 dsq_id) __ksym;
/* v6.12: claim a CPU if idle */
bool scx_bpf_test_and_clear_cpu_idle(s32 cpu) __ksym;
/* v6.12: the CPU whose run queue holds p */
s32 scx_bpf_task_cpu(const struct task_struct *p) __ksym;
/* v6.19: re-enqueue this CPU's local DSQ through ops.enqueue, from any
 * program (deferred); the kernel's name is scx_bpf_reenqueue_local___v2,
 * and libbpf drops the last ___ suffix when it resolves the name. Weak: on
 * an older kernel the scheduler loads without it. */
void scx_bpf_reenqueue_local___v2___compat(void) __ksym __weak;

/* cpumask kfunc (v6.3) */
bool bpf_cpumask_test_cpu(u32 cpu, const struct cpumask *cpumask) __ksym;

#endif /* ELFEN_SCX_H */
