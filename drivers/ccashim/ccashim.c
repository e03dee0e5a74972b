/* LD_PRELOAD shim: every TCP socket the tool opens gets the congestion control named in
 * $LONGHAUL_TCP_CCA (setsockopt TCP_CONGESTION), for tools that have no option of their own
 * (globus-url-copy, libnfs' nfs-cp). Per-socket choice works for any algorithm the kernel has
 * loaded, even where a network namespace may not default to it.
 * $LONGHAUL_MAX_PACING_RATE (bytes/s) caps each TCP socket's pacing rate (SO_MAX_PACING_RATE,
 * which TCP's own pacing honours without the fq qdisc), as iperf3's --fq-rate does: a plan
 * replay paces a GridFTP transfer at the rate its log line asked for.
 * $LONGHAUL_REUSEADDR=1 sets SO_REUSEADDR on each TCP socket: a GridFTP server whose passive data
 * port is pinned can listen on it again while the previous transfer's connection on that port
 * is still in TIME_WAIT (the server closes first; the kernel holds the port 60 s otherwise).
 * A failure is reported once on stderr and the socket is kept: the sampler records the
 * algorithm each socket really used. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int (*real_socket)(int, int, int);
static int warned;

int socket(int domain, int type, int protocol)
{
    if (!real_socket)
        real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    int fd = real_socket(domain, type, protocol);
    const char *cca = getenv("LONGHAUL_TCP_CCA");
    const char *pacing = getenv("LONGHAUL_MAX_PACING_RATE");
    const char *reuse = getenv("LONGHAUL_REUSEADDR");
    int want_reuse = reuse && strcmp(reuse, "1") == 0;
    if (fd < 0 || ((!cca || !*cca) && (!pacing || !*pacing) && !want_reuse))
        return fd;
    if ((domain != AF_INET && domain != AF_INET6) || (type & 0xf) != SOCK_STREAM)
        return fd;
    if (protocol != 0 && protocol != IPPROTO_TCP)
        return fd;
    int saved = errno;
    if (cca && *cca && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cca, strlen(cca)) != 0 && !warned) {
        warned = 1;
        fprintf(stderr, "longhaul-ccashim: cannot set TCP_CONGESTION %s: %s\n", cca, strerror(errno));
    }
    if (pacing && *pacing) {
        unsigned long long rate = strtoull(pacing, NULL, 10);
        unsigned int capped = rate > 0xffffffffULL ? 0xffffffffU : (unsigned int)rate;
        if (rate && setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &capped, sizeof capped) != 0 && !warned) {
            warned = 1;
            fprintf(stderr, "longhaul-ccashim: cannot set SO_MAX_PACING_RATE %s: %s\n", pacing, strerror(errno));
        }
    }
    if (want_reuse) {
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 && !warned) {
            warned = 1;
            fprintf(stderr, "longhaul-ccashim: cannot set SO_REUSEADDR: %s\n", strerror(errno));
        }
    }
    errno = saved;
    return fd;
}
