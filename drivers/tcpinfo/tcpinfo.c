/* longhaul-tcpinfo: tcp_info of the established TCP sockets to given destination ports, read by
 * sock_diag netlink every period and printed as JSON lines: the same lines, fields and order as
 * drivers/agents/tcpinfo_probe.py's json format (collectors/live/socket_sampler.py reads both).
 *
 * Why C: at 100 Hz on 8 senders the Python probe took 30 % of a core (bench/RESULTS-sampler.md);
 * seed 002's sawtooth at 20 ms needs 100 Hz for 16 flows within 3 %.
 *
 *   longhaul-tcpinfo --period 0.01 --ports 5201,5202
 *   longhaul-tcpinfo --period 0.01 --ports 5201 --netns /run/netns/A=a.jsonl --netns /run/netns/B=b.jsonl
 *
 * With --netns, one process reads every named network namespace of this machine (a netlink socket
 * opened in each, then back to its own namespace) and writes each one's lines to its own file:
 * the cost at 100 Hz was the wake-ups of one probe per namespace, not the dumps. Without it, the
 * namespace it runs in, on stdout.
 *
 * Output: {"fields": [...]} once, then {"t": <wall seconds>, "d": <seconds>, "s": [[row], ...]} per
 * tick, the wall clock read at the middle of the dump and the dump's length (a reading a stalled
 * host stretched is known only to within it). A late tick is skipped, never doubled. SIGTERM/SIGINT end
 * it with exit 0. A field the kernel's tcp_info is too short for is null. Lines reach the output
 * at least every FLUSH_S (the live display reads them twice a second) and at exit. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping = 0;
static void on_signal(int sig) { (void)sig; stopping = 1; }

static unsigned char wanted[65536 / 8];
static int want(unsigned port) { return wanted[port >> 3] & (1u << (port & 7)); }

static const char *FIELDS =
    "{\"fields\": [\"src\", \"sport\", \"dst\", \"dport\", \"cca\", \"cwnd\", \"mss\", \"unacked\", \"srtt_us\", "
    "\"rttvar_us\", \"retrans_total\", \"delivery_rate_Bps\", \"bytes_acked\", \"bytes_received\", \"sacked\", "
    "\"lost\", \"retrans_out\"]}\n";

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* a tcp_info field, or null when the kernel's struct is too short for it */
#define FIELD(info, len, name, fmt, out)                                                         \
    do {                                                                                         \
        if ((info) && offsetof(struct tcp_info, name) + sizeof((info)->name) <= (size_t)(len))   \
            out += sprintf(out, ", " fmt, (info)->name);                                         \
        else                                                                                     \
            out += sprintf(out, ", null");                                                       \
    } while (0)

static int dump(int fd, unsigned seq, char *rows, size_t cap, size_t *used) {
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg;
    memset(&msg, 0, sizeof msg);
    msg.nlh.nlmsg_len = sizeof msg;
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    msg.nlh.nlmsg_seq = seq;
    msg.req.sdiag_family = AF_INET;
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = 1u << 1; /* TCP_ESTABLISHED */
    msg.req.idiag_ext = (1u << (INET_DIAG_INFO - 1)) | (1u << (INET_DIAG_CONG - 1));
    if (send(fd, &msg, sizeof msg, 0) < 0) return -1;
    static char buf[1 << 16];
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)got); h = NLMSG_NEXT(h, got)) {
            if (h->nlmsg_type == NLMSG_DONE) return 0;
            if (h->nlmsg_type == NLMSG_ERROR) {
                errno = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
                return -1;
            }
            struct inet_diag_msg *d = NLMSG_DATA(h);
            unsigned dport = ntohs(d->id.idiag_dport);
            if (!want(dport) || *used + 512 > cap) continue;
            const struct tcp_info *info = NULL;
            size_t info_len = 0;
            const char *cca = NULL;
            int rest = h->nlmsg_len - NLMSG_LENGTH(sizeof *d);
            for (struct rtattr *a = (struct rtattr *)(d + 1); RTA_OK(a, rest); a = RTA_NEXT(a, rest)) {
                if (a->rta_type == INET_DIAG_INFO) {
                    info = RTA_DATA(a);
                    info_len = RTA_PAYLOAD(a);
                } else if (a->rta_type == INET_DIAG_CONG) {
                    cca = RTA_DATA(a);
                }
            }
            char src[INET_ADDRSTRLEN], dst[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, d->id.idiag_src, src, sizeof src);
            inet_ntop(AF_INET, d->id.idiag_dst, dst, sizeof dst);
            char *out = rows + *used;
            out += sprintf(out, "%s[\"%s\", %u, \"%s\", %u, ", *used ? ", " : "", src, ntohs(d->id.idiag_sport), dst, dport);
            out += cca ? sprintf(out, "\"%.15s\"", cca) : sprintf(out, "null");
            FIELD(info, info_len, tcpi_snd_cwnd, "%u", out);
            FIELD(info, info_len, tcpi_snd_mss, "%u", out);
            FIELD(info, info_len, tcpi_unacked, "%u", out);
            FIELD(info, info_len, tcpi_rtt, "%u", out);
            FIELD(info, info_len, tcpi_rttvar, "%u", out);
            FIELD(info, info_len, tcpi_total_retrans, "%u", out);
            FIELD(info, info_len, tcpi_delivery_rate, "%llu", out);
            FIELD(info, info_len, tcpi_bytes_acked, "%llu", out);
            FIELD(info, info_len, tcpi_bytes_received, "%llu", out);
            FIELD(info, info_len, tcpi_sacked, "%u", out);
            FIELD(info, info_len, tcpi_lost, "%u", out);
            FIELD(info, info_len, tcpi_retrans, "%u", out);
            out += sprintf(out, "]");
            *used = out - rows;
        }
    }
}

