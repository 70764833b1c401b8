/* libFuzzer harness: cluster files (mi_cluster_parse), and when one parses,
 * every planner on it for the stories15M shape: a value the parser lets
 * through must not make a planner misbehave (speeds near 1e308 once made the
 * tp planner's sums NaN); the exact planner with a short time limit. */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = fuzz_string(data, size), err[MI_ERRLEN];
    mi_cluster cl;
    if (mi_cluster_parse(json, &cl, err) == 0) {
        mi_config c;
        mi_config_from_shape("stories15M", &c);
        for (int pl = 0; pl < MI_N_PLANNERS; pl++) {
            mi_plan_options po = {(mi_planner)pl, 1, -1, 0, NULL, 0.7, 0, MI_F32};
            mi_plan p;
            /* the exact planner's search stopped at 20 ms: its program from odd figures, not its search */
            int rc = pl == MI_PLANNER_EXACT ? mi_plan_exact(&c, &cl, &po, 0.02, &p, NULL, err)
                                            : mi_plan_make(&c, &cl, &po, &p, err);
            if (rc == 0)
                mi_plan_free(&p);
        }
        mi_cluster_free(&cl);
    }
    free(json);
    return 0;
}
