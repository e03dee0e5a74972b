/* The paced sender. Datagram k is due when the schedule's byte integral B(t) reaches k * size;
 * each wake sends what is due (absolute schedule on CLOCK_MONOTONIC, so timer slips do not
 * accumulate into drift). After a stall the backlog goes out at --catchup times the rate through
 * a small token bucket (--burst-ms deep), so a 100 ms stall is made good within ~100 ms instead of
 * in one line-rate burst that a shaper's queue would drop; a backlog older than --max-lag-ms is
 * given up (and reported) rather than sent late. */
#define _GNU_SOURCE
#include "pacedudp.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64

struct sched {
    int sine;
    double rate, min, avg, c; /* bytes per second; c in seconds */
};

/* bytes due by t: the integral of the rate from 0 to t */
static double sched_bytes(const struct sched *s, double t)
{
    if (!s->sine)
        return s->rate * t;
    return s->avg * s->c * sin(t / s->c) + (s->min + s->avg) * t;
}

static double sched_rate(const struct sched *s, double t)
{
    return s->sine ? s->avg * cos(t / s->c) + s->min + s->avg : s->rate;
}

static double sched_mean(const struct sched *s) { return s->sine ? s->min + s->avg : s->rate; }

/* the time at which B(t) = bytes (B is non-decreasing, so bisection always converges) */
static double sched_time(const struct sched *s, double bytes)
{
    if (!s->sine)
        return bytes / s->rate;
    double lo = 0, hi = (bytes + s->avg * s->c) / (s->min + s->avg) + 1e-9;
    for (int i = 0; i < 80 && hi - lo > 1e-9; i++) {
        double mid = (lo + hi) / 2;
        if (sched_bytes(s, mid) < bytes)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void sleep_until(int64_t abs_ns)
{
    struct timespec ts = {abs_ns / 1000000000LL, abs_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop_flag)
        ;
}

static int open_socket(const char *host, const char *port, struct sockaddr_storage *dst, socklen_t *dlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        fprintf(stderr, "longhaul-pacedudp: cannot resolve %s: %s\n", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_DGRAM, 0);
    if (fd >= 0) {
        memcpy(dst, res->ai_addr, res->ai_addrlen);
        *dlen = res->ai_addrlen;
        int buf = 4 << 20; /* FORCE passes net.core.wmem_max when we may (root in the namespace) */
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf))
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    } else {
        perror("longhaul-pacedudp: socket");
    }
    freeaddrinfo(res);
    return fd;
}

struct opts {
    const char *to, *port;
    struct sched s;
    double duration, catchup, burst_ms, max_lag_ms, tick_us;
    uint64_t bytes, size, end_count;
    int have_rate, have_sine, have_duration, have_bytes;
};

