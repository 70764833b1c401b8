/* The runtime's life cycle and the token loop's commands (see runtime.h):
 * rank 0 drives forward passes, the other ranks serve them. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"

static const char *loss_names[] = {"link", "receiver", "sender"};

const char *mi_loss_mode_name(int m)
{
    return m >= 0 && m < 3 ? loss_names[m] : "?";
}

int mi_loss_mode_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, loss_names[i]))
            return i;
    return -1;
}

/* A trace puts every rank's events on rank 0's time line. Leaving the
 * barrier is skewed by milliseconds when ranks share cores, so each worker
 * measures its clock against rank 0's in one round trip (NTP's estimate:
 * rank 0's clock read half-way through it) and starts its trace at rank 0's
 * origin as its own clock reads it. Collective. */
static void trace_origin(mi_runtime *rt)
{
    double origin0 = rt->t_origin;
    MPI_Bcast(&origin0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    for (int r = 1; r < rt->size; r++) {
        double a, tw, off;
        if (rt->rank == 0) {
            a = mi_now();
            MPI_Send(&a, 1, MPI_DOUBLE, r, TAG_CLOCK, MPI_COMM_WORLD);
            MPI_Recv(&tw, 1, MPI_DOUBLE, r, TAG_CLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            off = tw - 0.5 * (a + mi_now());
            MPI_Send(&off, 1, MPI_DOUBLE, r, TAG_CLOCK, MPI_COMM_WORLD);
        } else if (rt->rank == r) {
            MPI_Recv(&a, 1, MPI_DOUBLE, 0, TAG_CLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            tw = mi_now();
            MPI_Send(&tw, 1, MPI_DOUBLE, 0, TAG_CLOCK, MPI_COMM_WORLD);
            MPI_Recv(&off, 1, MPI_DOUBLE, 0, TAG_CLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            rt->t_origin = origin0 + off;
        }
    }
}

mi_runtime *mi_runtime_create(const mi_plan *plan, const mi_programs *prog, const mi_runtime_options *opt)
{
    mi_runtime *rt = mi_calloc(1, sizeof *rt, "runtime");
    rt->rank = mi_world_rank();
    rt->size = mi_world_size();
    if (plan->n_ranks != rt->size)
        mi_fatal("plan is for %d ranks but the job has %d", plan->n_ranks, rt->size);
    rt->opt = *opt;
    rt_set_spin(opt->spin_s > 0 ? opt->spin_s : -1);
    rt->trace = opt->trace;
    rt->tolerance = opt->tolerance;
    memcpy(rt->stored_dtype, plan->cfg.dtype, sizeof rt->stored_dtype);
    rt_setup_shard(rt, plan, prog);
    rt_setup_rest(rt);
    if (rt->size > 1)
        MPI_Barrier(MPI_COMM_WORLD);
    rt->t_origin = mi_now();
    rt->idle_since = rt->t_origin;
    if (rt->trace && rt->size > 1)
        trace_origin(rt);
    return rt;
}

void mi_runtime_free(mi_runtime *rt)
{
    if (!rt)
        return;
    rt_teardown(rt);
    free(rt->ev);
    free(rt);
}

/* ------------------------------------------------------------ commands */

/* A command goes from rank 0 to every worker directly, with the tokens when
 * every rank embeds: one message, one link latency to every rank (a
 * broadcast tree would take log2(ranks) hops at the start of every token). */
static void send_words(mi_runtime *rt, int n)
{
    MPI_Request req[MI_MAX_RANKS];
    for (int r = 1; r < rt->size; r++)
        MPI_Isend(rt->cmd, n, MPI_INT, r, TAG_CMD, MPI_COMM_WORLD, &req[r - 1]);
    rt_waitall(rt->size - 1, req);
}

void rt_send_cmd(mi_runtime *rt, int cmd, int T, int pos0, int T_logits, const int *tokens)
{
    if (rt->size == 1)
        return;
    int *m = rt->cmd, n = 4;
    m[0] = cmd, m[1] = T, m[2] = pos0, m[3] = T_logits;
    if ((cmd == CMD_FORWARD || cmd == CMD_DECODE) && rt->prog.embed_all) {
        memcpy(m + 4, tokens, (size_t)T * (size_t)rt->in_words * sizeof(int));
        n += T * rt->in_words;
    }
    send_words(rt, n);
}

void mi_runtime_reset_metrics(mi_runtime *rt)
{
    rt_send_cmd(rt, CMD_RESET_METRICS, 0, 0, 0, NULL);
    rt_reset_metrics_local(rt);
}

float *mi_runtime_forward(mi_runtime *rt, const int *tokens, int T, int pos0, int flags)
{
    const mi_config *c = &rt->plan.cfg;
    if (T < 1 || T > rt->max_T || pos0 < 0 || pos0 + T > c->seq_len)
        mi_fatal("forward of %d positions at %d is outside the context (%d) or chunk (%d)", T, pos0, c->seq_len,
                 rt->max_T);
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    /* the caller says what the rows are: a prompt's last chunk may have one */
    int decode = (flags & MI_FORWARD_DECODE) != 0;
    fwd f = {T, pos0, flags & MI_FORWARD_ALL_LOGITS ? T : 1, NULL, NULL, decode ? T : 0};
    rt_send_cmd(rt, decode ? CMD_DECODE : CMD_FORWARD, T, pos0, f.T_logits, tokens);
    memcpy(rt->tokens, tokens, (size_t)T * sizeof(int));
    rt_run_program(rt, &f);
    rt->idle_since = mi_now();
    rt_record(rt, TRACE_FORWARD, -1, t0, rt->idle_since);
    return rt->buf[MI_BUF_LOGITS];
}

int mi_runtime_can_pipeline(const mi_runtime *rt)
{
    return mi_programs_can_pipeline(&rt->prog);
}

/* The command of a pass over rows (CMD_FORWARD_AT) to every worker: its
 * third word, a position in CMD_FORWARD, is the count of decode rows here. */
static void send_rows_cmd(mi_runtime *rt, const int *tokens, int T, const int *pos, const int *slot, int T_logits,
                          int n_decode)
{
    int *m = rt->cmd, n = 4;
    m[0] = CMD_FORWARD_AT, m[1] = T, m[2] = n_decode, m[3] = T_logits;
    if (rt->prog.embed_all) {
        memcpy(m + 4, tokens, (size_t)T * sizeof(int));
        n += T;
    }
    memcpy(m + n, pos, (size_t)T * sizeof(int));
    memcpy(m + n + T, slot, (size_t)T * sizeof(int));
    if (rt->size > 1)
        send_words(rt, n + 2 * T);
}

/* n_micro micro-batches of the rows, pipelined (partition.h mi_program_chain_split): rank 0
 * runs each one's ops up to its first receive, sends deferred, then each
 * one's rest, collecting the logits. Every row is computed as in one pass. */
static float *forward_micro(mi_runtime *rt, const int *tokens, int T, const int *pos, const int *slot, int n_decode,
                            int n_micro)
{
    int V = rt->width[MI_BUF_LOGITS];
    if (!rt->logits_all)
        rt->logits_all = mi_malloc((size_t)rt->max_T * (size_t)V * sizeof(float), "logits");
    int at[MI_MAX_RANKS + 1], split[MI_MAX_RANKS];
    for (int k = 0; k <= n_micro; k++)
        at[k] = (int)((long)T * k / n_micro);
    double sent0 = rt->m.bytes_sent, recv0 = rt->m.bytes_recv;
    for (int k = 0; k < n_micro; k++) {
        int a = at[k], Tk = at[k + 1] - a;
        /* micro-batch k's decode rows: those of [a, a + Tk) among the last n_decode */
        int dk = a + Tk - (T - n_decode);
        dk = dk < 0 ? 0 : dk > Tk ? Tk : dk;
        fwd f = {Tk, 0, Tk, pos + a, slot + a, dk};
        split[k] = mi_program_chain_split(&rt->prog, rt_program_of(rt, &f));
        send_rows_cmd(rt, tokens + a, Tk, pos + a, slot + a, Tk, dk);
        memcpy(rt->tokens, tokens + a, (size_t)Tk * sizeof(int));
        rt->defer = 1;
        rt_run_ops(rt, &f, 0, split[k]);
        rt->defer = 0;
    }
    for (int k = 0; k < n_micro; k++) {
        int a = at[k], Tk = at[k + 1] - a;
        fwd f = {Tk, 0, Tk, pos + a, slot + a, 0}; /* (its counters: rt_pass_done below, for all rows) */
        rt_run_ops(rt, &f, split[k], rt_program_of(rt, &f)->n_ops);
        memcpy(rt->logits_all + (size_t)a * V, rt->buf[MI_BUF_LOGITS], (size_t)Tk * V * sizeof(float));
    }
    rt->m.comm += rt_complete_deferred(rt);
    fwd all = {T, 0, T, pos, slot, n_decode};
    rt_pass_done(rt, &all, sent0, recv0);
    rt->m.forwards += n_micro - 1; /* each micro-batch is a pass on the workers */
    rt->m.decode_forwards += n_decode == T ? n_micro - 1 : 0;
    return rt->logits_all;
}

float *mi_runtime_forward_at(mi_runtime *rt, const int *tokens, int T, const int *pos, const int *slot,
                             int T_logits, int n_decode, int n_micro)
{
    const mi_config *c = &rt->plan.cfg;
    if (T < 1 || T > rt->max_T || T_logits < 1 || T_logits > T || c->family == MI_FAMILY_PATCHTST)
        mi_fatal("forward of %d rows (%d with logits) does not fit the chunk (%d)", T, T_logits, rt->max_T);
    if (n_decode < 0 || n_decode > T_logits)
        mi_fatal("forward of %d rows: %d decode rows, not 0 to the %d with logits", T, n_decode, T_logits);
    for (int t = 0; t < T; t++)
        if (pos[t] < 0 || pos[t] >= c->seq_len || slot[t] < 0 || slot[t] >= mi_config_kv_slots(c))
            mi_fatal("forward row %d at position %d of KV slot %d is outside the context (%d) or the slots (%d)", t,
                     pos[t], slot[t], c->seq_len, mi_config_kv_slots(c));
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    float *logits;
    if (n_micro > T)
        n_micro = T;
    if (n_micro > MI_MAX_RANKS)
        n_micro = MI_MAX_RANKS;
    if (n_micro > 1 && T_logits == T && mi_runtime_can_pipeline(rt)) {
        logits = forward_micro(rt, tokens, T, pos, slot, n_decode, n_micro);
    } else {
        /* the command carries the positions and slots every rank's attention needs */
        send_rows_cmd(rt, tokens, T, pos, slot, T_logits, n_decode);
        fwd f = {T, 0, T_logits, pos, slot, n_decode};
        memcpy(rt->tokens, tokens, (size_t)T * sizeof(int));
        rt_run_program(rt, &f);
        logits = rt->buf[MI_BUF_LOGITS];
    }
    rt->idle_since = mi_now();
    rt_record(rt, TRACE_FORWARD, -1, t0, rt->idle_since);
    return logits;
}

float *mi_runtime_forecast(mi_runtime *rt, const float *patches)
{
    const mi_config *c = &rt->plan.cfg;
    int T = c->seq_len;
    if (c->family != MI_FAMILY_PATCHTST || rt->max_T < T)
        mi_fatal("forecast: needs a time-series model and a chunk of all %d patches (have %d)", T, rt->max_T);
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    fwd f = {T, 0, 1, NULL, NULL, 0};
    /* the patches travel as the command's words, bit for bit */
    memcpy(rt->tokens, patches, (size_t)T * (size_t)c->patch_len * sizeof(float));
    rt_send_cmd(rt, CMD_FORWARD, T, 0, 1, rt->tokens);
    rt_run_program(rt, &f);
    rt->idle_since = mi_now();
    rt_record(rt, TRACE_FORWARD, -1, t0, rt->idle_since);
    return rt->buf[MI_BUF_LOGITS];
}

float *mi_runtime_prefill(mi_runtime *rt, const int *tokens, int n, int pos0)
{
    float *logits = NULL;
    for (int i = 0; i < n; i += rt->max_T) {
        int T = n - i < rt->max_T ? n - i : rt->max_T;
        logits = mi_runtime_forward(rt, tokens + i, T, pos0 + i, 0);
    }
    return logits;
}

void mi_runtime_reset(mi_runtime *rt)
{
    rt_send_cmd(rt, CMD_RESET, 0, 0, 0, NULL);
    mi_model_reset(&rt->model);
}

void mi_runtime_stop(mi_runtime *rt)
{
    rt_send_cmd(rt, CMD_STOP, 0, 0, 0, NULL);
}

void mi_runtime_replan(mi_runtime *rt, const mi_plan *plan, const mi_programs *prog, int n_pos)
{
    if (n_pos < 0 || n_pos > rt->plan.cfg.seq_len)
        mi_fatal("re-placement with %d cached positions is outside the context (%d)", n_pos, rt->plan.cfg.seq_len);
    size_t n;
    int *buf = mi_plan_serialize(plan, &n);
    rt_send_cmd(rt, CMD_REPLAN, n_pos, (int)n, 0, NULL);
    if (rt->size > 1)
        MPI_Bcast(buf, (int)n, MPI_INT, 0, MPI_COMM_WORLD);
    free(buf);
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    rt_replan_local(rt, plan, prog, n_pos);
    rt->idle_since = mi_now();
}

static double compute_seconds(const mi_runtime *rt)
{
    return rt->m.attn + rt->m.proj + rt->m.ffn + rt->m.logits;
}

void mi_runtime_poll_compute(mi_runtime *rt, double *compute_s)
{
    double mine = compute_seconds(rt);
    if (rt->size == 1) {
        compute_s[0] = mine;
        return;
    }
    rt_send_cmd(rt, CMD_POLL, 0, 0, 0, NULL);
    MPI_Gather(&mine, 1, MPI_DOUBLE, compute_s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
}

void mi_runtime_poll_rss(mi_runtime *rt, double *rss_bytes)
{
    double mine = (double)mi_rss_bytes();
    if (rt->size == 1) {
        rss_bytes[0] = mine;
        return;
    }
    rt_send_cmd(rt, CMD_POLL_RSS, 0, 0, 0, NULL);
    MPI_Gather(&mine, 1, MPI_DOUBLE, rss_bytes, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
}

void mi_runtime_serve(mi_runtime *rt)
{
    for (;;) {
        int *hdr = rt->cmd;
        double t0 = mi_now();
        MPI_Request rq;
        MPI_Irecv(hdr, 4 + rt->max_T * (rt->in_words + 2), MPI_INT, 0, TAG_CMD, MPI_COMM_WORLD, &rq);
        rt_waitall(1, &rq);
        double t1 = mi_now();
        rt->m.idle += t1 - t0;
        rt_record(rt, TRACE_IDLE, -1, t0, t1);
        if (hdr[0] == CMD_STOP)
            break;
        if (hdr[0] == CMD_RESET) {
            mi_model_reset(&rt->model);
        } else if (hdr[0] == CMD_POLL) {
            double mine = compute_seconds(rt);
            MPI_Gather(&mine, 1, MPI_DOUBLE, NULL, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        } else if (hdr[0] == CMD_POLL_RSS) {
            double mine = (double)mi_rss_bytes();
            MPI_Gather(&mine, 1, MPI_DOUBLE, NULL, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        } else if (hdr[0] == CMD_RESET_METRICS) {
            rt_reset_metrics_local(rt);
        } else if (hdr[0] == CMD_FORWARD || hdr[0] == CMD_DECODE) {
            fwd f = {hdr[1], hdr[2], hdr[3], NULL, NULL, hdr[0] == CMD_DECODE ? hdr[1] : 0};
            if (rt->prog.embed_all)
                memcpy(rt->tokens, hdr + 4, (size_t)f.T * (size_t)rt->in_words * sizeof(int));
            rt_run_program(rt, &f);
        } else if (hdr[0] == CMD_FORWARD_AT) {
            int T = hdr[1], n = 4;
            if (rt->prog.embed_all) {
                memcpy(rt->tokens, hdr + 4, (size_t)T * sizeof(int));
                n += T;
            }
            fwd f = {T, 0, hdr[3], hdr + n, hdr + n + T, hdr[2]};
            rt_run_program(rt, &f);
        } else if (hdr[0] == CMD_REPLAN) {
            int *buf = mi_malloc((size_t)hdr[2] * sizeof(int), "plan buffer");
            MPI_Bcast(buf, hdr[2], MPI_INT, 0, MPI_COMM_WORLD);
            mi_plan np;
            char err[MI_ERRLEN];
            if (mi_plan_deserialize(buf, (size_t)hdr[2], &rt->plan.cfg, &np, err))
                mi_fatal("re-placement: %s", err);
            free(buf);
            rt_replan_local(rt, &np, NULL, hdr[1]);
            mi_plan_free(&np);
        }
    }
}
