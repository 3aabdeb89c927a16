// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * egress.bpf.c — batch traffic at low priority.
 *
 * A cgroup-skb program on the egress hook of a batch group's cgroup2
 * directory. Every packet a socket of the group sends passes it before the
 * device's queueing discipline sees the packet; it sets skb->priority (and,
 * if asked, the firewall mark) and lets the packet go. A priority qdisc
 * then queues batch packets behind the LC's: pfifo_fast and a default
 * `prio` qdisc map priority 1 (TC_PRIO_FILLER) to their last band, 0 (the
 * LC's, untouched) to the middle one; htb/hfsc classes can select on the
 * mark with an `fw` filter. Nothing is dropped: the program always
 * returns 1 (pass).
 *
 * The values are set by the loader before the program is loaded (.rodata).
 */
#include "egress.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* skb->priority of the group's packets (TC_PRIO_FILLER by default). */
const volatile __u32 egress_priority = 1;
/* The firewall mark to set; 0 leaves the mark alone. */
const volatile __u32 egress_mark = 0;

/* Packets marked so far, all groups (read by the loader). */
__u64 packets = 0;

SEC("cgroup_skb/egress")
int elfen_egress(struct __sk_buff *skb)
{
	skb->priority = egress_priority;
	if (egress_mark)
		skb->mark = egress_mark;
	__sync_fetch_and_add(&packets, 1);
	return 1;
}
