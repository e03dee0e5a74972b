// longhaul-udtperf: a memory-to-memory UDT4 sender/receiver that prints UDT::perfmon as JSON lines.
//
//   longhaul-udtperf recv --port P [--bind ADDR] [options]
//   longhaul-udtperf send --host H --port P (--seconds S | --bytes N) [--max-mbps R] [options]
//   options: --mss N --fc PKTS --udt-sndbuf N --udt-rcvbuf N --udp-sndbuf N --udp-rcvbuf N
//            --interval S --block N --drain-timeout S --backlog-s S
//
// Each side prints {"event":"interval",...} once per interval (application bytes of that interval plus
// perfmon's local counters and instant values) and one {"event":"summary",...} at the end. perfmon
// fails once the peer has closed, so a reading is also taken every 100 ms without clearing, and the
// summary carries the last one that succeeded. The receiver serves one connection and exits; SIGTERM
// on either side flushes the summary and exits 0. Bad arguments exit 2, UDT errors exit 1.
// The sender ends only once UDT's send buffer is empty (everything acknowledged); with --seconds it
// keeps at most --backlog-s of data queued so that this drain stays short.
#include <udt/udt.h>

#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Options {
    std::string mode, host, bind;
    int port = -1, mss = 0, fc = 0;
    long long udt_sndbuf = 0, udt_rcvbuf = 0, udp_sndbuf = 0, udp_rcvbuf = 0, bytes = -1;
    double seconds = -1, max_mbps = 0, interval = 1.0, drain_timeout = 30.0, backlog_s = 0.25;
    int block = 1 << 20;
};

[[noreturn]] void usage(const char* why) {
    fprintf(stderr, "longhaul-udtperf: %s\nusage: longhaul-udtperf recv --port P [--bind ADDR] [opts]\n"
                    "       longhaul-udtperf send --host H --port P (--seconds S | --bytes N) [--max-mbps R] [opts]\n"
                    "opts: --mss N --fc PKTS --udt-sndbuf N --udt-rcvbuf N --udp-sndbuf N --udp-rcvbuf N\n"
                    "      --interval S --block N --drain-timeout S --backlog-s S\n", why);
    exit(2);
}

long long to_int(const char* name, const char* s, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) usage((std::string("bad value for ") + name).c_str());
    return v;
}

double to_num(const char* name, const char* s, double lo, double hi) {
    char* end = nullptr;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !std::isfinite(v) || v < lo || v > hi)
        usage((std::string("bad value for ") + name).c_str());
    return v;
}

Options parse_args(int argc, char** argv) {
    Options o;
    if (argc < 2) usage("missing mode");
    o.mode = argv[1];
    if (o.mode != "recv" && o.mode != "send") usage("mode must be recv or send");
    const long long big = 1LL << 40;
    for (int i = 2; i < argc; i += 2) {
        std::string k = argv[i];
        if (i + 1 >= argc) usage(("missing value for " + k).c_str());
        const char* v = argv[i + 1];
        const char* n = k.c_str();
        if (k == "--port") o.port = (int)to_int(n, v, 1, 65535);
        else if (k == "--host" && o.mode == "send") o.host = v;
        else if (k == "--bind" && o.mode == "recv") o.bind = v;
        else if (k == "--seconds" && o.mode == "send") o.seconds = to_num(n, v, 0.001, 1e7);
        else if (k == "--bytes" && o.mode == "send") o.bytes = to_int(n, v, 1, 1LL << 62);
        else if (k == "--max-mbps" && o.mode == "send") o.max_mbps = to_num(n, v, 0.001, 1e6);
        else if (k == "--mss") o.mss = (int)to_int(n, v, 76, 65536);  // UDT rejects MSS below 76
        else if (k == "--fc") o.fc = (int)to_int(n, v, 32, 1 << 30);
        else if (k == "--udt-sndbuf") o.udt_sndbuf = to_int(n, v, 1, big);
        else if (k == "--udt-rcvbuf") o.udt_rcvbuf = to_int(n, v, 1, big);
        else if (k == "--udp-sndbuf") o.udp_sndbuf = to_int(n, v, 1, 1LL << 31);
        else if (k == "--udp-rcvbuf") o.udp_rcvbuf = to_int(n, v, 1, 1LL << 31);
        else if (k == "--interval") o.interval = to_num(n, v, 0.05, 3600);
        else if (k == "--block") o.block = (int)to_int(n, v, 1, 1 << 28);
        else if (k == "--drain-timeout") o.drain_timeout = to_num(n, v, 0, 86400);
        else if (k == "--backlog-s" && o.mode == "send") o.backlog_s = to_num(n, v, 0, 3600);
        else usage(("unknown option " + k).c_str());
    }
    if (o.port < 0) usage("--port is required");
    if (o.mode == "send") {
        if (o.host.empty()) usage("--host is required");
        if ((o.seconds < 0) == (o.bytes < 0)) usage("give exactly one of --seconds and --bytes");
    }
    return o;
}

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::string udt_error() {
    return std::to_string(UDT::getlasterror_code()) + " " + UDT::getlasterror_desc();
}

