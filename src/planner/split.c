/* Units split in proportion to weights (see planner.h mi_split_units): the
 * tp and hybrid planners' shares and CATS's memory model's, one rule. */
#include "meshinfer/planner.h"

int mi_split_units(int total, const double *weight, int n, int *count)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += weight ? weight[i] : 1.0;
    int m = 0, next = 0;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        count[i] = 0;
        if (next >= total)
            continue;
        acc += weight ? weight[i] : 1.0;
        int end = i == n - 1 ? total : (int)(acc / sum * total + 0.5);
        int left = n - 1 - i; /* keep one unit for each later part when possible */
        if (end > total - left && total - left > next)
            end = total - left;
        if (end <= next)
            end = next + 1;
        if (end > total)
            end = total;
        count[i] = end - next;
        next = end;
        m++;
    }
    return m;
}
