// SPDX-License-Identifier: GPL-2.0
/* H-TCP (Leith and Shorten, "H-TCP: TCP for high-speed and long-distance networks", PFLDnet 2004)
 * as net/ipv4/tcp_htcp.c defines it, with its defaults (RTT scaling and the bandwidth switch on):
 *
 * - increase: alpha = 2 (1 - beta) f(D) segments per RTT, D the time since the last congestion
 *   event: f = 1 for D <= 1 s, else 1 + 10 (D - 1) + ((D - 1) / 2)^2, scaled by the RTT against
 *   100 ms (the ratio clamped to 0.5..10);
 * - decrease: cwnd x beta, beta = minRTT / maxRTT clamped to 0.5..0.8, and 0.5 after a change of
 *   more than 20 % in the achieved throughput between congestion events (the bandwidth switch).
 *
 * Fixed point as the kernel's: alpha and beta << 7. Time in milliseconds where the module counts
 * jiffies (so HZ is 1000 in its formulas), and f(D) in 64 bits where the module's 32 overflow after
 * 524 s without a loss at HZ 250. */
#include "lh_tcp.h"

char _license[] SEC("license") = "GPL";

#define HZ_MS 1000U
#define ALPHA_BASE (1U << 7)   /* 1.0 */
#define BETA_MIN (1U << 6)     /* 0.5 */
#define BETA_MAX 102U          /* 0.8 */

struct lh_htcp {
	__u32 alpha;
	__u8 beta;
	__u8 modeswitch;       /* no RTT-based beta before a first congestion event */
	__u16 pkts_acked;
	__u32 packetcount;
	__u32 min_rtt;         /* ms; 0: none seen */
	__u32 max_rtt;
	__u32 last_cong;       /* ms: the end of the last congestion event */
	__u32 undo_last_cong;
	__u32 undo_max_rtt;
	__u32 undo_old_maxb;
	__u32 minb;            /* achieved throughput, segments a second */
	__u32 maxb;
	__u32 old_maxb;
	__u32 bi;
	__u32 lasttime;
};

static __always_inline struct lh_htcp *ca_of(const struct sock *sk)
{
	return lh_priv(sk);
}

static __always_inline __u32 cong_time(const struct lh_htcp *ca)
{
	return lh_now_ms() - ca->last_cong;
}

static __always_inline void alpha_update(struct lh_htcp *ca)
{
	__u64 factor = 1;
	__u64 diff = cong_time(ca);

	if (diff > HZ_MS) {
		diff -= HZ_MS;
		factor = 1 + (10 * diff + ((diff / 2) * (diff / 2) / HZ_MS)) / HZ_MS;
	}
	if (ca->min_rtt) {
		__u32 scale = (HZ_MS << 3) / (10 * ca->min_rtt);

		if (scale < (1U << 2))
			scale = 1U << 2;
		if (scale > (10U << 3))
			scale = 10U << 3;
		factor = (factor << 3) / scale;
		if (!factor)
			factor = 1;
	}
	factor = 2 * factor * ((1U << 7) - ca->beta);
	ca->alpha = factor > 0xffffffffULL ? 0xffffffffU : (__u32)factor;
	if (!ca->alpha)
		ca->alpha = ALPHA_BASE;
}

static __always_inline void beta_update(struct lh_htcp *ca)
{
	__u32 maxb = ca->maxb, old_maxb = ca->old_maxb;

	ca->old_maxb = ca->maxb;
	/* the throughput moved by more than a fifth since the last event: back off by half */
	if (5 * maxb < 4 * old_maxb || 5 * maxb > 6 * old_maxb) {
		ca->beta = BETA_MIN;
		ca->modeswitch = 0;
		return;
	}
	if (ca->modeswitch && ca->min_rtt > 10 && ca->max_rtt) {
		__u32 beta = (ca->min_rtt << 7) / ca->max_rtt;

		ca->beta = beta < BETA_MIN ? BETA_MIN : beta > BETA_MAX ? BETA_MAX : beta;
	} else {
		ca->beta = BETA_MIN;
		ca->modeswitch = 1;
	}
}

static __always_inline void measure_rtt(struct sock *sk, struct lh_htcp *ca, __u32 srtt)
{
	if (ca->min_rtt > srtt || !ca->min_rtt)
		ca->min_rtt = srtt;
	if (lh_ca_state(sk) == LH_TCP_CA_OPEN) {
		if (ca->max_rtt < ca->min_rtt)
			ca->max_rtt = ca->min_rtt;
		if (ca->max_rtt < srtt && srtt <= ca->max_rtt + 20)
			ca->max_rtt = srtt;
	}
}

static __always_inline void reset(struct lh_htcp *ca)
{
	ca->undo_last_cong = ca->last_cong;
	ca->undo_max_rtt = ca->max_rtt;
	ca->undo_old_maxb = ca->old_maxb;
	ca->last_cong = lh_now_ms();
}

