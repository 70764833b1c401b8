/* A plan compiled into one program per rank (see partition.h): the scheme's
 * builder (head-level or somegather) and every exchange's wire dtype. */
#include "meshinfer/partition.h"

#include "program_build.h"

int mi_programs_compile(const mi_plan *plan, mi_programs *p, char *err)
{
    int rc = plan->planner == MI_PLANNER_SOMEGATHER ? pb_compile_somegather(plan, p, err)
                                                    : pb_compile_headlevel(plan, p, err);
    /* every exchange travels in its layer's wire dtype (the schemes need not know) */
    for (int i = 0; !rc && i < p->n_xchg; i++)
        p->xchg[i].wire = mi_plan_wire(plan, p->xchg[i].layer);
    return rc;
}