static void parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.size = 1472, .catchup = 2.0, .burst_ms = 2.0, .max_lag_ms = 1000, .end_count = 3,
                    .tick_us = 200};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t port;
        if (!v)
            pu_usage_error("%s needs a value", a);
        i++;
        if (!strcmp(a, "--to"))
            o->to = v;
        else if (!strcmp(a, "--port")) {
            if (pu_parse_u64(v, 1, 65535, &port))
                pu_usage_error("bad port '%s'", v);
            o->port = v;
        } else if (!strcmp(a, "--rate-mbps")) {
            double r;
            if (pu_parse_double(v, 1e-6, 1e6, &r))
                pu_usage_error("bad rate '%s'", v);
            o->s.rate = r * 1e6 / 8, o->have_rate = 1;
        } else if (!strcmp(a, "--sine")) {
            double mn, mx, per;
            char tail;
            if (sscanf(v, "%lf,%lf,%lf%c", &mn, &mx, &per, &tail) != 3 || !isfinite(mn) || !isfinite(mx) ||
                !isfinite(per) || mn < 0 || mx <= 0 || mx < mn || mx > 1e6 || per <= 0 || per > 1e6)
                pu_usage_error("bad --sine '%s' (MIN,MAX,PERIOD with 0 <= MIN <= MAX, MAX > 0)", v);
            /* seed 002: f(t) = Avg cos(t/c) + Min + Avg, Avg = (Max-Min)/2, c = period/(2 pi) */
            o->s = (struct sched){.sine = 1, .min = mn * 1e6 / 8, .avg = (mx - mn) / 2 * 1e6 / 8,
                                  .c = per / (2 * M_PI)};
            o->have_sine = 1;
        } else if (!strcmp(a, "--duration")) {
            if (pu_parse_double(v, 1e-3, PU_MAX_SECONDS, &o->duration))
                pu_usage_error("bad duration '%s'", v);
            o->have_duration = 1;
        } else if (!strcmp(a, "--bytes")) {
            if (pu_parse_u64(v, 1, UINT64_C(1) << 50, &o->bytes))
                pu_usage_error("bad byte count '%s'", v);
            o->have_bytes = 1;
        } else if (!strcmp(a, "--size")) {
            if (pu_parse_u64(v, PU_END_LEN, PU_MAX_PAYLOAD, &o->size))
                pu_usage_error("bad size '%s' (%d..%d)", v, PU_END_LEN, PU_MAX_PAYLOAD);
        } else if (!strcmp(a, "--catchup")) {
            if (pu_parse_double(v, 1.0, 100, &o->catchup))
                pu_usage_error("bad catch-up factor '%s' (1..100)", v);
        } else if (!strcmp(a, "--burst-ms")) {
            if (pu_parse_double(v, 0, 10000, &o->burst_ms))
                pu_usage_error("bad burst '%s'", v);
        } else if (!strcmp(a, "--max-lag-ms")) {
            if (pu_parse_double(v, 1, 1e7, &o->max_lag_ms))
                pu_usage_error("bad max lag '%s'", v);
        } else if (!strcmp(a, "--tick-us")) {
            if (pu_parse_double(v, 0, 100000, &o->tick_us))
                pu_usage_error("bad tick '%s'", v);
        } else if (!strcmp(a, "--end-count")) {
            if (pu_parse_u64(v, 1, 100, &o->end_count))
                pu_usage_error("bad end count '%s'", v);
        } else
            pu_usage_error("unknown option '%s'", a);
    }
    if (!o->to || !o->port)
        pu_usage_error("send needs --to and --port");
    if (o->have_rate + o->have_sine != 1)
        pu_usage_error("give exactly one of --rate-mbps and --sine");
    if (o->have_duration + o->have_bytes != 1)
        pu_usage_error("give exactly one of --duration and --bytes");
}

