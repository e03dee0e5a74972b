/* longhaul-pacedudp: a UDP source paced by an absolute schedule whose rate may change within a
 * run (constant, or seed 002's sinusoid), and the receiver that counts what arrived per second.
 *
 *   longhaul-pacedudp send --to HOST --port P (--rate-mbps R | --sine MIN,MAX,PERIOD)
 *                          (--duration S | --bytes N) [--size B] [--catchup F] [--burst-ms MS]
 *                          [--max-lag-ms MS] [--tick-us US] [--end-count N]
 *   longhaul-pacedudp recv --port P [--bind ADDR] [--idle-timeout S] [--wait-timeout S]
 *                          [--rcvbuf BYTES] [--grace S]
 *
 * iperf3 cannot change its rate mid-run, hence this tool. Exit codes: 0 ok, 1 runtime error,
 * 2 bad arguments (message on stderr, nothing on stdout). */
#include "pacedudp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pu_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

uint64_t pu_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void pu_put_hdr(unsigned char *buf, const struct pu_hdr *h)
{
    uint32_t w[3] = {htonl(h->magic), htonl(h->session), htonl(((uint32_t)h->type << 16) | h->flags)};
    uint32_t r = htonl(h->reserved);
    memcpy(buf, w, sizeof w);
    memcpy(buf + 12, &r, 4);
    pu_put_u64(buf + 16, h->seq);
    pu_put_u64(buf + 24, h->send_ns);
}

int pu_get_hdr(const unsigned char *buf, long len, struct pu_hdr *h)
{
    uint32_t w[4];
    if (len < PU_HDR)
        return -1;
    memcpy(w, buf, sizeof w);
    h->magic = ntohl(w[0]);
    h->session = ntohl(w[1]);
    h->type = (uint16_t)(ntohl(w[2]) >> 16);
    h->flags = (uint16_t)(ntohl(w[2]) & 0xffff);
    h->reserved = ntohl(w[3]);
    h->seq = pu_get_u64(buf + 16);
    h->send_ns = pu_get_u64(buf + 24);
    return h->magic == PU_MAGIC ? 0 : -1;
}

int64_t pu_now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int pu_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int pu_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

void pu_usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("longhaul-pacedudp: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nusage: longhaul-pacedudp send --to HOST --port P (--rate-mbps R | --sine MIN,MAX,PERIOD)"
          " (--duration S | --bytes N) [--size B] [--catchup F] [--burst-ms MS] [--max-lag-ms MS]"
          " [--tick-us US] [--end-count N]\n"
          "       longhaul-pacedudp recv --port P [--bind ADDR] [--idle-timeout S]"
          " [--wait-timeout S] [--rcvbuf BYTES] [--grace S]\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        pu_usage_error("missing mode");
    if (!strcmp(argv[1], "send"))
        return pu_send_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "recv"))
        return pu_recv_main(argc - 1, argv + 1);
    pu_usage_error("unknown mode '%s'", argv[1]);
}
