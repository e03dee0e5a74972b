/* SPDX-License-Identifier: GPL-2.0 */
/* What longhaul's BPF congestion controls share: the kernel's exported TCP helpers (kfuncs) and
 * the small inline helpers of include/net/tcp.h, which BPF cannot call, restated. */
#ifndef LH_TCP_H
#define LH_TCP_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* exported to struct_ops congestion controls by net/ipv4/bpf_tcp_ca.c */
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

#define LH_TCP_CA_OPEN 0
#define LH_TCP_CA_DISORDER 1
#define LH_TCP_CA_CWR 2
#define LH_TCP_CA_RECOVERY 3
#define LH_TCP_CA_LOSS 4

static __always_inline struct tcp_sock *lh_tcp(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *lh_icsk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void *lh_priv(const struct sock *sk)
{
	return (void *)lh_icsk(sk)->icsk_ca_priv;
}

static __always_inline __u8 lh_ca_state(const struct sock *sk)
{
	return BPF_CORE_READ_BITFIELD(lh_icsk(sk), icsk_ca_state);
}

static __always_inline bool lh_in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

/* tcp_is_cwnd_limited(): growth only while the window, not the application, limits sending */
static __always_inline bool lh_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = lh_tcp(sk);

	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return true;
	if (lh_in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return false;
}

/* Reno's part of an ACK for an algorithm that changes only congestion avoidance: nothing while the
 * application, not the window, limits sending; slow start while below ssthresh. What is left of
 * `acked` for congestion avoidance (0: nothing). */
static __always_inline __u32 lh_slow_start_first(struct sock *sk, __u32 acked)
{
	struct tcp_sock *tp = lh_tcp(sk);

	if (!lh_cwnd_limited(sk))
		return 0;
	if (lh_in_slow_start(tp))
		return tcp_slow_start(tp, acked);
	return acked;
}

/* the monotonic clock in milliseconds: H-TCP's time base, where the kernel's module counts
 * jiffies (HZ = 250 on Debian's kernels: 4 ms steps) */
static __always_inline __u32 lh_now_ms(void)
{
	return (__u32)(bpf_ktime_get_ns() / 1000000);
}

#endif
