/* The receiver. Each datagram's kernel arrival time (SO_TIMESTAMPNS, so a receiver stall does not
 * move it) is put on the sender's time axis by the smallest (arrival - send timestamp) seen, i.e.
 * seconds are the sender's schedule seconds shifted by the path's base delay; queueing still moves
 * bytes into later seconds, as a real receiver sees them. One JSON line per second once that second
 * is over (plus --grace), a summary with every bin at the end marker, SIGTERM/SIGINT or idle. */
#define _GNU_SOURCE
#include "pacedudp.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define BUFLEN 65536

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

struct state {
    uint32_t session;
    int have_session, have_end;
    int64_t offset, last_arrival_mono; /* offset: min(arrival_rt - send_ns) */
    uint64_t last_axis; /* the latest arrival on the sender's axis, ns */
    uint64_t received, bytes, seen_hi, reordered, late, emitted, nbins;
    uint64_t *arr_bytes, *arr_dgrams, *send_bytes;
    uint64_t end_dgrams, end_bytes, end_sched_ns, end_skipped;
};

static void grow(struct state *st, uint64_t bin)
{
    if (bin < st->nbins)
        return;
    uint64_t n = bin + 16;
    uint64_t **arrays[] = {&st->arr_bytes, &st->arr_dgrams, &st->send_bytes};
    for (int i = 0; i < 3; i++) {
        *arrays[i] = realloc(*arrays[i], n * sizeof(uint64_t));
        memset(*arrays[i] + st->nbins, 0, (n - st->nbins) * sizeof(uint64_t));
    }
    st->nbins = n;
}

static uint64_t lost_now(const struct state *st)
{
    uint64_t expected = st->have_end ? st->end_dgrams : st->seen_hi;
    return expected > st->received ? expected - st->received : 0;
}

static void emit(struct state *st, uint64_t i)
{
    double secs = 1.0;
    if (st->have_end && st->end_sched_ns < (i + 1) * 1000000000ULL && st->end_sched_ns > i * 1000000000ULL)
        secs = (st->end_sched_ns - i * 1000000000ULL) / 1e9; /* the schedule ends within this second */
    else if (st->have_end && i * 1000000000ULL >= st->end_sched_ns && st->last_axis < (i + 1) * 1000000000ULL)
        secs = fmax(1e-6, (st->last_axis - i * 1000000000ULL) / 1e9); /* stragglers past the end */
    grow(st, i);
    printf("{\"t_s\":%.6f,\"start_s\":%llu,\"seconds\":%.6f,\"bytes\":%llu,\"datagrams\":%llu,\"lost\":%llu}\n",
           i + secs, (unsigned long long)i, secs, (unsigned long long)st->arr_bytes[i],
           (unsigned long long)st->arr_dgrams[i], (unsigned long long)lost_now(st));
    fflush(stdout);
}

static void on_datagram(struct state *st, const unsigned char *buf, long len, int64_t arrival_rt)
{
    struct pu_hdr h;
    if (pu_get_hdr(buf, len, &h))
        return;
    if (!st->have_session)
        st->session = h.session, st->have_session = 1;
    if (h.session != st->session) /* a stale sender from an earlier burst on this port */
        return;
    st->last_arrival_mono = pu_now_ns(CLOCK_MONOTONIC);
    if (h.type == PU_END) {
        if (len >= PU_END_LEN && !st->have_end) {
            st->have_end = 1;
            st->end_dgrams = h.seq;
            st->end_bytes = pu_get_u64(buf + PU_HDR);
            st->end_sched_ns = pu_get_u64(buf + PU_HDR + 8);
            st->end_skipped = pu_get_u64(buf + PU_HDR + 16);
        }
        return;
    }
    int64_t delay = arrival_rt - (int64_t)h.send_ns;
    if (st->received == 0 || delay < st->offset)
        st->offset = delay;
    uint64_t t = (uint64_t)(arrival_rt - st->offset);
    if (t > st->last_axis)
        st->last_axis = t;
    uint64_t bin = t / 1000000000ULL, sbin = h.send_ns / 1000000000ULL;
    if (bin > PU_MAX_SECONDS || sbin > PU_MAX_SECONDS)
        return;
    grow(st, bin > sbin ? bin : sbin);
    if (bin < st->emitted)
        st->late++; /* still counted in the summary's bins */
    st->arr_bytes[bin] += len, st->arr_dgrams[bin]++, st->send_bytes[sbin] += len;
    st->received++, st->bytes += len;
    if (h.seq + 1 > st->seen_hi)
        st->seen_hi = h.seq + 1;
    else
        st->reordered++;
}

