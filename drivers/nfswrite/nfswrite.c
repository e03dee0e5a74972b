/*
 * longhaul-nfswrite: copy N bytes from memory to a new file on an NFS server,
 * with up to --window bytes of WRITE calls in flight.
 *
 *   longhaul-nfswrite --bytes N [--window BYTES] nfs://server/export/file?version=3&...
 *
 * libnfs' nfs-cp writes 1 MB and waits for the reply before the next, so one
 * copy moves at most 1 MB per round trip (~65 Mb/s at 128 ms).  A kernel NFS
 * client writes back dirty pages with many WRITE calls outstanding on one TCP
 * connection, so TCP's window, not the RPC loop, sets its rate: this keeps
 * that many bytes of WRITEs queued with libnfs' async API, one connection,
 * calls of the server's wtmax (at most 1 MB) each.
 *
 * The file is created as nfs-cp creates it (O_CREAT|O_EXCL|O_TRUNC, 0660) and
 * the source is a zero buffer ("from local memory", seed 000).  Prints nfs-cp's
 * "copied N bytes" line when every WRITE is answered; a stop (SIGTERM/SIGINT)
 * while writing prints "stopped after N bytes" (bytes the server acknowledged)
 * and exits 3 (before the file is created it ends the program at once).
 * Exit 10 when the server cannot be mounted or the file created (as nfs-cp),
 * 2 on bad arguments, 1 when a WRITE fails.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nfsc/libnfs.h>

#define MAX_CHUNK (1u << 20)
#define DEFAULT_WINDOW (64ull << 20)
#define MAX_WINDOW (1ull << 30)

static struct {
	uint64_t total, window, chunk;
	uint64_t issued, inflight, acked;
	int failed;
	char error[256];
} st;

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) { (void)sig; stop_flag = 1; }

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

static void usage(FILE *f)
{
	fputs("usage: longhaul-nfswrite --bytes N [--window BYTES] NFS-URL\n", f);
}

static void written(int err, struct nfs_context *nfs, void *data, void *private_data)
{
	uint64_t asked = (uint64_t)(uintptr_t)private_data;

	(void)nfs;
	st.inflight -= asked;
	if (err < 0) {
		if (!st.failed)
			snprintf(st.error, sizeof st.error, "%s", data ? (const char *)data : strerror(-err));
		st.failed = 1;
		return;
	}
	st.acked += (uint64_t)err;
	if ((uint64_t)err != asked && !st.failed) {
		snprintf(st.error, sizeof st.error, "short WRITE: %d of %" PRIu64 " bytes", err, asked);
		st.failed = 1;
	}
}

static int pump(struct nfs_context *nfs, struct nfsfh *fh, const char *zeros)
{
	while (!st.failed && st.issued < st.total && st.inflight + st.chunk <= st.window) {
		uint64_t n = st.total - st.issued < st.chunk ? st.total - st.issued : st.chunk;

		if (nfs_pwrite_async(nfs, fh, st.issued, n, zeros, written, (void *)(uintptr_t)n) != 0) {
			snprintf(st.error, sizeof st.error, "queueing a WRITE: %s", nfs_get_error(nfs));
			st.failed = 1;
			return -1;
		}
		st.issued += n;
		st.inflight += n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"bytes", required_argument, NULL, 'b'},
		{"window", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c, have_bytes = 0;
	struct nfs_context *nfs;
	struct nfs_url *url;
	struct nfsfh *fh = NULL;
	char *zeros;
	struct sigaction sa;

	st.window = DEFAULT_WINDOW;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (parse_u64(optarg, 1, UINT64_MAX / 2, &st.total)) goto bad;
			have_bytes = 1;
			break;
		case 'w':
			if (parse_u64(optarg, 4096, MAX_WINDOW, &st.window)) goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (!have_bytes || optind != argc - 1)
		goto bad;

	nfs = nfs_init_context();
	if (!nfs) {
		fputs("longhaul-nfswrite: failed to init an NFS context\n", stderr);
		return 10;
	}
	url = nfs_parse_url_full(nfs, argv[optind]);
	if (!url) {
		fprintf(stderr, "longhaul-nfswrite: %s\n", nfs_get_error(nfs));
		return 2;
	}
	if (nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "Failed to mount nfs share : %s\n", nfs_get_error(nfs));
		return 10;
	}
	if (nfs_create(nfs, url->file, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0660, &fh) != 0) {
		fprintf(stderr, "Failed to creat file %s: %s\n", url->file, nfs_get_error(nfs));
		return 10;
	}
	st.chunk = nfs_get_writemax(nfs);
	if (st.chunk > MAX_CHUNK)
		st.chunk = MAX_CHUNK;
	if (st.window < st.chunk)
		st.window = st.chunk;       /* one call in flight: nfs-cp's loop */
	zeros = calloc(1, st.chunk);
	if (!zeros) {
		perror("longhaul-nfswrite: calloc");
		return 1;
	}
	/* Until now a stop simply ends the program (libnfs' blocking mount and create
	 * would not notice a flag); from here it ends the copy and says how far it got. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	while (!stop_flag && !st.failed && st.acked < st.total) {
		struct pollfd pfd;

		if (pump(nfs, fh, zeros))
			break;
		pfd.fd = nfs_get_fd(nfs);
		pfd.events = (short)nfs_which_events(nfs);
		pfd.revents = 0;
		if (poll(&pfd, 1, 100) < 0) {
			if (errno == EINTR)
				continue;
			perror("longhaul-nfswrite: poll");
			st.failed = 1;
			break;
		}
		if (nfs_service(nfs, pfd.revents) < 0) {
			snprintf(st.error, sizeof st.error, "%s", nfs_get_error(nfs));
			st.failed = 1;
		}
	}

	if (st.failed) {
		fprintf(stderr, "Failed to write to dest file: %s (after %" PRIu64 " bytes)\n", st.error, st.acked);
		return 1;
	}
	if (stop_flag && st.acked < st.total) {
		printf("stopped after %" PRIu64 " bytes\n", st.acked);
		return 3;
	}
	nfs_close(nfs, fh);
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	free(zeros);
	printf("copied %" PRIu64 " bytes\n", st.acked);
	return 0;
bad:
	usage(stderr);
	return 2;
}
