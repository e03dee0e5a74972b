// SPDX-License-Identifier: GPL-2.0
/* Seed 002's fractional stream (Hacker et al., "combined parallel TCP", section IV): Reno whose
 * congestion-avoidance increase is 1/FACTOR of a normal stream's, one segment per FACTOR windows
 * of ACKs (a virtual RTT FACTOR times the real one); slow start and the halving on loss are
 * Reno's, unchanged. Built once per factor (the Makefile's FACTORS), named lh_frac<FACTOR>. */
#include "lh_tcp.h"

char _license[] SEC("license") = "GPL";

#ifndef FACTOR
#define FACTOR 10
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
/* the struct_ops map takes the variable's name: the algorithm's, so it is unregistered by name */
#define OPS CAT(lh_frac, FACTOR)

SEC("struct_ops")
void BPF_PROG(lh_frac_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = lh_tcp(sk);

	acked = lh_slow_start_first(sk, acked);
	if (acked)
		tcp_cong_avoid_ai(tp, FACTOR * tp->snd_cwnd, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(lh_frac_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(lh_frac_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops OPS = {
	.cong_avoid = (void *)lh_frac_cong_avoid,
	.ssthresh = (void *)lh_frac_ssthresh,
	.undo_cwnd = (void *)lh_frac_undo_cwnd,
	.name = "lh_frac" STR(FACTOR),
};
