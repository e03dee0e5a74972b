/*
 * longhaul-delayline: fixed one-way delay on an iptables NFQUEUE.
 *
 * The kernel here has no netem, so a router namespace sends the packets of one
 * direction to a queue and this program holds each for --delay-us, then accepts
 * them in FIFO order.  Only metadata crosses to userspace (40-byte copy range),
 * so the cost is per packet, not per byte; with NFQA_CFG_F_GSO the 64 KB GSO/GRO
 * aggregates of a veth path stay whole, which is what makes 1 Gb/s cheap.
 *
 * A packet's hold runs from the kernel's receive stamp of it (NFQA_TIMESTAMP,
 * which the kernel fills in while some socket asks for receive stamps: this
 * program holds one open), not from when this program read its message: the
 * hand-off to userspace (tens of microseconds on an idle box, more under load)
 * is then part of the delay instead of added to it.  A packet with no usable
 * stamp is held from its read, as before.
 *
 * Measured (tests/test_delayline.py, Debian 12 VM, 2 shared cores, 25 ms each way):
 * RTT 0.07-0.19 ms -> median ~50.5 ms (min 50.3); iperf3 CUBIC through a 1 Gbit
 * tbf + 50 ms: 749-913 Mb/s over 10 s, ~950 Mb/s after slow start; ~1.8k pkt/s,
 * 5-7 % of a core.  late_us_max 7-75 ms: VM vCPU stalls (a bare ppoll loop
 * oversleeps as much there), not queueing in this program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define COPY_RANGE 40             /* enough for the kernel to report NFQA_CAP_LEN */
#define RCVBUF_BYTES (64 << 20)
#define DEFAULT_MAXLEN (1u << 16)
#define MAX_MAXLEN (1u << 22)
#define MAX_DELAY_US 60000000ull  /* one minute: anything longer is a typo */
#define SLOT_BYTES 1024           /* one packet message is ~200 bytes */
#define SLOTS 64                  /* messages per recvmmsg() */
#define RECV_BUDGET 16            /* recvmmsg() calls before verdicts get a turn */
#define HANDOFF_MAX_NS 1000000000ll /* an older stamp is a clock step, not a hand-off */

struct held { uint32_t id; uint64_t due_ns; };

static struct {
	struct mnl_socket *nl;
	unsigned portid;
	uint32_t queue;
	uint64_t delay_ns;
	struct held *ring;
	uint32_t cap, head, count;      /* cap is a power of two */
	uint64_t now_ns;                /* arrival stamp for the batch being parsed */
	int64_t real_off_ns;            /* CLOCK_REALTIME - CLOCK_MONOTONIC at now_ns */
	uint64_t packets, bytes, max_held, enobufs, late_ns_max, nl_errors, forced;
	uint64_t stamped, handoff_ns_sum;
} st;

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* Stamps the batch about to be parsed: now, and the offset to read the kernel's
 * (wall-clock) receive stamps on the monotonic clock. */
static void stamp_batch(void)
{
	st.now_ns = mono_ns();
	st.real_off_ns = (int64_t)(clock_ns(CLOCK_REALTIME) - st.now_ns);
}

/* When the packet reached this host, on the monotonic clock: the kernel's
 * receive stamp (microseconds, rounded up so a hold is never short), or the
 * batch's read time when there is none or it is implausible. */
static uint64_t arrival_ns(const struct nlattr *stamp)
{
	if (!stamp || mnl_attr_get_payload_len(stamp) < sizeof(struct nfqnl_msg_packet_timestamp))
		return st.now_ns;
	const struct nfqnl_msg_packet_timestamp *ts = mnl_attr_get_payload(stamp);
	int64_t real = (int64_t)be64toh(ts->sec) * 1000000000ll + (int64_t)be64toh(ts->usec) * 1000ll + 999;
	int64_t mono = real - st.real_off_ns, handoff = (int64_t)st.now_ns - mono;
	if (handoff < 0 || handoff > HANDOFF_MAX_NS)
		return st.now_ns;
	st.stamped++;
	st.handoff_ns_sum += (uint64_t)handoff;
	return (uint64_t)mono;
}

#define usage(f) fputs("usage: longhaul-delayline --queue N --delay-us D " \
			    "[--maxlen PKTS] [--ready-file PATH]\n", f)

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int send_verdict_upto(uint32_t id)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_VERDICT_BATCH, st.queue);

	nfq_nlmsg_verdict_put(nlh, (int)id, NF_ACCEPT);
	if (mnl_socket_sendto(st.nl, nlh, nlh->nlmsg_len) < 0) {
		st.nl_errors++;
		return -1;
	}
	return 0;
}

/*
 * A batch verdict accepts every queued id <= the given one.  Due packets are
 * always a prefix of the ring, so one message covers them even when ids have
 * gaps: a gap is either an id the kernel already dropped (over maxlen) or one
 * whose message we lost to ENOBUFS.  The latter arrived before the packet that
 * releases it, so it leaves late, never early.
 */
