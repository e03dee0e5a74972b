/* longhaul-pacedudp: shared wire format and helpers of the paced UDP sender and receiver.
 *
 * Every datagram starts with a 32-byte header in network byte order; the end marker adds the
 * sender's totals so the receiver can count loss exactly even when the last datagrams are lost. */
#ifndef LONGHAUL_PACEDUDP_H
#define LONGHAUL_PACEDUDP_H

#include <stdint.h>
#include <time.h>

#define PU_MAGIC 0x4C485055u /* "LHPU" */
#define PU_DATA 0
#define PU_END 1
#define PU_HDR 32            /* smallest datagram: the header */
#define PU_END_LEN (PU_HDR + 24)
#define PU_MAX_PAYLOAD 65507 /* largest UDP payload over IPv4 */
#define PU_MAX_SECONDS 1000000

struct pu_hdr {
    uint32_t magic, session;
    uint16_t type, flags;
    uint32_t reserved;
    uint64_t seq;     /* data: sequence number from 0; end: number of data datagrams sent */
    uint64_t send_ns; /* ns since the sender's start (its first datagram) */
};

struct pu_end { /* follows the header in an end marker */
    uint64_t bytes;    /* data bytes sent (UDP payload) */
    uint64_t sched_ns; /* the schedule's end: duration, or when the byte budget was due */
    uint64_t skipped;  /* scheduled bytes given up after a stall longer than --max-lag-ms */
};

void pu_put_hdr(unsigned char *buf, const struct pu_hdr *h);
int pu_get_hdr(const unsigned char *buf, long len, struct pu_hdr *h); /* 0 if ours */
void pu_put_u64(unsigned char *p, uint64_t v);
uint64_t pu_get_u64(const unsigned char *p);
int64_t pu_now_ns(clockid_t clk);
/* strict number parsing: whole string, finite, within [lo, hi]; 0 on success */
int pu_parse_double(const char *s, double lo, double hi, double *out);
int pu_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
void pu_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

int pu_send_main(int argc, char **argv);
int pu_recv_main(int argc, char **argv);

#endif