std::string json_str(const std::string& s) {  // enough escaping for host names and UDT messages
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += c;
        else if ((unsigned char)c < 0x20) out += ' ';
        else out += c;
    }
    return out + "\"";
}

std::string num(double v) {  // JSON has no NaN/inf; perfmon divides by intervals that can be zero
    char b[64];
    snprintf(b, sizeof b, "%.3f", std::isfinite(v) ? v : 0.0);
    return b;
}

// perfmon fields under their UDT names; `totals` adds the since-connect counters
#define I_(f) + ",\"" #f "\":" + std::to_string(p.f)
#define D_(f) + ",\"" #f "\":" + num(p.f)
std::string perf_fields(const UDT::TRACEINFO& p, bool totals) {
    std::string s = std::string("\"msTimeStamp\":") + std::to_string(p.msTimeStamp)
        D_(mbpsSendRate) D_(mbpsRecvRate) I_(pktSent) I_(pktRecv) I_(pktSndLoss) I_(pktRcvLoss) I_(pktRetrans)
        I_(pktSentACK) I_(pktRecvACK) I_(pktSentNAK) I_(pktRecvNAK) D_(msRTT) I_(pktFlowWindow)
        I_(pktCongestionWindow) I_(pktFlightSize) D_(usPktSndPeriod) D_(mbpsBandwidth) I_(byteAvailSndBuf)
        I_(byteAvailRcvBuf);
    if (totals)
        s = s I_(pktSentTotal) I_(pktRecvTotal) I_(pktSndLossTotal) I_(pktRcvLossTotal) I_(pktRetransTotal)
            I_(pktSentACKTotal) I_(pktRecvACKTotal) I_(pktSentNAKTotal) I_(pktRecvNAKTotal);
    return s;
}
#undef I_
#undef D_

void emit(const std::string& line) {  // one line per write, flushed: the driver may read a killed run
    fputs((line + "\n").c_str(), stdout);
    fflush(stdout);
}

bool setopt(UDTSOCKET u, UDT::SOCKOPT opt, const void* v, int len, const char* name) {
    bool ok = UDT::setsockopt(u, 0, opt, v, len) != UDT::ERROR;
    if (!ok) fprintf(stderr, "longhaul-udtperf: setsockopt %s: %s\n", name, udt_error().c_str());
    return ok;
}

// Options UDT needs before bind/connect; UDT_FC must precede the buffer sizes (UDT's own rule).
bool apply_options(UDTSOCKET u, const Options& o) {
    if (o.mss && !setopt(u, UDT_MSS, &o.mss, sizeof(int), "UDT_MSS")) return false;
    if (o.fc && !setopt(u, UDT_FC, &o.fc, sizeof(int), "UDT_FC")) return false;
    struct { UDT::SOCKOPT opt; long long val; const char* name; } bufs[] = {
        {UDT_SNDBUF, o.udt_sndbuf, "UDT_SNDBUF"}, {UDT_RCVBUF, o.udt_rcvbuf, "UDT_RCVBUF"},
        {UDP_SNDBUF, o.udp_sndbuf, "UDP_SNDBUF"}, {UDP_RCVBUF, o.udp_rcvbuf, "UDP_RCVBUF"}};
    for (auto& b : bufs) {
        int v = b.val > INT32_MAX ? INT32_MAX : (int)b.val;
        if (b.val && !setopt(u, b.opt, &v, sizeof(int), b.name)) return false;
    }
    if (o.max_mbps > 0) {
        int64_t bw = (int64_t)(o.max_mbps * 1e6 / 8);  // UDT_MAXBW is bytes per second
        if (!setopt(u, UDT_MAXBW, &bw, sizeof(bw), "UDT_MAXBW")) return false;
    }
    return true;
}