static int open_socket(const char *bind_addr, const char *port, uint64_t rcvbuf, int *actual)
{
    int fd = -1;
    if (bind_addr) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICHOST}, *res;
        int rc = getaddrinfo(bind_addr, port, &hints, &res);
        if (rc) {
            fprintf(stderr, "longhaul-pacedudp: bad bind address %s: %s\n", bind_addr, gai_strerror(rc));
            return -1;
        }
        fd = socket(res->ai_family, SOCK_DGRAM, 0);
        if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen))
            close(fd), fd = -1;
        freeaddrinfo(res);
    } else { /* dual-stack wildcard, or IPv4 where IPv6 is off */
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(port)),
                                  .sin6_addr = IN6ADDR_ANY_INIT};
        int off = 0;
        fd = socket(AF_INET6, SOCK_DGRAM, 0);
        if (fd >= 0 && (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) ||
                        bind(fd, (struct sockaddr *)&a6, sizeof a6))) {
            if (errno == EADDRINUSE)
                goto fail;
            close(fd), fd = -1;
        }
        if (fd < 0) {
            struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
            fd = socket(AF_INET, SOCK_DGRAM, 0);
            if (fd >= 0 && bind(fd, (struct sockaddr *)&a4, sizeof a4))
                goto fail;
        }
    }
    if (fd < 0) {
        perror("longhaul-pacedudp: bind");
        return -1;
    }
    /* a large buffer rides out receiver stalls at Gb/s; FORCE passes net.core.rmem_max as root */
    int buf = (int)rcvbuf, on = 1;
    socklen_t sl = sizeof *actual;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf))
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, actual, &sl);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
fail:
    perror("longhaul-pacedudp: bind");
    close(fd);
    return -1;
}

/* read everything queued; returns -1 on a socket error */
static int drain(int fd, struct state *st, unsigned char *bufs, char (*ctl)[64])
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (;;) {
        for (int j = 0; j < BATCH; j++) {
            iov[j] = (struct iovec){bufs + (size_t)j * BUFLEN, BUFLEN};
            msgs[j].msg_hdr = (struct msghdr){.msg_iov = &iov[j], .msg_iovlen = 1,
                                              .msg_control = ctl[j], .msg_controllen = 64};
        }
        int r = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        int64_t fallback = pu_now_ns(CLOCK_REALTIME);
        for (int j = 0; j < r; j++) {
            int64_t at = fallback;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[j].msg_hdr); c; c = CMSG_NXTHDR(&msgs[j].msg_hdr, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    at = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                }
            on_datagram(st, iov[j].iov_base, msgs[j].msg_len, at);
        }
        if (r < BATCH)
            return 0;
    }
}

static void print_array(const char *name, const uint64_t *a, uint64_t n)
{
    printf(",\"%s\":[", name);
    for (uint64_t i = 0; i < n; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)a[i]);
    printf("]");
}