static void release_due(uint64_t now)
{
	uint32_t n = 0, last = 0;

	while (n < st.count) {
		const struct held *h = &st.ring[(st.head + n) & (st.cap - 1)];
		if (h->due_ns > now)
			break;
		last = h->id;
		n++;
	}
	if (!n)
		return;
	uint64_t late = now - st.ring[st.head].due_ns; /* the oldest is the latest */
	if (late > st.late_ns_max)
		st.late_ns_max = late;
	send_verdict_upto(last);
	st.head = (st.head + n) & (st.cap - 1);
	st.count -= n;
}

static int on_message(const struct nlmsghdr *nlh, void *data)
{
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	const struct nfqnl_msg_packet_hdr *ph;
	uint32_t len = 0;
	(void)data;

	if (nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR]) {
		st.nl_errors++;
		return MNL_CB_OK;
	}
	ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	if (attr[NFQA_CAP_LEN])
		len = ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
	else if (attr[NFQA_PAYLOAD])
		len = mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]);

	if (st.count == st.cap) {
		/* Cannot happen while cap > kernel maxlen; if it does, free the
		 * oldest early rather than leave it stuck in the kernel. */
		st.forced++;
		send_verdict_upto(st.ring[st.head].id);
		st.head = (st.head + 1) & (st.cap - 1);
		st.count--;
	}
	struct held *h = &st.ring[(st.head + st.count) & (st.cap - 1)];
	h->id = ntohl(ph->packet_id);
	h->due_ns = arrival_ns(attr[NFQA_TIMESTAMP]) + st.delay_ns;
	st.count++;
	if (st.count > st.max_held)
		st.max_held = st.count;
	st.packets++;
	st.bytes += len;
	return MNL_CB_OK;
}

/* Drains the socket without blocking.  Returns -1 on a fatal socket error. */
static int drain(void)
{
	static char bufs[SLOTS][SLOT_BYTES];
	struct mmsghdr msgs[SLOTS];
	struct iovec iov[SLOTS];

	for (int round = 0; round < RECV_BUDGET; round++) {
		for (int i = 0; i < SLOTS; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = SLOT_BYTES;
			memset(&msgs[i], 0, sizeof(msgs[i]));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		int got = recvmmsg(mnl_socket_get_fd(st.nl), msgs, SLOTS, MSG_DONTWAIT, NULL);
		if (got < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == ENOBUFS) { /* messages lost; their packets go out late */
				st.enobufs++;
				continue;
			}
			if (errno == EINTR)
				return 0;
			perror("longhaul-delayline: recvmmsg");
			return -1;
		}
		stamp_batch();
		for (int i = 0; i < got; i++) {
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				st.nl_errors++;
				continue;
			}
			if (mnl_cb_run(bufs[i], msgs[i].msg_len, 0, st.portid, on_message, NULL) < 0)
				st.nl_errors++; /* e.g. an error reply to a verdict */
		}
		if (got < SLOTS)
			return 0;
	}
	return 0;
}

/* Sends one config message and waits for its ACK, queueing any packets that
 * race ahead of it. */
static int config(struct nlmsghdr *nlh, const char *what)
{
	static char buf[SLOT_BYTES * 8];
	unsigned seq = (unsigned)time(NULL);

	nlh->nlmsg_flags |= NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	if (mnl_socket_sendto(st.nl, nlh, nlh->nlmsg_len) < 0) {
		fprintf(stderr, "longhaul-delayline: %s: %s\n", what, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t n = mnl_socket_recvfrom(st.nl, buf, sizeof(buf));
		if (n < 0) {
			if (errno == ENOBUFS) { st.enobufs++; continue; }
			if (errno == EINTR) continue;
			break;
		}
		stamp_batch();
		int ret = mnl_cb_run(buf, (size_t)n, seq, st.portid, on_message, NULL);
		if (ret == MNL_CB_STOP)
			return 0;
		if (ret < 0)
			break;
	}
	fprintf(stderr, "longhaul-delayline: %s: %s\n", what, strerror(errno));
	return -1;
}

static int bind_queue(uint32_t maxlen)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh;

	/* Bind, copy mode and maxlen go in one message so no packet is ever
	 * queued under the default (full-payload) copy mode. */
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, st.queue);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, COPY_RANGE);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, maxlen);
	if (config(nlh, "bind queue") < 0)
		return -1;

	/* No FAIL_OPEN: a silently bypassed delay would look like a good run. */
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, st.queue);
	mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_GSO));
	mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO));
	return config(nlh, "set GSO flag");
}

static void unbind_queue(void)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, st.queue);

	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_UNBIND);
	mnl_socket_sendto(st.nl, nlh, nlh->nlmsg_len);
}

