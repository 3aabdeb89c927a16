/* SPDX-License-Identifier: Apache-2.0 */
/*
 * egress.h — what egress.bpf.c needs of <linux/bpf.h>, in place of the
 * UAPI header (which pulls in the host's asm/ headers, absent for
 * -target bpf).
 *
 * struct __sk_buff is the program's context: a UAPI layout the verifier
 * rewrites to the kernel's sk_buff, fixed since its fields were added, so
 * the prefix up to `priority` is declared exactly as <linux/bpf.h> has it
 * (offsets 0, 4, 8, … 32). Only `mark` and `priority` are written.
 */
#ifndef ELFEN_EGRESS_H
#define ELFEN_EGRESS_H
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

struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
};

#endif