std::string addr_text(const sockaddr* sa, socklen_t len) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV)) return "?";
    return std::string(host) + ":" + serv;
}

// The per-interval bookkeeping both sides share: application bytes counted by the caller, perfmon
// read with clear at each interval's end and without clear every 100 ms so a reading survives close.
struct Meter {
    UDTSOCKET u;
    const char* role;
    double t0, interval, last_emit, last_peek = 0;
    long long total = 0, at_last_emit = 0;
    int count = 0;
    bool have_perf = false, peek_since_emit = false;
    UDT::TRACEINFO perf{};

    Meter(UDTSOCKET s, const char* r, double iv) : u(s), role(r), t0(now_s()), interval(iv), last_emit(t0) {}

    void tick(bool force_end = false) {
        double t = now_s();
        bool due = force_end || t - last_emit >= interval;
        if (!due) {
            if (t - last_peek >= 0.1 && UDT::perfmon(u, &perf, false) != UDT::ERROR)
                have_perf = peek_since_emit = true;
            if (t - last_peek >= 0.1) last_peek = t;
            return;
        }
        // clear at an interval's end so the local counters cover exactly one interval; the final
        // reading does not clear, and after the peer closed it falls back to the last peek
        UDT::TRACEINFO now_perf;
        bool fresh = UDT::perfmon(u, &now_perf, !force_end) != UDT::ERROR;
        if (fresh) perf = now_perf, have_perf = true;
        bool fields = fresh || peek_since_emit;
        long long bytes = total - at_last_emit;
        if (force_end && bytes == 0 && t - last_emit < 1e-3) return;
        double secs = t - last_emit;
        std::string line = std::string("{\"event\":\"interval\",\"role\":\"") + role + "\",\"start_s\":" +
            num(last_emit - t0) + ",\"end_s\":" + num(t - t0) + ",\"seconds\":" + num(secs) +
            ",\"bytes\":" + std::to_string(bytes) + ",\"mbps\":" + num(secs > 0 ? bytes * 8 / secs / 1e6 : 0);
        line += fields ? "," + perf_fields(perf, false) + "}" : ",\"perf\":null}";
        emit(line);
        ++count;
        last_emit = last_peek = t;
        at_last_emit = total;
        peek_since_emit = false;
    }

    void summary(const char* reason, const std::string& error, const std::string& extra) {
        double t = now_s();
        std::string line = std::string("{\"event\":\"summary\",\"role\":\"") + role + "\",\"reason\":\"" + reason +
            "\",\"seconds\":" + num(t - t0) + ",\"bytes\":" + std::to_string(total) +
            ",\"intervals\":" + std::to_string(count) + extra;
        if (!error.empty()) line += ",\"error\":" + json_str(error);
        line += have_perf ? ",\"last\":{" + perf_fields(perf, true) + "}}" : ",\"last\":null}";
        emit(line);
    }
};

int pending_packets(UDTSOCKET u) {  // UDT_SNDDATA counts packets in the send buffer, not bytes
    int pending = 0, len = sizeof(int);
    return UDT::getsockopt(u, 0, UDT_SNDDATA, &pending, &len) == UDT::ERROR ? -1 : pending;
}

// With --seconds, UDT's send buffer (~10 MB by default: about 1 s at 100 Mb/s) would still be full
// when the time is up and the transfer would overrun it by that long; so only backlog_s worth of
// the recent drain rate is kept queued. A burst then ends close to its scheduled end.
struct Backlog {
    double backlog_s, t_prev = 0, rate = 0, rate_prev = 0;
    long long floor_bytes, drained_prev = 0;
    int payload = 1456;
    Backlog(UDTSOCKET u, double s, int block) : backlog_s(s), floor_bytes(2LL * block) {
        int mss = 0, len = sizeof(int);
        if (UDT::getsockopt(u, 0, UDT_MSS, &mss, &len) != UDT::ERROR && mss > 44) payload = mss - 44;  // IP+UDP+UDT headers
    }
    bool full(UDTSOCKET u, long long enqueued) {
        if (backlog_s <= 0) return false;
        int pending = pending_packets(u);
        if (pending < 0) return false;  // let send() report the error
        long long queued = (long long)pending * payload;
        double t = now_s();
        if (t - t_prev >= 0.1) {  // the larger of the last two 100 ms rates: a stalled tick must not shrink it
            double r = (enqueued - queued - drained_prev) / (t_prev > 0 ? t - t_prev : 1.0);
            rate = std::max(r, rate_prev);
            rate_prev = r;
            t_prev = t;
            drained_prev = enqueued - queued;
        }
        return queued >= std::max(floor_bytes, (long long)(rate * backlog_s));
    }
};