SEC("struct_ops")
void BPF_PROG(lh_htcp_init, struct sock *sk)
{
	struct lh_htcp *ca = ca_of(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->alpha = ALPHA_BASE;
	ca->beta = BETA_MIN;
	ca->pkts_acked = 1;
	ca->last_cong = lh_now_ms();
}

SEC("struct_ops")
void BPF_PROG(lh_htcp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	const struct tcp_sock *tp = lh_tcp(sk);
	struct lh_htcp *ca = ca_of(sk);
	__u8 state = lh_ca_state(sk);
	__u32 now = lh_now_ms();

	if (state == LH_TCP_CA_OPEN)
		ca->pkts_acked = sample->pkts_acked;
	if (sample->rtt_us > 0)
		measure_rtt(sk, ca, ((__u32)sample->rtt_us + 999) / 1000);
	if (state != LH_TCP_CA_OPEN && state != LH_TCP_CA_DISORDER) {
		ca->packetcount = 0;
		ca->lasttime = now;
		return;
	}
	ca->packetcount += sample->pkts_acked;
	if (ca->packetcount >= tp->snd_cwnd - ((ca->alpha >> 7) ? (ca->alpha >> 7) : 1) &&
	    now - ca->lasttime >= ca->min_rtt && ca->min_rtt > 0) {
		__u32 cur = ca->packetcount * HZ_MS / (now - ca->lasttime);

		if (cong_time(ca) / ca->min_rtt <= 3) {   /* just after a back-off */
			ca->minb = ca->maxb = ca->bi = cur;
		} else {
			ca->bi = (3 * ca->bi + cur) / 4;
			if (ca->bi > ca->maxb)
				ca->maxb = ca->bi;
			if (ca->minb > ca->maxb)
				ca->minb = ca->maxb;
		}
		ca->packetcount = 0;
		ca->lasttime = now;
	}
}

SEC("struct_ops")
__u32 BPF_PROG(lh_htcp_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = lh_tcp(sk);
	struct lh_htcp *ca = ca_of(sk);
	__u32 min_rtt = ca->min_rtt, max_rtt = ca->max_rtt, kept;

	beta_update(ca);
	alpha_update(ca);
	/* a slowly fading memory of the largest RTT, for a path that changed */
	if (min_rtt > 0 && max_rtt > min_rtt)
		ca->max_rtt = min_rtt + ((max_rtt - min_rtt) * 95) / 100;
	kept = (tp->snd_cwnd * ca->beta) >> 7;
	return kept > 2 ? kept : 2;
}

SEC("struct_ops")
void BPF_PROG(lh_htcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = lh_tcp(sk);
	struct lh_htcp *ca = ca_of(sk);

	if (!lh_cwnd_limited(sk))
		return;
	if (lh_in_slow_start(tp)) {
		tcp_slow_start(tp, acked);
		return;
	}
	/* cwnd += alpha / cwnd per ACK, counted in snd_cwnd_cnt */
	if ((tp->snd_cwnd_cnt * ca->alpha) >> 7 >= tp->snd_cwnd) {
		if (tp->snd_cwnd < tp->snd_cwnd_clamp)
			tp->snd_cwnd = tp->snd_cwnd + 1;
		tp->snd_cwnd_cnt = 0;
		alpha_update(ca);
	} else {
		tp->snd_cwnd_cnt += ca->pkts_acked;
	}
	ca->pkts_acked = 1;
}

SEC("struct_ops")
void BPF_PROG(lh_htcp_set_state, struct sock *sk, __u8 new_state)
{
	struct lh_htcp *ca = ca_of(sk);

	if (new_state == LH_TCP_CA_OPEN) {
		if (ca->undo_last_cong) {
			ca->last_cong = lh_now_ms();
			ca->undo_last_cong = 0;
		}
	} else if (new_state == LH_TCP_CA_CWR || new_state == LH_TCP_CA_RECOVERY || new_state == LH_TCP_CA_LOSS) {
		reset(ca);
	}
}

SEC("struct_ops")
__u32 BPF_PROG(lh_htcp_undo_cwnd, struct sock *sk)
{
	struct lh_htcp *ca = ca_of(sk);

	if (ca->undo_last_cong) {
		ca->last_cong = ca->undo_last_cong;
		ca->max_rtt = ca->undo_max_rtt;
		ca->old_maxb = ca->undo_old_maxb;
		ca->undo_last_cong = 0;
	}
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops lh_htcp = {
	.init = (void *)lh_htcp_init,
	.ssthresh = (void *)lh_htcp_ssthresh,
	.cong_avoid = (void *)lh_htcp_cong_avoid,
	.set_state = (void *)lh_htcp_set_state,
	.undo_cwnd = (void *)lh_htcp_undo_cwnd,
	.pkts_acked = (void *)lh_htcp_pkts_acked,
	.name = "lh_htcp",
};
