/* Test harness for tests/cli/chat_templates.sh: renders conversations with
 * mi_chat_render so the JS reference (tests/data/chat_reference.js) can
 * compare them byte for byte. Reads one JSON object a line on stdin:
 *   {"template": PATH, "messages": [{"role": R, "content": C}, ...],
 *    "add_generation_prompt": BOOL, "enable_thinking": BOOL (default true),
 *    "bos": TEXT (default: the family's)}
 * and prints one line for each: the rendering as a JSON string, or
 * {"error": "..."} when detection or rendering fails (the line names why).
 * The template's kind comes from mi_chat_detect on the file's text.
 * Exit 0, or 1 when stdin holds a line that is not such an object. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/chat.h"
#include "meshinfer/common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_json(cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (!s)
        mi_fatal("chat_render: out of memory");
    puts(s);
    free(s);
    cJSON_Delete(v);
}

static void print_error(const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    print_json(o);
}

/* The kind of the template at path, read and detected once per path in a row. */
static int template_kind(const char *path, char *err)
{
    static char last[4096];
    static int kind = -1;
    if (kind >= 0 && !strcmp(path, last))
        return kind;
    size_t len;
    char *text = mi_read_text_file(path, "chat template", 1 << 20, &len, err);
    if (!text)
        return -1;
    kind = mi_chat_detect(text, err);
    free(text);
    snprintf(last, sizeof last, "%s", path);
    return kind;
}

static int render_case(const cJSON *c, int lineno)
{
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(c, "template");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt");
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(c, "enable_thinking");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(c, "bos");
    if (!cJSON_IsString(tpl) || !cJSON_IsArray(msgs) || !cJSON_IsBool(gen) || (think && !cJSON_IsBool(think)) ||
        (bos && !cJSON_IsString(bos))) {
        fprintf(stderr, "chat_render: line %d: needs template, messages, add_generation_prompt\n", lineno);
        return -1;
    }
    int n = cJSON_GetArraySize(msgs);
    mi_chat_msg *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    if (!m)
        mi_fatal("chat_render: out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(msgs, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        m[i].role = cJSON_IsString(role) ? role->valuestring : NULL;
        m[i].content = cJSON_IsString(content) ? content->valuestring : NULL;
    }
    char err[MI_ERRLEN], *out = NULL;
    int kind = template_kind(tpl->valuestring, err);
    int flags = (cJSON_IsTrue(gen) ? MI_CHAT_GEN : 0) | (think && cJSON_IsFalse(think) ? MI_CHAT_NO_THINKING : 0);
    if (kind >= 0 && mi_chat_render(kind, m, n, flags, bos ? bos->valuestring : NULL, &out, err) == 0) {
        print_json(cJSON_CreateString(out));
        free(out);
    } else
        print_error(err);
    free(m);
    return 0;
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &cap, stdin) > 0) {
        lineno++;
        cJSON *c = cJSON_Parse(line);
        if (!c || !cJSON_IsObject(c)) {
            fprintf(stderr, "chat_render: line %d is not a JSON object\n", lineno);
            rc = 1;
        } else if (render_case(c, lineno))
            rc = 1;
        cJSON_Delete(c);
        fflush(stdout);
    }
    free(line);
    return rc;
}
