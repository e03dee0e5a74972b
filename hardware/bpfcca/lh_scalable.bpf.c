// SPDX-License-Identifier: GPL-2.0
/* Scalable TCP (Kelly, 2003) as net/ipv4/tcp_scalable.c defines it: in congestion avoidance the
 * window grows by 0.01 segment per ACK once it holds 100 segments or more (below that, Reno's one
 * per window), and a loss takes an eighth of it away. Slow start is Reno's. */
#include "lh_tcp.h"

char _license[] SEC("license") = "GPL";

#define AI_CNT 100U   /* a segment per 100 ACKs: a = 0.01 */
#define MD_SHIFT 3    /* b = 1/8 */

SEC("struct_ops")
void BPF_PROG(lh_scalable_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = lh_tcp(sk);

	acked = lh_slow_start_first(sk, acked);
	if (acked)
		tcp_cong_avoid_ai(tp, tp->snd_cwnd < AI_CNT ? tp->snd_cwnd : AI_CNT, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(lh_scalable_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = lh_tcp(sk);
	__u32 kept = tp->snd_cwnd - (tp->snd_cwnd >> MD_SHIFT);

	return kept > 2 ? kept : 2;
}

SEC("struct_ops")
__u32 BPF_PROG(lh_scalable_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops lh_scalable = {
	.cong_avoid = (void *)lh_scalable_cong_avoid,
	.ssthresh = (void *)lh_scalable_ssthresh,
	.undo_cwnd = (void *)lh_scalable_undo_cwnd,
	.name = "lh_scalable",
};
