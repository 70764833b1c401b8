/* CUnit tests of the simulator's device model (part of test_simulate): a
 * CFS quota's periods and waits (a 3 ms burst at 40% of 5 ms ends at 6 ms),
 * a quota'd device's passes against the cost model, a message's CPU, a
 * re-placement's rebuild of communicators and windows, and pipelined
 * micro-batches. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "sim_fixtures.h"

#include <CUnit/CUnit.h>

#include <stdio.h>
#include <string.h>

/* A CFS quota: full speed until quota * period is used in the period, then
 * the next period (its quota whole, nothing carried over). */
void test_cfs_quota(void)
{
    const double q = 0.4, P = 5e-3; /* the testbed's: 2 ms of CPU per 5 ms */
    long k = -1;
    double used = 0;
    /* 3 ms from a period's start: 2 ms, throttled until 5 ms, the last 1 ms */
    NEAR(mi_sim_cfs_run(0, 3e-3, q, P, &k, &used), 6e-3, 1e-12);
    NEAR(used, 1e-3, 1e-9);
    k = -1;
    NEAR(mi_sim_cfs_run(1e-3, 3e-3, q, P, &k, &used), 6e-3, 1e-12); /* 1-3 ms, 5-6 ms */
    k = -1;
    NEAR(mi_sim_cfs_run(4e-3, 3e-3, q, P, &k, &used), 7e-3, 1e-12); /* 4-5 ms: the period ends; 5-7 ms */
    /* what a period has used stays used: 1 ms at 0, then 2 ms at 2 ms run 2-3 and 5-6 ms */
    k = -1;
    NEAR(mi_sim_cfs_run(0, 1e-3, q, P, &k, &used), 1e-3, 1e-12);
    NEAR(mi_sim_cfs_run(2e-3, 2e-3, q, P, &k, &used), 6e-3, 1e-12);
    /* unused quota does not carry over: idle through period 1, then 4 ms from 10 ms ends at 17 ms */
    NEAR(mi_sim_cfs_run(10e-3, 4e-3, q, P, &k, &used), 17e-3, 1e-12);
    /* 20 ms of CPU: 10 periods' quota, ending 2 ms into the tenth after the start (t = 45 + 2 ms) */
    k = -1;
    NEAR(mi_sim_cfs_run(0, 20e-3, q, P, &k, &used), 47e-3, 1e-12);
    NEAR(mi_sim_cfs_run(3e-3, 1e-3, 0, P, &k, &used), 4e-3, 1e-15); /* no quota */
    /* a wait that spins 1 ms, then polls at 50%: from 0 to 4 ms it would take 2.5 ms of CPU; the
     * quota is gone at 3 ms (1 + 0.5 * 2), so the message that came at 4 ms is seen at 5 ms */
    k = -1;
    NEAR(mi_sim_cfs_wait(0, 4e-3, 1e-3, 0.5, q, P, &k, &used), 5e-3, 1e-12);
    CU_ASSERT(k == 1 && used == 0);
    /* to 2.5 ms: 1.75 ms used, then 1 ms of compute runs 2.5-2.75 and 5-5.75 ms */
    k = -1;
    NEAR(mi_sim_cfs_wait(0, 2.5e-3, 1e-3, 0.5, q, P, &k, &used), 2.5e-3, 1e-15);
    NEAR(used, 1.75e-3, 1e-12);
    NEAR(mi_sim_cfs_run(2.5e-3, 1e-3, q, P, &k, &used), 5.75e-3, 1e-12);
    /* polling at 10% over 12 ms never runs out; 0.2 ms used 2 ms into the third period */
    k = -1;
    NEAR(mi_sim_cfs_wait(0, 12e-3, 0, 0.1, q, P, &k, &used), 12e-3, 1e-15);
    CU_ASSERT_EQUAL(k, 2);
    NEAR(used, 0.2e-3, 1e-9);
    NEAR(mi_sim_cfs_wait(0, 12e-3, 1e-3, 1, 0, P, &k, &used), 12e-3, 1e-15); /* no quota: free */
}