static int write_ready(const char *path)
{
	char tmp[PATH_MAX];
	FILE *f;

	/* Write-then-rename so a poller never reads an empty file. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -1;
	f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%ld\n", (long)getpid());
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "queue", required_argument, NULL, 'q' },
		{ "delay-us", required_argument, NULL, 'd' },
		{ "maxlen", required_argument, NULL, 'm' },
		{ "ready-file", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t queue = UINT64_MAX, delay_us = UINT64_MAX, maxlen = DEFAULT_MAXLEN, *dst;
	uint64_t hi;
	const char *ready = NULL;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		} else if (c == 'r' && *optarg) {
			ready = optarg;
			continue;
		} else if (c == 'q' || c == 'd' || c == 'm') {
			dst = c == 'q' ? &queue : c == 'd' ? &delay_us : &maxlen;
			hi = c == 'q' ? 65535 : c == 'd' ? MAX_DELAY_US : MAX_MAXLEN;
			if (parse_u64(optarg, c == 'm', hi, dst) == 0)
				continue;
			fprintf(stderr, "longhaul-delayline: bad value '%s' (%s..%" PRIu64 ")\n",
				optarg, c == 'm' ? "1" : "0", hi);
			return 2;
		}
		usage(stderr);
		return 2;
	}
	if (optind != argc || queue == UINT64_MAX || delay_us == UINT64_MAX) {
		fprintf(stderr, "longhaul-delayline: --queue and --delay-us are required, "
			"no positional arguments\n");
		usage(stderr);
		return 2;
	}
	st.queue = (uint32_t)queue;
	st.delay_ns = delay_us * 1000ull;

	/* Ring strictly larger than the kernel queue, so it never overflows. */
	st.cap = 2;
	while (st.cap <= maxlen)
		st.cap <<= 1;
	st.ring = calloc(st.cap, sizeof(*st.ring));
	if (!st.ring) {
		perror("longhaul-delayline: ring");
		return 1;
	}

	/* Signals stay blocked except inside ppoll(), so a SIGTERM can never slip
	 * in between the stop_flag check and going to sleep. */
	sigset_t block, waitmask;
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&block);
	for (int i = 0; i < 2; i++) {
		sigaction(i ? SIGINT : SIGTERM, &sa, NULL);
		sigaddset(&block, i ? SIGINT : SIGTERM);
	}
	sigprocmask(SIG_BLOCK, &block, &waitmask);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);

	/* Default 50 us timer slack would show up directly as lateness. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

	st.nl = mnl_socket_open(NETLINK_NETFILTER);
	if (!st.nl || mnl_socket_bind(st.nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		perror("longhaul-delayline: netlink socket");
		return 1;
	}
	st.portid = mnl_socket_get_portid(st.nl);
	int fd = mnl_socket_get_fd(st.nl), sz = RCVBUF_BYTES;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz)) < 0)
		perror("longhaul-delayline: receive buffer (continuing)");

	/* Any socket that asks for receive stamps makes the kernel stamp every
	 * packet it receives (a host-wide switch, counted per socket), so the
	 * queue's messages carry NFQA_TIMESTAMP; the socket is never used. */
	int on = 1, stamper = socket(AF_INET, SOCK_DGRAM, 0);
	if (stamper < 0 || setsockopt(stamper, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0)
		perror("longhaul-delayline: receive stamps (holding from each read instead)");

	if (bind_queue((uint32_t)maxlen) < 0) {
		mnl_socket_close(st.nl);
		return 1;
	}
	if (ready && write_ready(ready) < 0) {
		fprintf(stderr, "longhaul-delayline: ready file %s: %s\n", ready, strerror(errno));
		unbind_queue();
		mnl_socket_close(st.nl);
		return 1;
	}

	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	while (!stop_flag) {
		struct timespec ts, *tsp = NULL;
		if (st.count) {
			uint64_t now = mono_ns(), due = st.ring[st.head].due_ns;
			uint64_t wait = due > now ? due - now : 0;
			ts.tv_sec = (time_t)(wait / 1000000000ull);
			ts.tv_nsec = (long)(wait % 1000000000ull);
			tsp = &ts;
		}
		int n = ppoll(&pfd, 1, tsp, &waitmask);
		if (n < 0 && errno != EINTR) {
			perror("longhaul-delayline: ppoll");
			rc = 1;
			break;
		}
		if (n > 0 && drain() < 0) {
			rc = 1;
			break;
		}
		release_due(mono_ns());
	}

	/* Accept (not drop) what is still held: stopping the emulator should not
	 * inject a loss burst into whatever is still running through the router,
	 * and the kernel would drop them on unbind otherwise. */
	if (st.count)
		send_verdict_upto(st.ring[(st.head + st.count - 1) & (st.cap - 1)].id);
	unbind_queue();
	mnl_socket_close(st.nl);
	if (stamper >= 0)
		close(stamper);
	if (ready)
		unlink(ready); /* a stale ready file would fool the next poller */

	printf("{\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"max_held\":%" PRIu64
	       ",\"enobufs\":%" PRIu64 ",\"late_us_max\":%" PRIu64 ",\"nl_errors\":%" PRIu64
	       ",\"forced\":%" PRIu64 ",\"queue\":%u,\"delay_us\":%" PRIu64
	       ",\"stamped\":%" PRIu64 ",\"handoff_us_mean\":%.1f}\n",
	       st.packets, st.bytes, st.max_held, st.enobufs, st.late_ns_max / 1000,
	       st.nl_errors, st.forced, st.queue, delay_us,
	       st.stamped, st.stamped ? st.handoff_ns_sum / 1e3 / st.stamped : 0.0);
	fflush(stdout);
	free(st.ring);
	return rc;
}
