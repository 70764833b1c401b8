/* A CPU quota as CFS applies it, for the simulator's walks (simulate.h
 * mi_sim_cfs_run, mi_sim_cfs_wait): full speed until quota x period of CPU
 * is used in the current period, then nothing until the next. */
#include "meshinfer/simulate.h"

#include <math.h>

int mi_sim_cluster_cpu(const mi_cluster *cl, int n)
{
    for (int r = 0; r < n && r < cl->n_devices; r++)
        if (cl->dev[r].cpu_quota > 0 || cl->dev[r].msg_s > 0)
            return 1;
    return 0;
}

double mi_sim_cfs_run(double t, double work, double q, double P, long *period, double *used)
{
    if (!(q > 0) || q >= 1 || !(P > 0) || work <= 0) /* a whole core's quota never throttles one thread */
        return t + work;
    double B = q * P;
    long k = (long)floor(t / P);
    if (k != *period) { /* a new period: its quota is whole */
        *period = k;
        *used = 0;
    }
    /* each turn ends the work, the period's quota or the period; a 1 ns slack keeps rounding from
     * leaving a sliver of work or quota for one more turn */
    for (;;) {
        double end = (double)(k + 1) * P, run = work;
        if (run > B - *used)
            run = B - *used;
        if (run > end - t)
            run = end - t;
        if (run < 0)
            run = 0;
        t += run;
        work -= run;
        *used += run;
        if (work <= 1e-12)
            return t;
        /* out of quota or at the period's end: the next period starts with its quota whole */
        t = end > t ? end : t;
        *period = ++k;
        *used = 0;
    }
}

/* The CPU of a wait over [a, b): spin seconds from ts at full speed, then the fraction poll. */
static double wait_cpu(double ts, double spin, double poll, double a, double b)
{
    double s0 = a > ts ? a : ts, s1 = b < ts + spin ? b : ts + spin, sp = s1 > s0 ? s1 - s0 : 0;
    return sp + poll * (b - a - sp);
}

double mi_sim_cfs_wait(double ts, double ta, double spin, double poll, double q, double P, long *period, double *used)
{
    if (!(q > 0) || q >= 1 || !(P > 0) || ta <= ts)
        return ta;
    double B = q * P, t = ts;
    long k = (long)floor(t / P);
    if (k != *period)
        *period = k, *used = 0;
    while (t < ta) {
        double pend = (double)(k + 1) * P, end = pend < ta ? pend : ta, c = wait_cpu(ts, spin, poll, t, end);
        if (*used + c < B) {
            *used += c;
            t = end;
        } else if (pend >= ta) { /* out of quota when the message comes: it is seen in the next period */
            *period = k + 1, *used = 0;
            return pend;
        } else {
            t = pend; /* throttled for the period's rest: no polling, no CPU */
        }
        if (t >= pend)
            *period = ++k, *used = 0;
    }
    return ta;
}
