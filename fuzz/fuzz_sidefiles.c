/* libFuzzer harness: the side files a user hands meshinfer beside a model --
 * importance files (mi_importance_load), somegather quality files
 * (mi_sg_quality_load) and generation journals (journal_read, generate
 * --resume). The first byte chooses the parser, the rest is the file. */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static mi_config c;
    static int ready;
    if (!ready) {
        mi_config_from_shape("stories15M", &c);
        ready = 1;
    }
    const char *path = fuzz_file(data + 1, size - 1, "sidefiles");
    char err[MI_ERRLEN];
    switch (data[0] % 3) {
    case 0: {
        static mi_importance imp; /* 66 KB: not on the stack */
        if (mi_importance_load(path, &c, &imp, err) == 0 && imp.ffn_shard > 0)
            for (int k = 0; k < imp.n_shards; k++)
                mi_prune_keep(&imp, c.hidden_dim, k, NULL);
        break;
    }
    case 1: {
        mi_sg_quality q;
        if (mi_sg_quality_load(path, &c, &q, err) == 0) {
            double ppl;
            mi_sg_quality_best(&q, 0.05, &ppl);
        }
        break;
    }
    default: {
        gen_journal j;
        if (journal_read(path, &j, err) == 0)
            journal_free(&j);
    }
    }
    return 0;
}
