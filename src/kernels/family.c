/* The kernel families compiled in, and which one runs (see family.h). */
#include "family.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/kernels.h"

static const mi_kernel_family *const families[] = {
    &mi_kernels_scalar,
#if defined(__x86_64__) || defined(__i386__)
    &mi_kernels_avx2,
    &mi_kernels_avx512,
#endif
#if defined(__aarch64__)
    &mi_kernels_neon,
    &mi_kernels_neon_dot,
#endif
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

static const mi_kernel_family *active;

const mi_kernel_family *const *mi_kernel_families(int *n)
{
    *n = N_FAMILIES;
    return families;
}

static const mi_kernel_family *best(void)
{
    for (int i = N_FAMILIES - 1; i > 0; i--)
        if (families[i]->available())
            return families[i];
    return families[0];
}

const mi_kernel_family *mi_kernel_active(void)
{
    if (!active) {
        /* MESHINFER_KERNELS names a family for tests and comparisons; an
         * unusable name falls back to the best (mi_kernels_use reports it) */
        const char *env = getenv("MESHINFER_KERNELS");
        char err[256];
        if (!env || !*env || mi_kernels_use(env, err) != 0)
            active = best();
    }
    return active;
}

int mi_kernels_use(const char *name, char *err)
{
    if (!strcmp(name, "auto")) {
        active = best();
        return 0;
    }
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(families[i]->name, name)) {
            if (!families[i]->available()) {
                if (err)
                    strcpy(err, "this CPU cannot run that kernel family");
                return -1;
            }
            active = families[i];
            return 0;
        }
    /* a family of the other architecture is named as such, not as unknown */
    static const char *const elsewhere[] = {"avx2", "avx512", "neon", "neon-dotprod"};
    for (size_t i = 0; i < sizeof elsewhere / sizeof elsewhere[0]; i++)
        if (!strcmp(elsewhere[i], name)) {
            if (err)
                strcpy(err, "that kernel family is not built for this CPU's architecture");
            return -1;
        }
    if (err)
        strcpy(err, "unknown kernel family");
    return -1;
}

const char *mi_kernels_name(void)
{
    return mi_kernel_active()->name;
}

const char *mi_kernels_list(void)
{
    static char buf[128];
    if (!buf[0]) {
        strcpy(buf, "auto");
        for (int i = 0; i < N_FAMILIES; i++) {
            strcat(buf, ", ");
            strcat(buf, families[i]->name);
        }
    }
    return buf;
}