int run_recv(const Options& o) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    hints.ai_family = o.bind.empty() ? AF_INET : AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    std::string port = std::to_string(o.port);
    int gai = getaddrinfo(o.bind.empty() ? nullptr : o.bind.c_str(), port.c_str(), &hints, &res);
    if (gai) { fprintf(stderr, "longhaul-udtperf: %s: %s\n", o.bind.c_str(), gai_strerror(gai)); return 1; }
    UDTSOCKET ls = UDT::socket(res->ai_family, SOCK_STREAM, 0);
    bool nonblock = false;
    if (ls == UDT::INVALID_SOCK || !apply_options(ls, o) ||
        UDT::bind(ls, res->ai_addr, (int)res->ai_addrlen) == UDT::ERROR || UDT::listen(ls, 1) == UDT::ERROR ||
        !setopt(ls, UDT_RCVSYN, &nonblock, sizeof(bool), "UDT_RCVSYN")) {
        fprintf(stderr, "longhaul-udtperf: listen on port %d: %s\n", o.port, udt_error().c_str());
        freeaddrinfo(res);
        return 1;
    }
    freeaddrinfo(res);
    emit("{\"event\":\"listening\",\"role\":\"recv\",\"port\":" + port + "}");
    // accept() on a blocking socket waits on a condition variable a signal cannot break, so poll
    sockaddr_storage peer{};
    int plen = sizeof peer;
    UDTSOCKET u = UDT::INVALID_SOCK;
    while (!g_stop) {
        u = UDT::accept(ls, (sockaddr*)&peer, &plen);
        if (u != UDT::INVALID_SOCK) break;
        if (UDT::getlasterror_code() != CUDTException::EASYNCRCV) {
            fprintf(stderr, "longhaul-udtperf: accept: %s\n", udt_error().c_str());
            return 1;
        }
        usleep(20000);
    }
    UDT::close(ls);
    if (u == UDT::INVALID_SOCK) {  // SIGTERM before any sender came
        emit("{\"event\":\"summary\",\"role\":\"recv\",\"reason\":\"signal\",\"seconds\":0,\"bytes\":0,\"intervals\":0,\"last\":null}");
        return 0;
    }
    bool block = true;
    int timeout_ms = 100;  // recv wakes up this often to print intervals and see SIGTERM
    setopt(u, UDT_RCVSYN, &block, sizeof(bool), "UDT_RCVSYN");
    setopt(u, UDT_RCVTIMEO, &timeout_ms, sizeof(int), "UDT_RCVTIMEO");
    std::string peer_s = addr_text((sockaddr*)&peer, plen);
    emit("{\"event\":\"connected\",\"role\":\"recv\",\"peer\":" + json_str(peer_s) + "}");
    std::vector<char> buf(o.block);
    Meter m(u, "recv", o.interval);
    const char* reason = "closed";
    std::string error;
    double last_data = m.t0;  // a vanished sender is noticed only after UDT's ~45 s of silence
    while (true) {
        if (g_stop) { reason = "signal"; break; }
        int r = UDT::recv(u, buf.data(), (int)buf.size(), 0);
        if (r > 0) m.total += r, last_data = now_s();
        else if (r == UDT::ERROR && UDT::getlasterror_code() != CUDTException::ETIMEOUT) {
            // ECONNLOST: the sender closed (or vanished) and everything it sent has been read
            if (UDT::getlasterror_code() != CUDTException::ECONNLOST) { reason = "error"; error = udt_error(); }
            break;
        }
        m.tick();
    }
    m.tick(true);
    m.summary(reason, error, ",\"peer\":" + json_str(peer_s) + ",\"idle_s\":" + num(now_s() - last_data));
    UDT::close(u);
    return reason[0] == 'e' ? 1 : 0;
}

