/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_core.h — the kernel types trace.bpf.c reads beyond those of
 * crates/bpf's core.h (included first: the basic typedefs, map constants,
 * task_struct's pid/tgid/cpu), CO-RE style: only the fields read, with
 * preserve_access_index, relocated by libbpf against the running kernel's
 * BTF at load. Types core.h already declares are extended through CO-RE
 * "flavors" (a ___suffix that libbpf ignores when matching names), so the
 * shared header stays as it is.
 */
#ifndef ELFEN_TRACE_CORE_H
#define ELFEN_TRACE_CORE_H

#include "core.h"

/* (BPF_MAP_TYPE_LRU_HASH comes from core.h) */
enum {
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
};

/* task_struct's name, state and open files (Linux >= 5.14: __state;
 * before: state) */
struct files_struct;
struct task_struct___et {
	char comm[16];
	unsigned int __state;
	struct files_struct *files;
} __attribute__((preserve_access_index));

struct task_struct___et_old {
	long state;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct sock;
struct socket {
	struct sock *sk;
} __attribute__((preserve_access_index));

/* The address pair and ports of a socket (fields of anonymous unions and
 * structs in the kernel: libbpf matches them through the anonymous members). */
struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 write_seq;
	__u32 packets_out;
	__u8 nonagle : 4;
} __attribute__((preserve_access_index));

struct timer_list {
	void (*function)(struct timer_list *);
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct timer_list icsk_delack_timer;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned char *head;
	__u16 transport_header;
} __attribute__((preserve_access_index));

struct tcphdr {
	__be32 ack_seq;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long di; /* x86-64: a system call's first argument */
} __attribute__((preserve_access_index));

/* The context of a BPF perf_event program (UAPI; relocated against the
 * kernel's BTF, so the size of the registers before these fields is the
 * running architecture's). */
struct bpf_perf_event_data {
	__u64 sample_period;
	__u64 addr;
} __attribute__((preserve_access_index));

struct page;

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define S_IFMT 00170000
#define S_IFSOCK 0140000
/* include/net/tcp.h */
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2
/* x86-64 system call numbers of the sends */
#define NR_WRITE 1
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_SENDMSG 46
/* order of a PMD-sized (transparent huge) page with 4 KiB base pages */
#define HUGE_ORDER 9

#endif /* ELFEN_TRACE_CORE_H */
