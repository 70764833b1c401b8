/* libFuzzer harness: GGUF files (mi_gguf_open), and when one opens, every
 * key/value through the getters of its type, every element of every array,
 * every tensor's bytes; aborts when a tensor's data lies outside the input
 * or a look-up by name finds another tensor than the index gives. */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/gguf.h"

static volatile unsigned sink; /* keeps the reads */

static void read_array(const mi_gguf *g, const char *key, char *err)
{
    mi_gguf_arr a;
    if (mi_gguf_get_arr(g, key, &a, err) != 0)
        abort(); /* the key is there and is an array */
    for (uint64_t i = 0; i <= a.count && i < 4096; i++) { /* one past the end: must be refused */
        const char *s;
        size_t len;
        float f;
        int32_t v;
        uint32_t u;
        if (mi_gguf_arr_str(&a, i, &s, &len, err) == 0)
            for (size_t k = 0; k < len; k++)
                sink += (unsigned char)s[k];
        int read = mi_gguf_arr_f32(&a, i, &f, err) == 0;
        read |= mi_gguf_arr_i32(&a, i, &v, err) == 0;
        read |= mi_gguf_arr_u32(&a, i, &u, err) == 0;
        if (read && i == a.count)
            abort();
    }
}

static void read_kvs(const mi_gguf *g, char *err)
{
    for (int64_t i = 0; i < mi_gguf_n_kv(g); i++) {
        const char *key = mi_gguf_key(g, i), *s;
        size_t len;
        char buf[32];
        uint32_t u;
        int32_t v;
        float f;
        bool b;
        if (mi_gguf_find_key(g, key) != i)
            abort();
        if (mi_gguf_kv_type(g, i) == MI_GGUF_ARRAY) {
            read_array(g, key, err);
            continue;
        }
        if (mi_gguf_get_str(g, key, &s, &len, err) == 0)
            for (size_t k = 0; k < len; k++)
                sink += (unsigned char)s[k];
        mi_gguf_get_str_copy(g, key, buf, sizeof buf, err);
        mi_gguf_get_u32(g, key, &u, err);
        mi_gguf_get_i32(g, key, &v, err);
        mi_gguf_get_f32(g, key, &f, err);
        mi_gguf_get_bool(g, key, &b, err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_gguf *g;
    if (mi_gguf_open(fuzz_file(data, size, "gguf"), &g, err) != 0)
        return 0;
    read_kvs(g, err);
    for (int64_t i = 0; i < mi_gguf_n_tensors(g); i++) {
        const mi_gguf_tensor *t = mi_gguf_tensor_at(g, i);
        if (mi_gguf_find_tensor(g, t->name) != t || !mi_gguf_type_name(t->type))
            abort();
        if (t->size && (mi_gguf_data_start(g) + t->offset > size || t->size > size - mi_gguf_data_start(g) - t->offset))
            abort();
        for (size_t k = 0; k < t->size; k++)
            sink += ((const unsigned char *)t->data)[k];
    }
    mi_gguf_close(g);
    return 0;
}