int run_send(const Options& o) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_DGRAM;  // AF_UNSPEC: the socket takes the family of the address that answers
    hints.ai_flags = AI_NUMERICSERV;
    std::string port = std::to_string(o.port);
    int gai = getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res);
    if (gai) { fprintf(stderr, "longhaul-udtperf: %s: %s\n", o.host.c_str(), gai_strerror(gai)); return 1; }
    UDTSOCKET u = UDT::INVALID_SOCK;
    std::string peer_s, why = "no address";
    for (addrinfo* ai = res; ai && u == UDT::INVALID_SOCK && !g_stop; ai = ai->ai_next) {
        u = UDT::socket(ai->ai_family, SOCK_STREAM, 0);
        if (u == UDT::INVALID_SOCK) { why = udt_error(); continue; }
        if (apply_options(u, o) && UDT::connect(u, ai->ai_addr, (int)ai->ai_addrlen) != UDT::ERROR) {
            peer_s = addr_text(ai->ai_addr, ai->ai_addrlen);
            break;
        }
        why = udt_error();
        UDT::close(u);
        u = UDT::INVALID_SOCK;
    }
    freeaddrinfo(res);
    if (u == UDT::INVALID_SOCK) {
        fprintf(stderr, "longhaul-udtperf: connect to %s port %d: %s\n", o.host.c_str(), o.port, why.c_str());
        return 1;
    }
    int timeout_ms = 100;  // send wakes up this often to print intervals and see SIGTERM
    setopt(u, UDT_SNDTIMEO, &timeout_ms, sizeof(int), "UDT_SNDTIMEO");
    sockaddr_storage local{};
    int llen = sizeof local;
    std::string local_s = UDT::getsockname(u, (sockaddr*)&local, &llen) == UDT::ERROR ? "?" : addr_text((sockaddr*)&local, llen);
    emit("{\"event\":\"connected\",\"role\":\"send\",\"peer\":" + json_str(peer_s) + ",\"local\":" + json_str(local_s) + "}");
    std::vector<char> buf(o.block);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = (char)(i * 131 + 7);  // not all zeros, not compressible-looking
    Meter m(u, "send", o.interval);
    Backlog backlog(u, o.backlog_s, o.block);
    const char* reason = "done";
    std::string error;
    while (true) {
        if (g_stop) { reason = "signal"; break; }
        if (o.seconds > 0 && now_s() - m.t0 >= o.seconds) break;
        if (o.seconds > 0 && backlog.full(u, m.total)) {
            usleep(2000);
            m.tick();
            continue;
        }
        long long want = o.block;
        if (o.bytes > 0) {
            if (m.total >= o.bytes) break;
            if (o.bytes - m.total < want) want = o.bytes - m.total;
        }
        int r = UDT::send(u, buf.data(), (int)want, 0);
        if (r > 0) m.total += r;
        else if (r == UDT::ERROR && UDT::getlasterror_code() != CUDTException::ETIMEOUT) { reason = "error"; error = udt_error(); break; }
        m.tick();
    }
    // Drain: the send buffer keeps data until the receiver acknowledges it, so an empty buffer
    // means everything arrived; only then is the final reading the whole transfer's.
    double drain_end = now_s() + o.drain_timeout;
    while (reason[0] == 'd') {
        int pending = pending_packets(u);
        if (pending < 0) { reason = "error"; error = udt_error(); break; }
        if (pending == 0) break;
        if (g_stop) { reason = "signal"; break; }
        if (now_s() > drain_end) { reason = "error"; error = "send buffer not drained in time"; break; }
        usleep(5000);
        m.tick();
    }
    m.tick(true);
    m.summary(reason, error, ",\"peer\":" + json_str(peer_s));
    if (reason[0] != 'd') {  // do not linger 180 s on data nobody will wait for
        linger lg{1, 0};
        UDT::setsockopt(u, 0, UDT_LINGER, &lg, sizeof lg);
    }
    UDT::close(u);
    return reason[0] == 'e' ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    struct sigaction sa{};
    sa.sa_handler = on_signal;  // no SA_RESTART: the loops poll the flag at least every 100 ms
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    // UDT paces packets by sleeping ~100 us between them (about 8 k packets/s at 100 Mb/s); the default
    // 50 us timer slack is half of that. Threads inherit the slack, so set it before UDT starts its own.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    if (UDT::startup() == UDT::ERROR) { fprintf(stderr, "longhaul-udtperf: startup: %s\n", udt_error().c_str()); return 1; }
    int rc = o.mode == "recv" ? run_recv(o) : run_send(o);
    UDT::cleanup();
    return rc;
}
