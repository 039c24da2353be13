/* filesend: the send side of PFS-basic (004 §4.2 Fig. 4-5): a file sent to a TCP peer either
 * with read(2) and write(2) of CHUNK bytes or with sendfile(2) of CHUNK bytes per call.
 *
 *   filesend METHOD FILE CHUNK START DURATION
 *
 * METHOD    readwrite or sendfile
 * CHUNK     bytes per read/write or sendfile call
 * START     wall-clock time (seconds since the epoch) at which the first pass begins
 * DURATION  the file is sent again (opened, sent, closed) until this many seconds have passed;
 *           at least once, so 0 sends it once
 *
 * The peer is a sink: a child process, forked before the clock starts, that accepts one
 * connection on 127.0.0.1 (an ephemeral port, loopback only), reads into a 256 KiB buffer,
 * counts the bytes and computes the Adler-32 of the first pass (the first file-size bytes),
 * and hands its figures back through a pipe once the sender has closed the connection. The
 * clock stops when the sink has read the last byte; the sender's CPU is its own getrusage
 * (RUSAGE_SELF, user and system) across the passes, the sink's is reported apart. One line on
 * stdout, the last one, whatever happened (calls: the write or sendfile calls):
 *
 *   method= chunk= file_bytes= passes= calls= bytes= received= adler32= start= end= seconds=
 *   user_s= sys_s= sink_user_s= sink_sys_s= status=ok|error error=...
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SINK_BUFFER (256 * 1024)
#define MAX_CHUNK (64L * 1024 * 1024)

struct sink_result {
    long long received;
    uint32_t adler32;
    double end;
    double user_s, sys_s;
    char error[200];
};

static pid_t sink_pid; /* the sink, killed when the sender fails */

static struct {
    const char *method;
    long chunk;
    long long file_bytes, bytes;
    long passes, calls;
} run;

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* The result line for a run that could not finish; exits. */
static void fail(const char *what, const char *detail)
{
    printf("method=%s chunk=%ld file_bytes=%lld passes=%ld calls=%ld bytes=%lld status=error "
           "error=%s%s%s\n", run.method ? run.method : "-", run.chunk, run.file_bytes,
           run.passes, run.calls, run.bytes, what, detail ? ": " : "", detail ? detail : "");
    if (sink_pid > 0)
        kill(sink_pid, SIGKILL);
    exit(1);
}

