/* mi_netem: link emulation for the testbed where tc netem is missing.
 *
 * Packets that iptables sends to NFQUEUE queue Q are held for delay +- jitter
 * (uniform) and released in arrival order (a link does not reorder), or
 * dropped with probability loss. Every packet that passes is delayed once, so
 * a rule matching both directions gives an RTT of about 2 x delay. With a
 * rate, every packet also occupies one shared medium for its bits / rate in
 * arrival order, as on a wireless channel that all devices share (CATS's
 * mesh): bytes cost time and traffic queues.
 *
 * usage: mi_netem --queue Q --delay-ms D [--jitter-ms J] [--loss-pct L] [--rate-mbit R] [--seed S]
 *                 [--control FILE]
 * Runs until SIGINT/SIGTERM, then releases every held packet and exits 0.
 * With --control, SIGUSR1 makes it read "DELAY_MS RATE_MBIT" from FILE and
 * use them for the packets that arrive from then on (a link that degrades
 * or recovers mid-run: Voltron's runtime scaling). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAP 65536

static struct {
    uint32_t id;
    double release;
    int drop;
} held[CAP];
static size_t head, tail;
static double delay_s, jitter_s, loss, rate_bps;
static double medium_free; /* when the shared medium finishes the packets before */
static uint64_t rng = 88172645463325252ull;
static double last_release;
static volatile sig_atomic_t stop;
static unsigned long n_pass, n_drop;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
    (void)msg, (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    if ((tail + 1) % CAP == head) /* queue full: let it through rather than stall the link */
        return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
    double t = now(), sent = t;
    if (rate_bps > 0) {
        /* the IPv4 header's total length (the queue copies the first 20 bytes) */
        unsigned char *ip = NULL;
        int n = nfq_get_payload(nfa, &ip);
        double bytes = n >= 4 ? (double)(((unsigned)ip[2] << 8) | ip[3]) : 64.0;
        double start = t > medium_free ? t : medium_free;
        medium_free = start + 8.0 * bytes / rate_bps;
        sent = medium_free;
    }
    double r = sent + delay_s + (2.0 * uniform() - 1.0) * jitter_s;
    if (r < last_release) /* FIFO: never overtake the packet ahead */
        r = last_release;
    last_release = r;
    held[tail].id = id;
    held[tail].release = r;
    held[tail].drop = uniform() * 100.0 < loss;
    tail = (tail + 1) % CAP;
    return 0;
}

static void on_signal(int s)
{
    (void)s;
    stop = 1;
}

static volatile sig_atomic_t reread;
static void on_usr1(int s)
{
    (void)s;
    reread = 1;
}