/* A one-device cluster with a quota: without one the simulator equals the
 * cost model (test_one_device); with periods far shorter than a pass, a
 * pass of c seconds of compute takes c / quota within a period either way;
 * with a period far longer than the run, the run is the cost model's until
 * the quota is spent, then waits for the next period. */
void test_quota_device(void)
{
    mi_config c = stories();
    mi_cluster cl;
    mi_cluster_default(&cl, 1, 4e9);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 0, &p);
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    mi_prediction pr;
    mi_predict(&p, &prog, &cl, 10, &pr);
    double t1 = pr.token_s; /* the first decode pass, at full speed */
    mi_sim_request rq = request(&cl, 10, 10);
    cl.dev[0].cpu_quota = 0.4;
    cl.dev[0].cpu_period_s = t1 / 1000;
    mi_sim_result r;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &r, err), 0);
    CU_ASSERT_EQUAL(r.interpolated, 0); /* a quota's state runs on: every pass walked */
    for (int k = 1; k < 10; k++) {
        mi_predict(&p, &prog, &cl, 10 + k - 1, &pr);
        CU_ASSERT(fabs(r.token_s[k] - pr.token_s / 0.4) <= cl.dev[0].cpu_period_s);
        NEAR(r.busy_s[k], pr.busy_s[0], 1e-9); /* compute at full speed, stretched in time */
    }
    mi_sim_result_free(&r);
    /* a period of 100 passes: the quota (40 passes' CPU) runs out inside token 40's pass or
     * before (the prefill's CPU too), and that pass waits for the next period at 100 t1 */
    cl.dev[0].cpu_period_s = 100 * t1;
    rq = request(&cl, 10, 60);
    rq.aligned_periods = 1;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &r, err), 0);
    int slow = 0;
    for (int k = 1; k < 60; k++)
        if (r.token_s[k] > 2 * t1) {
            slow++;
            CU_ASSERT(r.t_s[k] > 100 * t1 && r.t_s[k] < 102 * t1);
        }
    CU_ASSERT_EQUAL(slow, 1);
    mi_sim_result_free(&r);
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* A message cost: the same messages and payload, conserved, every rank's
 * compute unchanged; the pass slower, by at most every message's CPU
 * twice (sender and receiver) on the critical path. */
void test_message_cost(void)
{
    mi_config c = stories();
    mi_cluster cl;
    cluster5(&cl, 4000);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_TP, 0, &p);
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    mi_sim_links lk;
    mi_sim_links_of(&cl, &lk);
    uint64_t rng = 1;
    mi_sim_pass_out a, b;
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &lk, MI_PHASE_DECODE, 1, 1, 40, &rng, NULL, NULL, NULL, &a, err), 0);
    for (int r = 0; r < 5; r++)
        cl.dev[r].msg_s = 50e-6;
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &lk, MI_PHASE_DECODE, 1, 1, 40, &rng, NULL, NULL, NULL, &b, err), 0);
    CU_ASSERT_EQUAL(b.sends, a.sends);
    CU_ASSERT_EQUAL(b.recvs, b.sends);
    NEAR(b.bytes, a.bytes, 1e-12);
    for (int r = 0; r < 5; r++)
        NEAR(b.busy_s[r], a.busy_s[r], 1e-12);
    CU_ASSERT(b.token_s > a.token_s + 2 * 50e-6);
    CU_ASSERT(b.token_s <= a.token_s + 2 * 50e-6 * (double)b.sends + 1e-12);
    /* with a quota as well, only slower */
    for (int r = 0; r < 5; r++)
        cl.dev[r].cpu_quota = 0.4, cl.dev[r].cpu_period_s = 5e-3;
    mi_sim_pass_out q;
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &lk, MI_PHASE_DECODE, 1, 1, 40, &rng, NULL, NULL, NULL, &q, err), 0);
    CU_ASSERT(q.token_s >= b.token_s - 1e-12);
    CU_ASSERT_EQUAL(q.recvs, q.sends);
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* A re-placement's move also rebuilds the new placement's exchanges: each
 * rank's communicators and windows at the measured set-up costs; the same
 * placement moves no weights, so that is all it costs. */