struct target {
    int fd;      /* sock_diag socket, bound to the target's namespace when it was made */
    FILE *out;
};

#define MAX_TARGETS 256
#define FLUSH_S 0.2

static int usage(void) {
    fprintf(stderr, "usage: longhaul-tcpinfo --period SECONDS --ports P[,P...] [--netns NETNS_PATH=OUT_FILE]...\n");
    return 2;
}

static int diag_socket(void) { return socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG); }

/* A sock_diag socket in the namespace at `path` (the socket keeps it), this process back in `home`. */
static int diag_socket_in(const char *path, int home) {
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) return -1;
    int fd = -1;
    if (setns(ns, CLONE_NEWNET) == 0) {
        fd = diag_socket();
        int saved = errno;
        if (setns(home, CLONE_NEWNET) < 0) {
            perror("longhaul-tcpinfo: back to its own namespace");
            exit(1);
        }
        errno = saved;
    }
    close(ns);
    return fd;
}

int main(int argc, char **argv) {
    double period = 0.1;
    int ports = 0, ntargets = 0;
    static char *spaces[MAX_TARGETS];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--period") && i + 1 < argc) {
            period = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--ports") && i + 1 < argc) {
            for (char *p = strtok(argv[++i], ","); p; p = strtok(NULL, ",")) {
                long port = strtol(p, NULL, 10);
                if (port <= 0 || port > 65535) return usage();
                wanted[port >> 3] |= 1u << (port & 7);
                ports++;
            }
        } else if (!strcmp(argv[i], "--netns") && i + 1 < argc && ntargets < MAX_TARGETS) {
            spaces[ntargets++] = argv[++i];
        } else {
            return usage();
        }
    }
    if (period <= 0 || !ports) return usage();
    /* a write the stop interrupts is finished (the sleep still wakes: it is never restarted) */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    static struct target targets[MAX_TARGETS];
    if (!ntargets) {
        targets[0].fd = diag_socket();
        targets[0].out = stdout;
        if (targets[0].fd < 0) {
            perror("longhaul-tcpinfo: sock_diag socket");
            return 1;
        }
        ntargets = 1;
    } else {
        int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (home < 0) {
            perror("longhaul-tcpinfo: its own namespace");
            return 1;
        }
        for (int k = 0; k < ntargets; k++) {
            char *eq = strchr(spaces[k], '=');
            if (!eq || eq == spaces[k] || !eq[1]) return usage();
            *eq = '\0';
            targets[k].fd = diag_socket_in(spaces[k], home);
            if (targets[k].fd < 0) {
                fprintf(stderr, "longhaul-tcpinfo: sock_diag socket in %s: %s\n", spaces[k], strerror(errno));
                return 1;
            }
            targets[k].out = fopen(eq + 1, "w");
            if (!targets[k].out) {
                fprintf(stderr, "longhaul-tcpinfo: %s: %s\n", eq + 1, strerror(errno));
                return 1;
            }
        }
        close(home);
    }
    for (int k = 0; k < ntargets; k++)
        if (fputs(FIELDS, targets[k].out) < 0 || fflush(targets[k].out)) return 0;
    static char rows[1 << 20];
    long step_ns = (long)(period * 1e9);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    double flushed = wall_now();
    int failed = 0;
    for (unsigned seq = 1; !stopping && !failed; seq++) {
        for (int k = 0; k < ntargets; k++) {
            size_t used = 0;
            double before = wall_now();
            if (dump(targets[k].fd, seq, rows, sizeof rows, &used) < 0) {
                perror("longhaul-tcpinfo: sock_diag dump");
                return 1;
            }
            double after = wall_now();
            rows[used] = '\0';
            if (fprintf(targets[k].out, "{\"t\": %.4f, \"d\": %.4f, \"s\": [%s]}\n", (before + after) / 2,
                        after - before, rows) < 0)
                failed = 1; /* reader gone */
        }
        if (wall_now() - flushed >= FLUSH_S || period >= FLUSH_S) {
            for (int k = 0; k < ntargets; k++)
                if (fflush(targets[k].out)) failed = 1;
            flushed = wall_now();
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        do { /* a late tick is skipped, never doubled */
            next.tv_nsec += step_ns;
            while (next.tv_nsec >= 1000000000L) {
                next.tv_nsec -= 1000000000L;
                next.tv_sec++;
            }
        } while (next.tv_sec < now.tv_sec || (next.tv_sec == now.tv_sec && next.tv_nsec < now.tv_nsec));
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR && !stopping) {
        }
    }
    for (int k = 0; k < ntargets; k++) {
        fflush(targets[k].out);
        close(targets[k].fd);
    }
    return 0;
}
