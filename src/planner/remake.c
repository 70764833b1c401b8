/* HeadSplit's memory-triggered re-placement: the new plan (planner.h
 * mi_plan_remake), for the runtime's controller and the simulator alike. */
#include "meshinfer/planner.h"

#include "meshinfer/common.h"

int mi_plan_remake(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, int need, mi_plan *plan,
                   int *horizon, char *err)
{
    int seq = c->seq_len, h = 2 * need < seq ? 2 * need : seq;
    if (h < need)
        h = need;
    mi_plan_options po = *opt;
    char perr[MI_ERRLEN] = "";
    for (;;) {
        po.kv_positions = h;
        if (mi_plan_make(c, cl, &po, plan, perr) == 0) {
            *horizon = h;
            return 0;
        }
        if (h <= need)
            return mi_set_error(err, "at position %d no placement fits the devices' budgets any more: %s", need, perr);
        h = need + (h - need) / 2;
    }
}
