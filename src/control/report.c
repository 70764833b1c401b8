/* The metrics report of a run (see control.h session_metrics_json and
 * session_metrics_table): every rank's counters gathered on rank 0, the
 * placement, predictions against measurements, energy. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/control.h"
#include "meshinfer/runtime.h"

/* The cost model with what this job measured instead of what the plan
 * assumed: each rank's weight-streaming rate and the round trips halved
 * (no margin), at the run's mean context. 0 when not measured (one rank). */
static double calibrated_token_s(const mi_session *ss)
{
    if (ss->size < 2 || ss->stream_rate[0] <= 0)
        return 0;
    int n = ss->size;
    mi_cluster cl = ss->cl;
    cl.dev = mi_malloc((size_t)n * sizeof *cl.dev, "devices");
    memcpy(cl.dev, ss->cl.dev, (size_t)n * sizeof *cl.dev);
    cl.rtt_s = NULL;
    cl.bw = NULL;
    cl.mem_bw = 1.0;
    for (int r = 0; r < n; r++) {
        cl.dev[r].speed = ss->stream_rate[r] > 0 ? ss->stream_rate[r] : ss->stream_rate[0];
        cl.dev[r].calibrated = 0;
    }
    mi_cluster_finish(&cl);
    double *rtt = mi_calloc((size_t)n * n, sizeof(double), "RTT matrix");
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            rtt[a * n + b] = a == b ? 0.0 : a == 0 ? ss->rtt_s[b] : b == 0 ? ss->rtt_s[a]
                                                 : 0.5 * (ss->rtt_s[a] + ss->rtt_s[b]);
    mi_cluster_set_rtt(&cl, rtt, 0.0);
    free(rtt);
    mi_prediction pr;
    mi_predict(&ss->plan, &ss->prog, &cl, ss->memory.pos_hi / 2, &pr);
    free(cl.rtt_s);
    free(cl.dev);
    return pr.token_s;
}

/* HeadSplit's energy and energy-delay product of the run (run_s seconds):
 * every device draws its idle power throughout and its active power (at its
 * DVFS level) while it computes, by its measured compute seconds; beside the
 * cost model's prediction per token. Power from the cluster file, or seed
 * 000's Raspberry Pi 4 figures, said which. */
