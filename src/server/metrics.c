/* The server's counters and histograms, read by GET /metrics in Prometheus'
 * text format (see internal.h). Written by the scheduler and the HTTP
 * thread alike: one mutex. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "meshinfer/common.h"

static const double ttft_le[SRV_N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, -1};
static const double tpot_le[SRV_N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, -1};
#define RING 16      /* seconds kept of tokens per second */
#define WINDOW 10    /* the gauge's window, seconds */

void srv_metrics_init(srv_metrics *m, int max_batch)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    memcpy(m->ttft.le, ttft_le, sizeof ttft_le);
    memcpy(m->tpot.le, tpot_le, sizeof tpot_le);
    m->max_batch = max_batch;
    m->started = mi_now();
}

static void observe(srv_hist *h, double v)
{
    for (int i = 0; i < SRV_N_BUCKETS; i++)
        if (h->le[i] < 0 || v <= h->le[i]) {
            h->count[i]++;
            break;
        }
    h->sum += v;
    h->n++;
}

void srv_metrics_request(srv_metrics *m, int status, int n_prompt, int n_gen, double ttft_s, double tpot_s, int timed)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_status && m->status[i] != status)
        i++;
    if (i == m->n_status && i < SRV_N_STATUS)
        m->status[m->n_status++] = status;
    if (i < SRV_N_STATUS)
        m->by_status[i]++;
    m->prompt_tokens += (uint64_t)(n_prompt > 0 ? n_prompt : 0);
    if (timed && n_gen > 0) {
        observe(&m->ttft, ttft_s);
        if (n_gen > 1)
            observe(&m->tpot, tpot_s);
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int n)
{
    long sec = (long)mi_now();
    pthread_mutex_lock(&m->mu);
    m->gen_tokens += (uint64_t)n;
    int k = (int)(sec % RING);
    if (m->tok_sec_at[k] != sec)
        m->tok_sec_at[k] = sec, m->tok_sec[k] = 0;
    m->tok_sec[k] += n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_load(srv_metrics *m, int queued, int running)
{
    pthread_mutex_lock(&m->mu);
    m->queued = queued, m->running = running;
    pthread_mutex_unlock(&m->mu);
}

static void hist_text(srv_buf *out, const char *name, const char *help, const srv_hist *h)
{
    srv_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_N_BUCKETS; i++) {
        cum += h->count[i];
        if (h->le[i] < 0)
            srv_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        else
            srv_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    srv_buf_printf(out, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

void srv_metrics_text(srv_metrics *m, srv_buf *out)
{
    pthread_mutex_lock(&m->mu);
    double now = mi_now();
    long sec = (long)now;
    /* tokens/s over the last whole seconds of the window (the current one is not over) */
    double toks = 0;
    for (int i = 0; i < RING; i++)
        if (m->tok_sec_at[i] < sec && m->tok_sec_at[i] >= sec - WINDOW)
            toks += m->tok_sec[i];
    double span = now - m->started < WINDOW ? (double)(sec - (long)m->started) : WINDOW;
    srv_buf_str(out, "# HELP meshinfer_requests_total HTTP requests answered, by status.\n"
                     "# TYPE meshinfer_requests_total counter\n");
    for (int i = 0; i < m->n_status; i++)
        srv_buf_printf(out, "meshinfer_requests_total{status=\"%d\"} %llu\n", m->status[i],
                       (unsigned long long)m->by_status[i]);
    srv_buf_printf(out, "# HELP meshinfer_queue_depth Requests waiting for a batch slot.\n"
                        "# TYPE meshinfer_queue_depth gauge\nmeshinfer_queue_depth %d\n"
                        "# HELP meshinfer_running_sequences Sequences decoding in the batch.\n"
                        "# TYPE meshinfer_running_sequences gauge\nmeshinfer_running_sequences %d\n"
                        "# HELP meshinfer_max_batch Batch slots (--max-batch).\n"
                        "# TYPE meshinfer_max_batch gauge\nmeshinfer_max_batch %d\n",
                   m->queued, m->running, m->max_batch);
    hist_text(out, "meshinfer_ttft_seconds", "Time from a request's arrival at the scheduler to its first token.",
              &m->ttft);
    hist_text(out, "meshinfer_tpot_seconds", "Mean time per generated token after the first, per request.", &m->tpot);
    srv_buf_printf(out, "# HELP meshinfer_prompt_tokens_total Prompt tokens of the requests answered.\n"
                        "# TYPE meshinfer_prompt_tokens_total counter\nmeshinfer_prompt_tokens_total %llu\n"
                        "# HELP meshinfer_generated_tokens_total Tokens generated.\n"
                        "# TYPE meshinfer_generated_tokens_total counter\nmeshinfer_generated_tokens_total %llu\n"
                        "# HELP meshinfer_tokens_per_second Tokens generated per second over the last %d s.\n"
                        "# TYPE meshinfer_tokens_per_second gauge\nmeshinfer_tokens_per_second %.3f\n"
                        "# HELP meshinfer_uptime_seconds Seconds since the server started.\n"
                        "# TYPE meshinfer_uptime_seconds gauge\nmeshinfer_uptime_seconds %.3f\n",
                   (unsigned long long)m->prompt_tokens, (unsigned long long)m->gen_tokens, WINDOW,
                   span > 0 ? toks / span : 0.0, now - m->started);
    pthread_mutex_unlock(&m->mu);
}
