/* Every scheme planned and predicted for one cluster and model: the table of `meshinfer plan --planner all` and the choice of
 * `--planner auto`. One objective for all: the predicted time of a request,
 * TTFT of its prompt plus TPOT times its decode steps (Voltron's two QoS
 * figures in the one number a user waits for). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/partition.h"

/* The schemes compared: random is a strawman and roundrobin a baseline of
 * HeadSplit's; neither is a choice anyone would want auto to make. */
static const mi_planner compared[] = {MI_PLANNER_LAYERWISE, MI_PLANNER_GREEDY, MI_PLANNER_TP,
                                      MI_PLANNER_SOMEGATHER, MI_PLANNER_HYBRID};

void mi_request_defaults(int seq_len, int *n_prompt, int *n_steps)
{
    if (*n_prompt <= 0)
        *n_prompt = seq_len >= 160 ? 32 : seq_len / 4 > 0 ? seq_len / 4 : 1;
    if (*n_prompt >= seq_len)
        *n_prompt = seq_len > 1 ? seq_len - 1 : 1;
    int room = seq_len - *n_prompt > 0 ? seq_len - *n_prompt : 1;
    if (*n_steps <= 0)
        *n_steps = room < 128 ? room : 128;
    if (*n_steps > room)
        *n_steps = room;
}

int mi_plan_compare(const mi_config *c, const mi_cluster *cl, const mi_plan_options *base, int n_prompt,
                    int n_steps, int chunk, mi_compare_row *rows, int *n_rows)
{
    int best = -1, n = 0;
    for (size_t i = 0; i < sizeof compared / sizeof compared[0]; i++) {
        mi_compare_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        r->planner = compared[i];
        mi_plan_options po = *base;
        po.planner = compared[i];
        po.controller_works = -1;
        po.speculate = 0;
        mi_plan dec, pre;
        mi_programs pd, pp;
        double t0 = mi_now();
        if (mi_plan_make(c, cl, &po, &dec, r->why))
            continue;
        int two = 0;
        if (po.planner == MI_PLANNER_HYBRID) {
            po.prefill = 1;
            po.prefill_T = chunk;
            char perr[MI_ERRLEN];
            /* the prefill packing can fail where the decode one fits: one placement serves both */
            if (!mi_plan_make(c, cl, &po, &pre, perr)) {
                two = !mi_plan_same_placement(&dec, &pre);
                if (!two)
                    mi_plan_free(&pre);
            }
        }
        r->plan_ms = (mi_now() - t0) * 1e3;
        if (mi_programs_compile(&dec, &pd, r->why)) {
            mi_plan_free(&dec);
            if (two)
                mi_plan_free(&pre);
            continue;
        }
        if (two && mi_programs_compile(&pre, &pp, r->why)) {
            mi_programs_free(&pd);
            mi_plan_free(&dec);
            mi_plan_free(&pre);
            continue;
        }
        double switch_s = 0;
        if (two && !mi_plan_phases_pay(&dec, &pd, &pre, &pp, cl, n_prompt, chunk, NULL, &switch_s)) {
            /* the re-placements would cost more than the prompt gains: one placement */
            mi_programs_free(&pp);
            mi_plan_free(&pre);
            two = 0;
        }
        r->fits = 1;
        r->phases_differ = two;
        r->prune = po.planner == MI_PLANNER_SOMEGATHER ? po.prune : 0;
        r->ttft_s = mi_predict_ttft(two ? &pre : &dec, two ? &pp : &pd, cl, n_prompt, chunk);
        r->tpot_s = mi_predict_tpot(&dec, &pd, cl, n_prompt, n_steps);
        r->total_s = r->ttft_s + (double)n_steps * r->tpot_s + (two ? switch_s : 0);
        r->bytes_per_token = mi_programs_bytes(&pd, MI_PHASE_DECODE, NULL, NULL);
        if (best < 0 || r->total_s < rows[best].total_s)
            best = n - 1;
        mi_programs_free(&pd);
        mi_plan_free(&dec);
        if (two) {
            mi_programs_free(&pp);
            mi_plan_free(&pre);
        }
    }
    *n_rows = n;
    return best;
}

int mi_plan_phases_pay(const mi_plan *dec, const mi_programs *pd, const mi_plan *pre, const mi_programs *pp,
                       const mi_cluster *cl, int n_prompt, int chunk, double *gain_s, double *switch_s)
{
    double g = mi_predict_ttft(dec, pd, cl, n_prompt, chunk) - mi_predict_ttft(pre, pp, cl, n_prompt, chunk);
    double s = mi_plan_switch_s(pre, dec, cl, n_prompt) + mi_plan_switch_s(dec, pre, cl, 0);
    if (gain_s)
        *gain_s = g;
    if (switch_s)
        *switch_s = s;
    return g > s;
}
