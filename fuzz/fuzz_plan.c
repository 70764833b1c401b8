/* libFuzzer harness: plan files (mi_plan_load_json) against the stories15M
 * shape, somegather send lists included. */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_config c;
    mi_config_from_shape("stories15M", &c);
    mi_plan p;
    if (mi_plan_load_json(fuzz_file(data, size, "plan"), &c, &p, err) == 0)
        mi_plan_free(&p);
    return 0;
}