void test_rebuild_cost(void)
{
    mi_config c = stories();
    mi_cluster cl;
    cluster5(&cl, 4000);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 0, &p);
    CU_ASSERT_EQUAL(mi_plan_switch_s(&p, &p, &cl, 40), 0);
    /* a group of m of the 5 devices: 10 ms at two, 16 ms at five: 10 + 2 (m - 2) */
    cl.comm_setup_s = 10e-3, cl.win_setup_s = 4e-3, cl.comm_setup_all_s = 16e-3, cl.win_setup_all_s = 4e-3;
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    double worst = 0;
    for (int r = 0; r < 5; r++) {
        double t = 0;
        for (int i = 0; i < prog.n_comms; i++)
            if (prog.comms[i].n_members >= 2 && mi_comm_index(&prog.comms[i], r) >= 0)
                t += 10e-3 + 2e-3 * (prog.comms[i].n_members - 2);
        for (int x = 0; x < prog.n_xchg; x++)
            t += 4e-3 * (prog.xchg[x].kind == MI_OP_PUT && mi_comm_index(&prog.comms[prog.xchg[x].comm], r) >= 0);
        if (t > worst)
            worst = t;
    }
    CU_ASSERT(worst >= 10e-3);
    NEAR(mi_plan_switch_s(&p, &p, &cl, 40), worst, 1e-12);
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* Pipelined micro-batches: layer-wise chains (tp does not: its passes are
 * the one-pass walk's); one micro-batch is the one-pass walk; M of them move
 * the same payload in M times the messages, and take at least one
 * micro-batch's pass and at most M of them one after another. */
void test_micro_batches(void)
{
    mi_config c = stories();
    c.kv_slots = 6;
    mi_cluster cl;
    cluster5(&cl, 4000);
    char err[MI_ERRLEN];
    mi_plan lw, tp;
    make_plan(&c, &cl, MI_PLANNER_LAYERWISE, 0, &lw);
    make_plan(&c, &cl, MI_PLANNER_TP, 0, &tp);
    mi_programs pl, pt;
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&lw, &pl, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&tp, &pt, err), 0);
    CU_ASSERT(mi_programs_can_pipeline(&pl));
    CU_ASSERT(!mi_programs_can_pipeline(&pt));
    mi_sim_links lk;
    mi_sim_links_of(&cl, &lk);
    uint64_t rng = 1;
    mi_sim_pass_out one, m1, m3, row2, t1, t3;
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&lw, &pl, &cl, &lk, MI_PHASE_PREFILL, 6, 6, 20, &rng, NULL, NULL, NULL, &one, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass_micro(&lw, &pl, &cl, &lk, 6, 1, 20, &rng, NULL, NULL, NULL, &m1, err), 0);
    NEAR(m1.token_s, one.token_s, 1e-15);
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass_micro(&lw, &pl, &cl, &lk, 6, 3, 20, &rng, NULL, NULL, NULL, &m3, err), 0);
    CU_ASSERT_EQUAL(m3.recvs, m3.sends);
    NEAR(m3.bytes, one.bytes, 1e-12);
    CU_ASSERT_EQUAL(m3.sends - 4, 3 * (one.sends - 4)); /* (the 4 workers' commands: once a pass) */
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&lw, &pl, &cl, &lk, MI_PHASE_PREFILL, 2, 2, 20, &rng, NULL, NULL, NULL, &row2, err),
                          0);
    CU_ASSERT(m3.token_s >= row2.token_s - 1e-12);
    CU_ASSERT(m3.token_s <= 3 * row2.token_s + 1e-12);
    CU_ASSERT(m3.token_s < 3 * row2.token_s - 1e-6); /* the links' latencies overlap */
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&tp, &pt, &cl, &lk, MI_PHASE_PREFILL, 6, 6, 20, &rng, NULL, NULL, NULL, &t1, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_sim_pass_micro(&tp, &pt, &cl, &lk, 6, 3, 20, &rng, NULL, NULL, NULL, &t3, err), 0);
    NEAR(t3.token_s, t1.token_s, 1e-15);
    CU_ASSERT_EQUAL(t3.sends, t1.sends);
    mi_programs_free(&pl);
    mi_programs_free(&pt);
    mi_plan_free(&lw);
    mi_plan_free(&tp);
    mi_cluster_free(&cl);
}