static uint32_t adler32_update(uint32_t adler, const unsigned char *p, size_t n)
{
    uint32_t a = adler & 0xffff, b = adler >> 16;
    while (n > 0) {
        size_t block = n < 5552 ? n : 5552; /* the most bytes before b can overflow */
        n -= block;
        while (block--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return (b << 16) | a;
}

/* The sink's side: accept one connection, read it to its end, report through fd `out`. */
static void sink(int listener, int out, long long first_pass)
{
    struct sink_result r;
    memset(&r, 0, sizeof r);
    r.adler32 = 1;
    unsigned char *buf = malloc(SINK_BUFFER);
    int conn = buf ? accept(listener, NULL, NULL) : -1;
    if (conn < 0) {
        snprintf(r.error, sizeof r.error, "sink: %s", buf ? strerror(errno) : "out of memory");
    } else {
        for (;;) {
            ssize_t n = read(conn, buf, SINK_BUFFER);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                snprintf(r.error, sizeof r.error, "sink read: %s", strerror(errno));
                break;
            }
            if (n == 0)
                break;
            if (r.received < first_pass) {
                long long left = first_pass - r.received;
                r.adler32 = adler32_update(r.adler32, buf, (size_t)(n < left ? n : left));
            }
            r.received += n;
            r.end = wall_s();
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.user_s = cpu_s(ru.ru_utime);
    r.sys_s = cpu_s(ru.ru_stime);
    ssize_t w = write(out, &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
}

static void write_all(int sock, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(sock, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            fail("write to the socket", strerror(errno));
        p += w;
        n -= (size_t)w;
        run.calls++;
    }
}

/* One pass: the file opened, sent to its end, closed; the bytes it sent. */
static long long send_once(const char *path, int sock, char *buf, int use_sendfile)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        fail("open", strerror(errno));
    long long sent = 0;
    for (;;) {
        ssize_t n;
        if (use_sendfile) {
            n = sendfile(sock, fd, NULL, (size_t)run.chunk);
            if (n > 0)
                run.calls++;
        } else {
            n = read(fd, buf, (size_t)run.chunk);
            if (n > 0)
                write_all(sock, buf, (size_t)n);
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail(use_sendfile ? "sendfile" : "read", strerror(errno));
        if (n == 0)
            break;
        sent += n;
    }
    close(fd);
    return sent;
}

static double number(const char *text, const char *what, double low)
{
    char *end;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(v >= low)) {
        char detail[160];
        snprintf(detail, sizeof detail, "must be a number of at least %g, not '%s'", low, text);
        fail(what, detail);
    }
    return v;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 6)
        fail("usage", "filesend readwrite|sendfile FILE CHUNK START DURATION");
    run.method = argv[1];
    int use_sendfile = strcmp(argv[1], "sendfile") == 0;
    if (!use_sendfile && strcmp(argv[1], "readwrite") != 0)
        fail("METHOD", "must be readwrite or sendfile");
    const char *path = argv[2];
    double chunk = number(argv[3], "CHUNK", 1);
    if (chunk > MAX_CHUNK || chunk != (long)chunk)
        fail("CHUNK", "must be a whole number of bytes up to 64 MiB");
    run.chunk = (long)chunk;
    double start = number(argv[4], "START", 0);
    double duration = number(argv[5], "DURATION", 0);

    struct stat st;
    if (stat(path, &st) != 0)
        fail("stat", strerror(errno));
    run.file_bytes = st.st_size;
    char *buf = NULL;
    if (!use_sendfile) {
        if (posix_memalign((void **)&buf, 4096, (size_t)run.chunk) != 0)
            fail("allocate the buffer", "out of memory");
        memset(buf, 0, (size_t)run.chunk); /* every page present before the clock starts */
    }

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0
        || listen(listener, 1) != 0 || getsockname(listener, (struct sockaddr *)&addr, &len) != 0)
        fail("the sink's socket on 127.0.0.1", strerror(errno));
    int report[2];
    if (pipe(report) != 0)
        fail("pipe", strerror(errno));
    pid_t child = fork();
    if (child < 0)
        fail("fork", strerror(errno));
    if (child == 0) {
        sink_pid = 0;
        close(report[0]);
        sink(listener, report[1], run.file_bytes);
    }
    sink_pid = child;
    close(report[1]);
    close(listener); /* the child holds it: connect below is queued until it accepts */
    int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0)
        fail("connect to the sink", strerror(errno));

    struct timespec at = {.tv_sec = (time_t)start,
                          .tv_nsec = (long)((start - (double)(time_t)start) * 1e9)};
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL) == EINTR)
        ;
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = wall_s();
    do {
        long long sent = send_once(path, sock, buf, use_sendfile);
        run.passes++;
        run.bytes += sent;
        if (sent != run.file_bytes) {
            char detail[160];
            snprintf(detail, sizeof detail, "pass %ld sent %lld of the file's %lld bytes",
                     run.passes, sent, run.file_bytes);
            fail("short pass", detail);
        }
    } while (wall_s() - t0 < duration);
    shutdown(sock, SHUT_WR);
    getrusage(RUSAGE_SELF, &ru1);

    struct sink_result r;
    ssize_t got = read(report[0], &r, sizeof r);
    int status = 0;
    waitpid(child, &status, 0);
    sink_pid = 0;
    if (got != (ssize_t)sizeof r)
        fail("the sink", "gave no result");
    if (r.error[0])
        fail("the sink", r.error);
    const char *error = r.received == run.bytes ? "" : "the sink received other than was sent";
    double end = r.end > t0 ? r.end : wall_s();
    printf("method=%s chunk=%ld file_bytes=%lld passes=%ld calls=%ld bytes=%lld received=%lld "
           "adler32=%08x start=%.6f end=%.6f seconds=%.6f user_s=%.6f sys_s=%.6f "
           "sink_user_s=%.6f sink_sys_s=%.6f status=%s error=%s\n", run.method, run.chunk,
           run.file_bytes, run.passes, run.calls, run.bytes, r.received, r.adler32, t0, end,
           end - t0, cpu_s(ru1.ru_utime) - cpu_s(ru0.ru_utime),
           cpu_s(ru1.ru_stime) - cpu_s(ru0.ru_stime), r.user_s, r.sys_s,
           error[0] ? "error" : "ok", error);
    return error[0] ? 1 : 0;
}
