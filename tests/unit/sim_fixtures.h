/* What test_simulate.c and test_sim_device.c share: stories15M's config,
 * a 5-device WiFi-like cluster, a plan and a request, and the device-model
 * tests (CPU quotas, message costs, rebuild costs, micro-batches). */
#ifndef MI_SIM_FIXTURES_H
#define MI_SIM_FIXTURES_H

#include <math.h>

#include "meshinfer/config.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/simulate.h"

#define NEAR(a, b, rel) CU_ASSERT(fabs((double)(a) - (double)(b)) <= (rel) * fabs((double)(b)) + 1e-15)

mi_config stories(void);
/* 5 devices, per-pair links of 4-6 ms and 20-100 Mbit/s, speeds apart (seed 7). */
void cluster5(mi_cluster *cl, double mem_mb);
void make_plan(const mi_config *c, const mi_cluster *cl, mi_planner which, int kvpos, mi_plan *p);
mi_sim_request request(const mi_cluster *cl, int n_prompt, int n_tokens);

void test_cfs_quota(void);
void test_quota_device(void);
void test_message_cost(void);
void test_rebuild_cost(void);
void test_micro_batches(void);

#endif