static void energy_json(const mi_session *ss, const mi_rank_metrics *all, FILE *f)
{
    int given = 1;
    double total = 0;
    fprintf(f, "\"energy\": {\"per_rank_j\": [");
    for (int r = 0; r < ss->size; r++) {
        const mi_device *d = &ss->cl.dev[r];
        double busy = all[r].attn + all[r].proj + all[r].ffn + all[r].logits;
        double j = d->idle_w * ss->power.run_s + (mi_device_power_w(d, ss->power.freq[r]) - d->idle_w) * busy;
        given &= d->power_given;
        total += j;
        fprintf(f, "%s%.4f", r ? ", " : "", j);
    }
    fprintf(f, "], \"freq\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->power.freq[r]);
    double pj = mi_predict_energy(&ss->plan, &ss->prog, &ss->cl, ss->power.freq, ss->memory.pos_hi / 2, NULL, NULL);
    fprintf(f, "], \"joules\": %.4f, \"seconds\": %.4f, \"edp_js\": %.5f, \"j_per_token\": %.5f, "
               "\"predicted_j_per_token\": %.5f, \"power\": \"%s\"}, ", total, ss->power.run_s, total * ss->power.run_s,
            ss->power.run_tokens > 0 ? total / ss->power.run_tokens : 0.0, pj,
            given ? "cluster file" : "defaults: HeadSplit's Raspberry Pi 4, 3.8 W idle, 4.9 W active");
}

/* s as a JSON string (paths in planned_with may hold quotes or backslashes). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Bytes per token measured: every rank's bytes sent for decode rows over
 * its decode rows, summed (runtime.h decode_bytes_sent); what the plan's
 * mi_programs_bytes(decode) predicts. 0 when no decode row ran. */
static double measured_bytes_per_token(const mi_session *ss, const mi_rank_metrics *all, long *passes)
{
    double b = 0;
    *passes = all[0].decode_forwards;
    for (int r = 0; r < ss->size; r++)
        if (all[r].decode_rows > 0)
            b += all[r].decode_bytes_sent / (double)all[r].decode_rows;
    return b;
}

void session_metrics_json(mi_session *ss, FILE *f)
{
    mi_rank_metrics *all = ss->rank == 0 ? mi_calloc((size_t)ss->size, sizeof *all, "metrics") : NULL;
    mi_runtime_metrics(ss->rt, all);
    if (ss->rank != 0)
        return;
    char dts[160];
    fprintf(f, "\"scaling\": {\"tpot_target_ms\": %.3f, \"decisions\": [", ss->scaling.tpot_target_s * 1e3);
    for (int i = 0; i < ss->scaling.n_decisions; i++) {
        const session_decision *d = &ss->scaling.decisions[i];
        fprintf(f, "%s{\"token\": %d, \"kind\": \"%s\", \"restore\": %s, \"trigger\": \"%s\", "
                   "\"wire_from\": \"%s\", \"wire_to\": \"%s\", \"rank\": %d, \"slowdown\": %.3f, \"change\": \"%s\", "
                   "\"predicted_ms\": %.3f, \"poll_ms\": %.3f, \"decide_us\": %.1f, \"apply_ms\": %.3f}",
                i ? ", " : "", d->token, d->weights ? "weights" : "wire", d->restore ? "true" : "false", d->trigger,
                mi_dtype_name(d->wire_from), mi_dtype_name(d->wire_to), d->rank, d->slowdown, d->change,
                d->predicted_ms, d->poll_ms, d->decide_us, d->apply_ms);
    }
    fprintf(f, "], \"token_ms\": [");
    for (int i = 0; i < ss->scaling.n_tokens && i < SESSION_MAX_TOKENS; i++)
        fprintf(f, i ? ", %.3f" : "%.3f", ss->scaling.token_ms[i]);
    fprintf(f, "]}, ");
    fprintf(f, "\"weights\": \"%s\", \"plan\": {\"planner\": \"%s\", \"controller_works\": %s, "
               "\"wire_dtype\": \"%s\", \"plan_ms\": %.3f, \"predicted_token_ms\": %.4f, "
               "\"predicted_bytes_per_token\": %.0f, \"planned_for\": ",
            mi_config_dtype_summary(&ss->cfg, dts, sizeof dts), mi_planner_name(ss->plan.planner),
            ss->plan.controller_works ? "true" : "false", mi_dtype_name(ss->plan.wire), ss->plan_ms,
            ss->pred.token_s * 1e3, ss->pred.bytes_per_token);
    json_string(f, ss->planned_with);
    /* the placement that ran last (after any re-placement), in plan --json's shape */
    fprintf(f, ", \"placement\": ");
    if (mi_plan_placement_json(&ss->plan, f))
        mi_fatal("cannot write the placement as JSON");
    if (ss->phases.has_prefill_plan) {
        fprintf(f, ", \"prefill_placement\": ");
        if (mi_plan_placement_json(&ss->phases.plan_prefill, f))
            mi_fatal("cannot write the placement as JSON");
    }
    long passes = 0;
    double bpt = measured_bytes_per_token(ss, all, &passes);
    fprintf(f, "}, \"bytes_per_token\": %.0f, \"decode_passes\": %ld, ", bpt, passes);
    fprintf(f, "\"calibrated_token_ms\": %.4f, \"critical_path_delays\": %.2f, \"stream_gbs\": [",
            calibrated_token_s(ss) * 1e3, mi_predict_delays(&ss->plan, &ss->prog));
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->stream_rate[r] / 1e9);
    fprintf(f, "], \"stream_cpu_gbs\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->stream_rate_cpu[r] / 1e9);
    fprintf(f, "], \"cpu_quota\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.4f", r ? ", " : "", ss->size > 1 ? ss->cpu_quota[2 * r] : 0);
    fprintf(f, "], \"cpu_period_ms\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->size > 1 ? ss->cpu_quota[2 * r + 1] * 1e3 : 0);
    fprintf(f, "], ");
    if (ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        fprintf(f, "\"somegather\": {\"prune_mode\": \"%s\", \"prune\": {",
                ss->plan.prune_mode == MI_PRUNE_MAGNITUDE ? "magnitude" : "aware");
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            fprintf(f, "%s\"%s\": %.4f", x ? ", " : "", mi_xch_name(x), ss->plan.prune[x]);
        /* what the send lists that ran leave out, whatever ratio a (hand-edited) plan file states */
        fprintf(f, "}, \"unsent_fraction\": {");
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            fprintf(f, "%s\"%s\": %.4f", x ? ", " : "", mi_xch_name(x), session_unsent_fraction(&ss->plan, x));
        fprintf(f, "}, \"loss_mode\": \"%s\", \"loss\": %.6f, \"loss_seed\": %llu}, ",
                mi_loss_mode_name(ss->loss_mode), ss->loss, (unsigned long long)ss->loss_seed);
    }
    if (ss->power.run_s > 0)
        energy_json(ss, all, f);
    /* each transition is decided by one rank (its FFN rank): sum over ranks */
    fprintf(f, "\"rtt_ms\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.4f", r ? ", " : "", ss->rtt_s[r] * 1e3);
    fprintf(f, "], \"kv_positions\": %d, \"replans_total\": %d, \"replans_moved\": %d, \"replans\": [",
            ss->plan.kv_positions, ss->memory.n_replans, ss->memory.n_replans_moved);
    for (int i = 0; i < ss->memory.n_replans && i < SESSION_MAX_REPLANS; i++) {
        const session_replan *e = &ss->memory.replans[i];
        fprintf(f, "%s{\"position\": %d, \"rank\": %d, \"budget_fraction\": %.4f, \"kv_positions\": %d, "
                   "\"plan_ms\": %.3f, \"moved\": %s, \"kv_heads_moved\": %d, \"move_ms\": %.3f}",
                i ? ", " : "", e->position, e->rank, e->fraction, e->kv_positions, e->plan_ms,
                e->moved ? "true" : "false", e->kv_heads_moved, e->seconds * 1e3);
    }
    fprintf(f, "], \"speculation\": [");
    int first = 1;
    for (int l = 0; l < ss->cfg.n_layers - 1 && l < MI_SPEC_MAX_LAYERS; l++) {
        if (!ss->plan.layers[l].speculate)
            continue;
        double dec = 0, acc = 0, ratio = 0;
        for (int r = 0; r < ss->size; r++) {
            dec += all[r].spec_decided[l];
            acc += all[r].spec_accepted[l];
            ratio += all[r].spec_ratio_sum[l];
        }
        fprintf(f, "%s{\"from_layer\": %d, \"decided\": %.0f, \"accepted\": %.0f, \"acceptance\": %.4f, "
                   "\"mean_ratio\": %.5f}", first ? "" : ", ", l, dec, acc, dec > 0 ? acc / dec : 0.0,
                dec > 0 ? ratio / dec : 0.0);
        first = 0;
    }
    fprintf(f, "], \"ranks\": [");
    for (int r = 0; r < ss->size; r++) {
        const mi_rank_metrics *m = &all[r];
        double fw = m->forwards > 0 ? (double)m->forwards : 1.0;
        double dp = m->decode_rows > 0 ? (double)m->decode_rows : 1.0;
        fprintf(f, "%s{\"rank\": %d, \"weight_bytes\": %.0f, \"kv_cache_bytes\": %.0f, \"rss_growth_bytes\": %.0f, "
                   "\"predicted_weight_bytes\": %zu, \"forwards\": %ld, \"positions\": %ld, \"decode_forwards\": %ld, \"decode_rows\": %ld, "
                   "\"bytes_sent_per_token\": %.1f, \"bytes_recv_per_token\": %.1f, "
                   "\"bytes_sent\": %.0f, \"bytes_recv\": %.0f, \"bytes_sent_per_forward\": %.1f, "
                   "\"bytes_recv_per_forward\": %.1f, \"seconds\": {\"attention\": %.6f, \"projection\": %.6f, "
                   "\"ffn\": %.6f, \"logits\": %.6f, \"communication\": %.6f, \"idle\": %.6f, "
                   "\"replan\": %.6f, \"emulated_slowdown\": %.6f}, \"kv_bytes_moved_sent\": %.0f, \"kv_bytes_moved_recv\": %.0f, "
                   "\"messages_received\": %.0f, \"messages_lost\": %.0f",
                r ? ", " : "", r, m->weight_bytes, m->kv_bytes, m->rss_weights, ss->pred.weight_bytes[r],
                m->forwards, m->positions, m->decode_forwards, m->decode_rows, m->decode_bytes_sent / dp, m->decode_bytes_recv / dp,
                m->bytes_sent, m->bytes_recv, m->bytes_sent / fw, m->bytes_recv / fw,
                m->attn, m->proj, m->ffn, m->logits, m->comm, m->idle, m->replan_s, m->slowdown, m->moved_bytes_sent,
                m->moved_bytes_recv, m->msgs_recv, m->msgs_lost);
        if (mi_config_is_moe(&ss->cfg)) { /* its experts' load: (position, expert) selections they ran */
            double sum = 0;
            for (int l = 0; l < ss->cfg.n_layers && l < MI_SPEC_MAX_LAYERS; l++)
                sum += m->expert_load[l];
            fprintf(f, ", \"expert_load\": %.0f, \"expert_load_per_layer\": [", sum);
            for (int l = 0; l < ss->cfg.n_layers && l < MI_SPEC_MAX_LAYERS; l++)
                fprintf(f, "%s%.0f", l ? ", " : "", m->expert_load[l]);
            fprintf(f, "]");
        }
        fprintf(f, "}");
    }
    fprintf(f, "]");
    free(all);
}

void session_metrics_table(mi_session *ss)
{
    mi_rank_metrics *all = ss->rank == 0 ? mi_calloc((size_t)ss->size, sizeof *all, "metrics") : NULL;
    mi_runtime_metrics(ss->rt, all);
    if (ss->rank != 0)
        return;
    char dts[160];
    fprintf(stderr, "plan %s: predicted %.3f ms/token, %.0f bytes moved per token (planned in %.3f ms); weights %s, "
                    "messages %s, kernels %s\n", mi_planner_name(ss->plan.planner), ss->pred.token_s * 1e3,
            ss->pred.bytes_per_token, ss->plan_ms, mi_config_dtype_summary(&ss->cfg, dts, sizeof dts),
            mi_dtype_name(ss->plan.wire), mi_kernels_name());
    fprintf(stderr, "placement planned for %s\n", ss->planned_with);
    long passes = 0;
    double bpt = measured_bytes_per_token(ss, all, &passes);
    if (ss->size > 1)
        fprintf(stderr, "bytes per token (one decode pass, all ranks' payload): measured %.0f over %ld decode passes, "
                        "predicted %.0f; sent_B/fwd also averages the prefill passes, which move each prompt "
                        "position's bytes\n", bpt, passes, ss->pred.bytes_per_token);
    if (ss->size > 1)
        fprintf(stderr, "calibrated prediction %.3f ms/token (measured streaming rates and round trips, no margin; "
                        "it holds where every rank has a core of its own, as on the testbeds); %.0f link delays on a token's critical path\n", calibrated_token_s(ss) * 1e3,
                mi_predict_delays(&ss->plan, &ss->prog));
    double dec = 0, acc = 0;
    int n_spec = 0;
    for (int l = 0; l < ss->cfg.n_layers - 1 && l < MI_SPEC_MAX_LAYERS; l++)
        if (ss->plan.layers[l].speculate) {
            n_spec++;
            for (int r = 0; r < ss->size; r++) {
                dec += all[r].spec_decided[l];
                acc += all[r].spec_accepted[l];
            }
        }
    if (n_spec)
        fprintf(stderr, "speculation: %d transitions, %.0f of %.0f tests accepted (%.1f%%)\n", n_spec, acc, dec,
                dec > 0 ? 100.0 * acc / dec : 0.0);
    if (ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        double got = 0, lost = 0;
        for (int r = 0; r < ss->size; r++) {
            got += all[r].msgs_recv;
            lost += all[r].msgs_lost;
        }
        fprintf(stderr, "somegather: pruning %s attn_in %.2f heads %.2f ffn_in %.2f hidden %.2f; message loss %s %.3f "
                        "(seed %llu): %.0f of %.0f messages lost\n",
                ss->plan.prune_mode == MI_PRUNE_MAGNITUDE ? "magnitude" : "aware", ss->plan.prune[0],
                ss->plan.prune[1], ss->plan.prune[2], ss->plan.prune[3], mi_loss_mode_name(ss->loss_mode), ss->loss,
                (unsigned long long)ss->loss_seed, lost, got);
    }
    fprintf(stderr, "rank  weights_MB  kv_MB  sent_B/fwd  recv_B/fwd   attn_s   proj_s    ffn_s  logits_s   comm_s   idle_s  "
                    "sent_B/tok\n");
    for (int r = 0; r < ss->size; r++) {
        const mi_rank_metrics *m = &all[r];
        double fw = m->forwards > 0 ? (double)m->forwards : 1.0;
        double dp = m->decode_rows > 0 ? (double)m->decode_rows : 1.0;
        fprintf(stderr, "%4d  %10.2f  %5.1f  %10.0f  %10.0f  %7.4f  %7.4f  %7.4f  %8.4f  %7.4f  %7.4f  %10.0f\n", r,
                m->weight_bytes / 1e6, m->kv_bytes / 1e6, m->bytes_sent / fw, m->bytes_recv / fw, m->attn, m->proj,
                m->ffn, m->logits, m->comm, m->idle, m->decode_bytes_sent / dp);
    }
    free(all);
}