int pu_recv_main(int argc, char **argv)
{
    const char *port = NULL, *bind_addr = NULL;
    double idle = 10, wait = 0, grace = 1.0;
    uint64_t rcvbuf = 32 << 20, p;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            pu_usage_error("%s needs a value", a);
        if (!strcmp(a, "--port")) {
            if (pu_parse_u64(v, 1, 65535, &p))
                pu_usage_error("bad port '%s'", v);
            port = v;
        } else if (!strcmp(a, "--bind"))
            bind_addr = v;
        else if (!strcmp(a, "--idle-timeout")) {
            if (pu_parse_double(v, 0, 1e7, &idle))
                pu_usage_error("bad idle timeout '%s'", v);
        } else if (!strcmp(a, "--wait-timeout")) {
            if (pu_parse_double(v, 0, 1e7, &wait))
                pu_usage_error("bad wait timeout '%s'", v);
        } else if (!strcmp(a, "--grace")) {
            if (pu_parse_double(v, 0, 3600, &grace))
                pu_usage_error("bad grace '%s'", v);
        } else if (!strcmp(a, "--rcvbuf")) {
            if (pu_parse_u64(v, 4096, 1 << 30, &rcvbuf))
                pu_usage_error("bad rcvbuf '%s'", v);
        } else
            pu_usage_error("unknown option '%s'", a);
    }
    if (!port)
        pu_usage_error("recv needs --port");
    int actual = 0, fd = open_socket(bind_addr, port, rcvbuf, &actual);
    if (fd < 0)
        return 1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    unsigned char *bufs = malloc((size_t)BATCH * BUFLEN);
    char(*ctl)[64] = calloc(BATCH, 64);
    struct state st = {0};
    const char *reason = "signal";
    int64_t started = pu_now_ns(CLOCK_MONOTONIC), end_seen = 0;
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, 50);
        if (stop_flag) {
            drain(fd, &st, bufs, ctl); /* flush what already arrived */
            break;
        }
        if (pr > 0 && drain(fd, &st, bufs, ctl)) {
            perror("longhaul-pacedudp: recv");
            reason = "error";
            break;
        }
        int64_t mono = pu_now_ns(CLOCK_MONOTONIC);
        if (st.have_end) { /* linger briefly for datagrams the marker overtook */
            if (!end_seen)
                end_seen = mono;
            if (mono - end_seen > 100000000LL) {
                reason = "end";
                break;
            }
            continue;
        }
        if (st.received) {
            int64_t now_axis = pu_now_ns(CLOCK_REALTIME) - st.offset;
            while ((double)now_axis > (st.emitted + 1 + grace) * 1e9)
                emit(&st, st.emitted++);
            if (idle > 0 && mono - st.last_arrival_mono > idle * 1e9) {
                reason = "idle";
                break;
            }
        } else if (wait > 0 && mono - started > wait * 1e9) {
            reason = "wait";
            break;
        }
    }
    /* the remaining seconds: up to the last one with data, or the schedule's end if known */
    uint64_t last = 0;
    for (uint64_t i = 0; i < st.nbins; i++)
        if (st.arr_bytes[i])
            last = i + 1;
    if (st.have_end) {
        uint64_t sched = (st.end_sched_ns + 999999999ULL) / 1000000000ULL;
        if (sched > last)
            last = sched;
    }
    while (st.received && st.emitted < last)
        emit(&st, st.emitted++);
    grow(&st, last);
    printf("{\"summary\":true,\"reason\":\"%s\",\"session\":%u,\"datagrams\":%llu,\"bytes\":%llu,"
           "\"lost\":%llu,\"reordered\":%llu,\"late\":%llu,\"rcvbuf\":%d,\"end_marker\":%s",
           reason, st.session, (unsigned long long)st.received, (unsigned long long)st.bytes,
           (unsigned long long)lost_now(&st), (unsigned long long)st.reordered,
           (unsigned long long)st.late, actual, st.have_end ? "true" : "false");
    if (st.have_end)
        printf(",\"sent_datagrams\":%llu,\"sent_bytes\":%llu,\"schedule_s\":%.6f,\"skipped_bytes\":%llu",
               (unsigned long long)st.end_dgrams, (unsigned long long)st.end_bytes,
               st.end_sched_ns / 1e9, (unsigned long long)st.end_skipped);
    printf(",\"last_s\":%.6f", st.last_axis / 1e9);
    print_array("bins", st.arr_bytes, st.received ? last : 0);
    print_array("bin_datagrams", st.arr_dgrams, st.received ? last : 0);
    print_array("send_bins", st.send_bytes, st.received ? last : 0);
    printf("}\n");
    fflush(stdout);
    close(fd);
    return !strcmp(reason, "error") || (!strcmp(reason, "wait")) ? 1 : 0;
}
