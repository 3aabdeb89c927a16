/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.h — the few kernel types and UAPI constants sched.bpf.c uses, in
 * place of a generated vmlinux.h (~3 MB, tied to one kernel build).
 *
 * The struct definitions list only the fields the program reads and carry
 * __attribute__((preserve_access_index)): clang records each access as a
 * CO-RE relocation, and libbpf rewrites the offsets at load time against
 * the running kernel's BTF (/sys/kernel/btf/vmlinux). Field order and the
 * missing fields therefore do not matter; names and types must match the
 * kernel's. The constants are stable UAPI values from <linux/bpf.h>.
 *
 * Defining __VMLINUX_H__ tells libbpf's headers (and elfen_bpf.h) that the
 * kernel types come from here.
 */
#ifndef ELFEN_CORE_H
#define ELFEN_CORE_H
#define __VMLINUX_H__ 1

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

/* <linux/bpf.h>: map types, map flags, ring buffer flags */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_MMAPABLE = (1U << 10),
};
enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};
enum {
	BPF_ANY = 0,
};

/* kernel types, CO-RE: only the fields read */
struct kernfs_node {
	__u64 id; /* u64 since Linux 5.5 (was a union before) */
} __attribute__((preserve_access_index));

struct cgroup;

/* A cgroup's own state (cgroup->self): its parent's, and its cgroup. */
struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent; /* NULL at the root */
} __attribute__((preserve_access_index));

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp; /* the task's cgroup on the v2 (default) hierarchy */
} __attribute__((preserve_access_index));

struct thread_info {
	__u32 cpu; /* the CPU the task is on or queued for (x86: since Linux 5.16) */
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	int pid;  /* thread id */
	int tgid; /* process id */
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

#endif /* ELFEN_CORE_H */
