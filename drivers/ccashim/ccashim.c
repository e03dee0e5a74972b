/* LD_PRELOAD shim: every TCP socket the tool opens gets the congestion control named in
 * $LONGHAUL_TCP_CCA (setsockopt TCP_CONGESTION), for tools that have no option of their own
 * (globus-url-copy, libnfs' nfs-cp). Per-socket choice works for any algorithm the kernel has
 * loaded, even where a network namespace may not default to it.
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
    if (fd < 0 || !cca || !*cca)
        return fd;
    if ((domain != AF_INET && domain != AF_INET6) || (type & 0xf) != SOCK_STREAM)
        return fd;
    if (protocol != 0 && protocol != IPPROTO_TCP)
        return fd;
    int saved = errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cca, strlen(cca)) != 0 && !warned) {
        warned = 1;
        fprintf(stderr, "longhaul-ccashim: cannot set TCP_CONGESTION %s: %s\n", cca, strerror(errno));
    }
    errno = saved;
    return fd;
}