/* New delay and rate from the control file (ignored, with a warning, when malformed). */
static void read_control(const char *path)
{
    FILE *f = fopen(path, "r");
    double d = -1, r = -1;
    if (!f || fscanf(f, "%lf %lf", &d, &r) != 2 || d < 0 || r < 0 || d > 1e5 || r > 1e6) {
        fprintf(stderr, "mi_netem: warning: %s does not hold \"DELAY_MS RATE_MBIT\"; link unchanged\n", path);
    } else {
        delay_s = d / 1e3;
        if (jitter_s > delay_s)
            jitter_s = delay_s;
        rate_bps = r * 1e6;
        fprintf(stderr, "mi_netem: link now %.2f ms, rate %s%.0f%s\n", d, r > 0 ? "" : "unlimited", r > 0 ? r : 0,
                r > 0 ? " Mbit/s" : "");
    }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    int queue = -1, o;
    double delay_ms = -1, jitter_ms = 0, loss_pct = 0, rate_mbit = 0;
    const char *control = NULL;
    static const struct option opts[] = {{"queue", 1, 0, 'q'}, {"delay-ms", 1, 0, 'd'}, {"jitter-ms", 1, 0, 'j'},
                                         {"loss-pct", 1, 0, 'l'}, {"seed", 1, 0, 's'}, {"rate-mbit", 1, 0, 'r'},
                                         {"control", 1, 0, 'c'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 'q': queue = (int)strtol(optarg, &end, 10); break;
        case 'd': delay_ms = strtod(optarg, &end); break;
        case 'j': jitter_ms = strtod(optarg, &end); break;
        case 'l': loss_pct = strtod(optarg, &end); break;
        case 'r': rate_mbit = strtod(optarg, &end); break;
        case 's': rng = strtoull(optarg, &end, 10) | 1; break;
        case 'c': control = optarg; break;
        case 'h':
            printf("usage: mi_netem --queue Q --delay-ms D [--jitter-ms J] [--loss-pct L] [--rate-mbit R] [--seed S]\n"
                   "Holds NFQUEUE packets for D +- J ms in FIFO order, drops L%%; with R, packets also take\n"
                   "turns on one shared medium of R Mbit/s (0: unlimited); stops on SIGINT/SIGTERM.\n");
            return 0;
        default: fprintf(stderr, "mi_netem: error: bad option (see --help)\n"); return 2;
        }
        if (end && *end) {
            fprintf(stderr, "mi_netem: error: '%s' is not a number\n", optarg);
            return 2;
        }
    }
    if (queue < 0 || queue > 65535 || delay_ms < 0 || jitter_ms < 0 || jitter_ms > delay_ms || loss_pct < 0 ||
        loss_pct > 100 || rate_mbit < 0) {
        fprintf(stderr, "mi_netem: error: need --queue 0..65535, --delay-ms >= 0, 0 <= --jitter-ms <= delay, "
                        "--loss-pct 0..100, --rate-mbit >= 0\n");
        return 2;
    }
    delay_s = delay_ms / 1e3;
    jitter_s = jitter_ms / 1e3;
    loss = loss_pct;
    rate_bps = rate_mbit * 1e6;
    struct nfq_handle *h = nfq_open();
    if (!h) {
        fprintf(stderr, "mi_netem: error: nfq_open failed (root and the nfnetlink_queue module are needed)\n");
        return 1;
    }
    nfq_unbind_pf(h, AF_INET);
    if (nfq_bind_pf(h, AF_INET) < 0) {
        fprintf(stderr, "mi_netem: error: cannot bind to IPv4 netfilter queues\n");
        return 1;
    }
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
    /* with a rate the IPv4 header is needed for the packet's length */
    int need_len = rate_bps > 0 || control; /* a rate may be set later */
    if (!qh || nfq_set_mode(qh, need_len ? NFQNL_COPY_PACKET : NFQNL_COPY_META, need_len ? 20 : 0) < 0) {
        fprintf(stderr, "mi_netem: error: cannot create queue %d (in use?)\n", queue);
        return 1;
    }
    nfq_set_queue_maxlen(qh, CAP - 1);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (control)
        signal(SIGUSR1, on_usr1);
    int fd = nfq_fd(h);
    char buf[65536] __attribute__((aligned));
    fprintf(stderr, "mi_netem: queue %d, delay %.2f ms +- %.2f, loss %.2f%%, rate %s\n", queue, delay_ms, jitter_ms,
            loss_pct, rate_bps > 0 ? "limited" : "unlimited");
    while (!stop) {
        if (reread) {
            reread = 0;
            read_control(control);
        }
        double t = now();
        while (head != tail && (held[head].release <= t || stop)) {
            nfq_set_verdict(qh, held[head].id, held[head].drop ? NF_DROP : NF_ACCEPT, 0, NULL);
            held[head].drop ? n_drop++ : n_pass++;
            head = (head + 1) % CAP;
        }
        int timeout = 100;
        if (head != tail) {
            double wait = held[head].release - now();
            timeout = wait <= 0 ? 0 : (int)(wait * 1e3) + 1;
            if (wait > 0 && wait < 1e-3)
                timeout = 1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout) > 0) {
            ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0)
                nfq_handle_packet(h, buf, (int)n);
            else if (n < 0 && errno == ENOBUFS)
                fprintf(stderr, "mi_netem: warning: kernel queue overflow, packets lost\n");
        }
    }
    while (head != tail) {
        nfq_set_verdict(qh, held[head].id, NF_ACCEPT, 0, NULL);
        head = (head + 1) % CAP;
    }
    nfq_destroy_queue(qh);
    nfq_close(h);
    fprintf(stderr, "mi_netem: stopped: %lu packets delayed, %lu dropped\n", n_pass, n_drop);
    return 0;
}