int pu_send_main(int argc, char **argv)
{
    struct opts o;
    parse_args(argc, argv, &o);
    const struct sched *s = &o.s;
    struct sockaddr_storage dst;
    socklen_t dlen;
    int fd = open_socket(o.to, o.port, &dst, &dlen);
    if (fd < 0)
        return 1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    const double size = (double)o.size;
    /* the schedule: total datagrams, the last one's size, and when the schedule ends */
    uint64_t total_k, last_size = o.size;
    double sched_end;
    if (o.have_bytes) {
        total_k = (o.bytes + o.size - 1) / o.size;
        last_size = o.bytes - (total_k - 1) * o.size;
        if (last_size < PU_HDR)
            last_size = PU_HDR;
        sched_end = sched_time(s, (double)o.bytes);
    } else {
        total_k = (uint64_t)ceil(sched_bytes(s, o.duration) / size);
        sched_end = o.duration;
    }
    const double mean = sched_mean(s), peak = s->sine ? s->min + 2 * s->avg : s->rate;
    const double depth = fmax(4 * size, o.burst_ms / 1e3 * o.catchup * peak);
    const double max_lag = o.max_lag_ms / 1e3 * mean;
    uint32_t session = (uint32_t)(getpid() ^ pu_now_ns(CLOCK_REALTIME));

    unsigned char *bufs = calloc(BATCH, o.size);
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint64_t seq = 0, k = 0, bytes_sent = 0, skipped = 0, send_errors = 0, nper = 0;
    uint64_t *per_s = NULL;
    double bucket = depth, last_t = 0, max_late = 0;
    const int64_t start = pu_now_ns(CLOCK_MONOTONIC);
    memset(msgs, 0, sizeof msgs);

    while (k < total_k && !stop_flag) {
        double t = (pu_now_ns(CLOCK_MONOTONIC) - start) / 1e9;
        double b = sched_bytes(s, t);
        uint64_t due = b < 0 ? 1 : (uint64_t)floor(b / size) + 1;
        if (due > total_k)
            due = total_k;
        double catch_rate = o.catchup * fmax(sched_rate(s, t), mean);
        bucket = fmin(depth, bucket + (t - last_t) * catch_rate);
        last_t = t;
        uint64_t lag = due > k ? due - k : 0;
        if (lag * size > max_lag + size) { /* a long stall: give up the oldest backlog */
            uint64_t skip = lag - (uint64_t)(max_lag / size) - 1;
            k += skip, lag -= skip, skipped += skip * o.size;
        }
        uint64_t n = lag < (uint64_t)(bucket / size) ? lag : (uint64_t)(bucket / size);
        if (n > 0) {
            max_late = fmax(max_late, t - sched_time(s, (double)k * size));
            int64_t now_rel = pu_now_ns(CLOCK_MONOTONIC) - start;
            while (n > 0 && !stop_flag) {
                unsigned m = n < BATCH ? (unsigned)n : BATCH;
                for (unsigned j = 0; j < m; j++) {
                    unsigned char *p = bufs + (size_t)j * o.size;
                    struct pu_hdr h = {PU_MAGIC, session, PU_DATA, 0, 0, seq + j, (uint64_t)now_rel};
                    pu_put_hdr(p, &h);
                    iov[j] = (struct iovec){p, k + j == total_k - 1 ? last_size : o.size};
                    msgs[j].msg_hdr = (struct msghdr){.msg_name = &dst, .msg_namelen = dlen,
                                                      .msg_iov = &iov[j], .msg_iovlen = 1};
                }
                int r = sendmmsg(fd, msgs, m, 0);
                if (r < 0) {
                    if (errno == EINTR)
                        continue;
                    /* ENOBUFS, unreachable...: count it and let the schedule retry (or skip) */
                    send_errors++;
                    break;
                }
                uint64_t sec = (uint64_t)(now_rel / 1000000000LL);
                if (sec >= nper) {
                    uint64_t nn = sec + 16;
                    per_s = realloc(per_s, nn * sizeof *per_s);
                    memset(per_s + nper, 0, (nn - nper) * sizeof *per_s);
                    nper = nn;
                }
                for (int j = 0; j < r; j++)
                    bytes_sent += iov[j].iov_len, per_s[sec] += iov[j].iov_len;
                seq += r, k += r, n -= r, bucket -= r * size;
            }
            if (n > 0 && !stop_flag) { /* a send error: back off 1 ms */
                sleep_until(pu_now_ns(CLOCK_MONOTONIC) + 1000000);
                continue;
            }
        }
        if (k >= total_k)
            break;
        /* next wake: the next datagram's due time, or when the bucket allows one more */
        double wake = due > k ? t + (size - bucket) / catch_rate : sched_time(s, (double)k * size);
        if (wake > t + 0.05)
            wake = t + 0.05; /* re-check now and then (signals, rate near zero) */
        if (wake < t + o.tick_us / 1e6)
            wake = t + o.tick_us / 1e6; /* fewer wakes: a datagram per wake at 100 Mb/s costs a core */
        sleep_until(start + (int64_t)(wake * 1e9));
    }
    double elapsed = (pu_now_ns(CLOCK_MONOTONIC) - start) / 1e9;

    /* end markers, a few in case some are lost; they carry the totals for exact loss counting */
    unsigned char end[PU_END_LEN];
    for (uint64_t i = 0; i < o.end_count; i++) {
        struct pu_hdr h = {PU_MAGIC, session, PU_END, 0, 0, seq,
                           (uint64_t)(pu_now_ns(CLOCK_MONOTONIC) - start)};
        pu_put_hdr(end, &h);
        pu_put_u64(end + PU_HDR, bytes_sent);
        pu_put_u64(end + PU_HDR + 8, (uint64_t)(sched_end * 1e9));
        pu_put_u64(end + PU_HDR + 16, skipped);
        if (sendto(fd, end, sizeof end, 0, (struct sockaddr *)&dst, dlen) < 0)
            send_errors++;
        if (i + 1 < o.end_count)
            sleep_until(pu_now_ns(CLOCK_MONOTONIC) + 2000000);
    }
    printf("{\"role\":\"sender\",\"session\":%u,\"datagrams\":%llu,\"bytes\":%llu,\"seconds\":%.6f,"
           "\"schedule_s\":%.6f,\"size\":%llu,\"skipped_bytes\":%llu,\"send_errors\":%llu,"
           "\"max_late_ms\":%.3f,\"stopped\":%s,\"sent_per_s\":[",
           session, (unsigned long long)seq, (unsigned long long)bytes_sent, elapsed, sched_end,
           (unsigned long long)o.size, (unsigned long long)skipped, (unsigned long long)send_errors,
           max_late * 1e3, stop_flag ? "true" : "false");
    uint64_t used = 0; /* up to the last second anything was sent in */
    for (uint64_t i = 0; i < nper; i++)
        if (per_s[i])
            used = i + 1;
    for (uint64_t i = 0; i < used; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)per_s[i]);
    printf("]}\n");
    fflush(stdout);
    free(per_s);
    free(bufs);
    close(fd);
    return seq == 0 && send_errors > 0 ? 1 : 0;
}
