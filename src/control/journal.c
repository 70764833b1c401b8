/* The generation journal behind `generate --journal` and `--resume`
 * (Petals-style history replay): rank 0 records what it takes to go
 * on from any token on other hosts -- the model, the prompt's tokens, the
 * tokens generated so far and the sampler's state -- so that when a device is
 * lost the survivors re-plan for their rank count, replay the tokens and
 * continue with the very tokens the lost run would have made.
 *
 * The file is one JSON line (the request: model, prompt tokens, steps,
 * sampling, the sampler's first state), written whole and renamed into place,
 * then one line per token, "t TOKEN STATE CHECK" (STATE the sampler's state
 * after it, CHECK the line's check value, 16 hex digits each), appended with a
 * single write, and "done CHECK" at the end (its check value goes on from the
 * last token line's, so a "done" moved up or added by hand breaks the chain). A
 * run killed mid-line leaves a line without its newline, which the reader
 * drops (and --resume cuts off before appending). Rewriting a whole JSON file
 * per token cost 1.3 ms a token here (file creation and rename), a third of
 * a decode step; a line costs microseconds. The request line is synced
 * before it is renamed into place; token lines are not, unless asked
 * (--journal-sync): a killed process loses nothing, the page cache holds it,
 * and only a journal on storage that outlives rank 0's host (a shared file
 * system) needs each line on disk.
 *
 * The request also keeps the distributed options the run was given
 * (--planner, --wire-dtype, --prune-ffn, speculation, loss, ...): a resumed
 * run computes as the first did without being told again (cmd_generate.c
 * decides which may differ).
 *
 * A resumed run trusts the journal whole, so it is checked as the record of
 * one run, not line by line: the model file's fingerprint (its size and
 * mi_hash64 of its bytes: a file of the same shape with other weights is
 * another model; 30-45 ms for the 61 MB stories15M from the page cache on a
 * loaded 2-core machine, 20 ms of it the hash, against 0.11-0.14 s to load
 * it), the prompt's tokens against the tokenizer's of the prompt text
 * (cmd_generate.c), the sampler's states as a chain (each
 * sampled token advances it one step, a greedy run never), and a check value
 * per line: the request's is mi_hash64 of its fields (printed without it),
 * each token line's hashes its token and state going on from the line
 * before's -- so lines swapped, repeated, dropped or edited, or the tokens of
 * another journal, break the chain even where the states cannot (a greedy
 * run's are all alike). The check values tell an edited journal, not a forged
 * one. Version 5 brought them, version 6 the "done" line's; a journal of an
 * earlier version is refused with a line saying to rerun (it holds nothing to
 * check it, or its end, by). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "meshinfer/control.h"
#include "meshinfer/common.h"
#include "meshinfer/sampler.h"
#include "../util/json_keys.h"

#define JOURNAL_VERSION 6
#define JOURNAL_MAX_OPTIONS 128

void journal_free(gen_journal *j)
{
    if (j->fd >= 0)
        close(j->fd);
    free(j->prompt);
    free(j->system);
    free(j->chat_template);
    free(j->prompt_ids);
    free(j->out);
    free(j->options);
    memset(j, 0, sizeof *j);
    j->fd = -1;
}

static cJSON *int_array(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* A line's check value: its token and state hashed going on from the line before's. */
static uint64_t line_check(uint64_t before, int token, uint64_t rng)
{
    uint64_t w[2] = {(uint64_t)(uint32_t)token, rng};
    return mi_hash64(w, sizeof w, before);
}

/* The "done" line's check value: the end of the chain, going on from the last token line's. */
static uint64_t done_check(uint64_t before) { return mi_hash64("done", 4, before); }

/* The request's check value: its fields, printed without it (the reader
 * prints what it parsed the same way, so number formats do not matter). */
static int request_check(const cJSON *doc, uint64_t *check)
{
    char *text = cJSON_PrintUnformatted(doc);
    if (!text)
        return -1;
    *check = mi_hash64(text, strlen(text), MI_HASH_SEED);
    free(text);
    return 0;
}

static cJSON *string_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

int journal_begin(const char *path, gen_journal *j, char *err)
{
    cJSON *doc = cJSON_CreateObject();
    char rng[32], seed[32], model_hash[32];
    snprintf(rng, sizeof rng, "%016" PRIx64, j->rng);
    snprintf(seed, sizeof seed, "%" PRIu64, j->seed);
    snprintf(model_hash, sizeof model_hash, "%016" PRIx64, j->model_hash);
    int ok = doc && cJSON_AddNumberToObject(doc, "meshinfer_journal", JOURNAL_VERSION) &&
             cJSON_AddStringToObject(doc, "model", j->model) &&
             cJSON_AddNumberToObject(doc, "model_bytes", (double)j->model_bytes) &&
             cJSON_AddStringToObject(doc, "model_hash", model_hash) &&
             cJSON_AddStringToObject(doc, "model_name", j->model_name) &&
             cJSON_AddNumberToObject(doc, "n_layers", j->n_layers) && cJSON_AddNumberToObject(doc, "dim", j->dim) &&
             cJSON_AddNumberToObject(doc, "hidden_dim", j->hidden_dim) &&
             cJSON_AddNumberToObject(doc, "vocab_size", j->vocab_size) &&
             cJSON_AddStringToObject(doc, "dtypes", j->dtypes) &&
             cJSON_AddStringToObject(doc, "prompt", j->prompt ? j->prompt : "") &&
             cJSON_AddBoolToObject(doc, "chat", j->chat) &&
             cJSON_AddItemToObject(doc, "system", string_or_null(j->system)) &&
             cJSON_AddItemToObject(doc, "chat_template", string_or_null(j->chat_template)) &&
             cJSON_AddNumberToObject(doc, "steps", (double)j->steps) &&
             cJSON_AddNumberToObject(doc, "temperature", j->temperature) &&
             cJSON_AddNumberToObject(doc, "top_p", j->topp) && cJSON_AddNumberToObject(doc, "top_k", j->top_k) &&
             cJSON_AddStringToObject(doc, "seed", seed) &&
             cJSON_AddBoolToObject(doc, "ignore_eos", j->ignore_eos) &&
             cJSON_AddStringToObject(doc, "sampler_state", rng);
    cJSON *p = ok ? int_array(j->prompt_ids, j->n_prompt) : NULL;
    ok = ok && p && cJSON_AddItemToObject(doc, "prompt_tokens", p);
    if (!ok)
        cJSON_Delete(p);
    cJSON *opts = ok ? cJSON_CreateArray() : NULL;
    const char *o = j->options;
    for (int i = 0; opts && i < j->n_options; i++, o += strlen(o) + 1)
        cJSON_AddItemToArray(opts, cJSON_CreateString(o));
    ok = ok && opts && cJSON_AddItemToObject(doc, "options", opts);
    if (!ok && opts && !cJSON_GetObjectItemCaseSensitive(doc, "options"))
        cJSON_Delete(opts);
    char check[32];
    ok = ok && request_check(doc, &j->check) == 0;
    snprintf(check, sizeof check, "%016" PRIx64, j->check);
    ok = ok && cJSON_AddStringToObject(doc, "check", check);
    char *text = ok ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text)
        return mi_set_error(err, "journal %s: out of memory", path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.partial.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int rc = 0;
    if (!f) {
        rc = mi_set_error(err, "journal %s: cannot write %s: %s", path, tmp, strerror(errno));
    } else {
        size_t n = strlen(text);
        int bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF;
        /* on disk before the rename: a crash must not leave an empty journal under the name */
        bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
        bad |= fclose(f) != 0;
        if (bad || rename(tmp, path) != 0) {
            rc = mi_set_error(err, "journal %s: cannot write it (%s)", path, strerror(errno));
            unlink(tmp);
        }
    }
    free(text);
    if (rc == 0)
        rc = journal_append_open(path, j, -1, err);
    return rc;
}

int journal_append_open(const char *path, gen_journal *j, long keep_bytes, char *err)
{
    j->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (j->fd < 0)
        return mi_set_error(err, "journal %s: cannot open it to append: %s", path, strerror(errno));
    /* a line a killed run left half-written goes before anything is appended */
    if (keep_bytes >= 0 && ftruncate(j->fd, keep_bytes) != 0) {
        close(j->fd);
        j->fd = -1;
        return mi_set_error(err, "journal %s: cannot cut its torn last line: %s", path, strerror(errno));
    }
    return 0;
}

static int append(gen_journal *j, const char *line, size_t n, char *err)
{
    errno = 0;
    if (write(j->fd, line, n) != (ssize_t)n) /* one write: a line is whole or torn, never interleaved */
        return mi_set_error(err, "journal: cannot append to it: %s", errno ? strerror(errno) : "short write");
    if (j->sync && fdatasync(j->fd) != 0)
        return mi_set_error(err, "journal: cannot sync it to disk: %s", strerror(errno));
    return 0;
}

int journal_token(gen_journal *j, int token, uint64_t rng, char *err)
{
    char line[80];
    j->check = line_check(j->check, token, rng);
    int n = snprintf(line, sizeof line, "t %d %016" PRIx64 " %016" PRIx64 "\n", token, rng, j->check);
    return append(j, line, (size_t)n, err);
}

int journal_finish(gen_journal *j, char *err)
{
    char line[32];
    j->check = done_check(j->check);
    int n = snprintf(line, sizeof line, "done %016" PRIx64 "\n", j->check);
    int rc = append(j, line, (size_t)n, err);
    if (close(j->fd) != 0 && rc == 0)
        rc = mi_set_error(err, "journal: cannot close it: %s", strerror(errno));
    j->fd = -1;
    return rc;
}

/* v is a whole number in [lo, hi]. */
static int whole(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi && v->valuedouble == floor(v->valuedouble);
}

/* n ints of array a (each in [0, hi)) into a new buffer; -1 when malformed. */
static int read_ints(const cJSON *a, int hi, int **out, int *n)
{
    *n = cJSON_GetArraySize(a);
    *out = mi_malloc((size_t)(*n ? *n : 1) * sizeof(int), "journal tokens");
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= hi)
            return -1;
        (*out)[i] = (int)e->valuedouble;
    }
    return 0;
}

/* 16 hex digits at p (nothing else follows when last) into *v. */
static int hex16(const char *p, int last, uint64_t *v)
{
    if (strspn(p, "0123456789abcdefABCDEF") != 16 || (last ? p[16] != 0 : p[16] != ' '))
        return 0;
    *v = strtoull(p, NULL, 16);
    return 1;
}

/* The token lines after the header (text at body, n bytes): tokens, the
 * sampler's state after each (a chain from j->rng, the request's: one step
 * per sampled token, none when greedy) and the check values (from j->check),
 * "done"; a last line without its newline is a torn write and is dropped
 * (*valid: the bytes of whole lines). */
static int read_lines(const char *body, size_t n, const char *prefix, int V, int sampled, long steps, gen_journal *j,
                      size_t *valid, char *err)
{
    size_t cap = 256;
    j->out = mi_malloc(cap * sizeof(int), "journal tokens");
    j->n_out = 0;
    size_t at = 0;
    int line_no = 2;
    while (at < n) {
        const char *nl = memchr(body + at, '\n', n - at);
        if (!nl)
            break; /* torn */
        size_t len = (size_t)(nl - (body + at));
        char line[80];
        if (len >= sizeof line)
            return mi_set_error(err, "%s: line %d is not a token line", prefix, line_no);
        memcpy(line, body + at, len);
        line[len] = 0;
        if (j->done)
            return mi_set_error(err, "%s: line %d follows 'done'", prefix, line_no);
        if (!strncmp(line, "done", 4) && (line[4] == ' ' || !line[4])) {
            uint64_t check = 0;
            if (line[4] != ' ' || !hex16(line + 5, 1, &check))
                return mi_set_error(err, "%s: line %d is not 'done CHECK' (16 hex digits of its check value)", prefix,
                                    line_no);
            if (check != done_check(j->check) && !j->edited_line)
                j->edited_line = line_no;
            j->check = check;
            j->done = 1;
            j->done_line = line_no;
        } else {
            /* "t", one space, decimal digits (no sign), one space, 16 hex digits, one space, 16 hex digits */
            long tok = -1;
            const char *q = line + 2;
            uint64_t rng = 0, check = 0;
            int ok = len > 2 && line[0] == 't' && line[1] == ' ' && *q >= '0' && *q <= '9';
            for (tok = 0; ok && *q >= '0' && *q <= '9'; q++)
                if ((tok = tok * 10 + (*q - '0')) >= V)
                    ok = 0;
            ok = ok && *q == ' ' && hex16(q + 1, 0, &rng) && hex16(q + 18, 1, &check);
            if (!ok)
                return mi_set_error(err, "%s: line %d is not 't TOKEN STATE CHECK' with a token below vocab_size %d "
                                         "and 16 hex digits each for STATE and CHECK", prefix, line_no, V);
            if (j->n_out >= steps)
                return mi_set_error(err, "%s: line %d: a token past the %ld asked for", prefix, line_no, steps);
            uint64_t want = sampled ? mi_sampler_advance(j->rng) : j->rng;
            if (rng != want)
                return sampled ? mi_set_error(err, "%s: line %d: sampler state %016" PRIx64 " is not the one step "
                                                   "from %016" PRIx64 " (the state before it) a sampled token takes: "
                                                   "lines swapped, repeated, dropped or edited", prefix, line_no, rng,
                                              j->rng)
                               : mi_set_error(err, "%s: line %d: sampler state %016" PRIx64 " differs from %016" PRIx64
                                                   " (the state before it), but a greedy run (temperature 0) never "
                                                   "advances the sampler: edited", prefix, line_no, rng, j->rng);
            if (check != line_check(j->check, (int)tok, rng) && !j->edited_line)
                j->edited_line = line_no;
            j->check = check; /* the lines after are judged by what was written */
            if ((size_t)j->n_out == cap) {
                cap *= 2;
                int *o = realloc(j->out, cap * sizeof(int));
                if (!o)
                    mi_fatal("out of memory");
                j->out = o;
            }
            j->out[j->n_out++] = (int)tok;
            j->rng = rng;
        }
        at += len + 1;
        line_no++;
    }
    *valid = at;
    return 0;
}

int journal_read(const char *path, gen_journal *j, char *err)
{
    memset(j, 0, sizeof *j);
    j->fd = -1;
    size_t len;
    char *text = mi_read_text_file(path, "journal", 64L << 20, &len, err);
    if (!text)
        return -1;
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "journal %s", path);
    char *eol = memchr(text, '\n', len);
    if (!eol) {
        free(text);
        return mi_set_error(err, "%s: no whole first line (the request): not a journal, or cut short", prefix);
    }
    size_t head = (size_t)(eol - text);
    *eol = 0; /* the request's line alone (the token lines after it are read from eol + 1) */
    cJSON *root = mi_json_parse(text, head, prefix, err);
    if (!root) {
        free(text);
        return -1;
    }
    static const char *const keys[] = {"meshinfer_journal", "model", "model_bytes", "model_hash", "model_name",
                                       "n_layers", "dim", "hidden_dim", "vocab_size", "dtypes", "prompt", "chat",
                                       "system", "chat_template", "steps", "temperature", "top_p", "top_k", "seed",
                                       "ignore_eos", "sampler_state", "prompt_tokens", "options", "check", NULL};
    int rc = -1;
    if (cJSON_IsObject(root) && mi_json_check_keys(root, keys, prefix, "", err))
        goto done;
#define GET(k) cJSON_GetObjectItemCaseSensitive(root, k)
    const cJSON *ver = GET("meshinfer_journal"), *model = GET("model"), *name = GET("model_name"),
                *nl = GET("n_layers"), *dim = GET("dim"), *hid = GET("hidden_dim"), *vocab = GET("vocab_size"),
                *dts = GET("dtypes"), *prompt = GET("prompt"), *steps = GET("steps"), *temp = GET("temperature"),
                *topp = GET("top_p"), *seed = GET("seed"), *ie = GET("ignore_eos"), *rng = GET("sampler_state"),
                *pt = GET("prompt_tokens"), *opts = GET("options"), *topk = GET("top_k"),
                *mbytes = GET("model_bytes"), *mhash = GET("model_hash"), *chat = GET("chat"),
                *sys = GET("system"), *tmpl = GET("chat_template"), *check = GET("check");
#undef GET
    if (!cJSON_IsObject(root) || !cJSON_IsNumber(ver)) {
        mi_set_error(err, "%s: not a meshinfer journal (generate --journal writes one)", prefix);
        goto done;
    }
    if (ver->valuedouble < JOURNAL_VERSION) {
        mi_set_error(err, "%s: line 1: journal version %g, written by an earlier meshinfer without the model's "
                          "fingerprint or the check values (of each line, and of 'done') a resume verifies a "
                          "journal by: rerun the generation",
                     prefix, ver->valuedouble);
        goto done;
    }
    if (ver->valuedouble != JOURNAL_VERSION) {
        mi_set_error(err, "%s: line 1: journal version %g, this meshinfer reads version %d", prefix, ver->valuedouble,
                     JOURNAL_VERSION);
        goto done;
    }
    if (!whole(mbytes, 1, 9007199254740992.0) || !cJSON_IsString(mhash) || !hex16(mhash->valuestring, 1, &j->model_hash) ||
        !cJSON_IsString(check) || !hex16(check->valuestring, 1, &j->check) || !cJSON_IsBool(chat) ||
        !(cJSON_IsNull(sys) || cJSON_IsString(sys)) || !(cJSON_IsNull(tmpl) || cJSON_IsString(tmpl))) {
        mi_set_error(err, "%s: line 1: model_bytes, model_hash, check (16 hex digits each), chat, system or "
                          "chat_template is missing or malformed", prefix);
        goto done;
    }
    j->model_bytes = (uint64_t)mbytes->valuedouble;
    if (!cJSON_IsString(model) || !cJSON_IsString(name) || !whole(nl, 1, 1 << 20) || !whole(dim, 1, 1 << 20) ||
        !whole(hid, 1, 1 << 24) || !whole(vocab, 1, 1 << 20) || !cJSON_IsString(dts) || !cJSON_IsString(prompt) ||
        !whole(steps, 1, 1 << 20) || !cJSON_IsNumber(temp) ||
        !cJSON_IsNumber(topp) || !cJSON_IsString(seed) || !cJSON_IsBool(ie) || !cJSON_IsString(rng) ||
        !cJSON_IsArray(pt) || strlen(model->valuestring) >= sizeof j->model ||
        strlen(name->valuestring) >= sizeof j->model_name || strlen(dts->valuestring) >= sizeof j->dtypes ||
        !(temp->valuedouble >= 0 && temp->valuedouble <= 100) || !(topp->valuedouble > 0 && topp->valuedouble <= 1) ||
        !whole(topk, 0, 1 << 24)) {
        mi_set_error(err, "%s: a field of the first line is missing or out of range (model, model_name, n_layers, "
                          "dim, hidden_dim, vocab_size, dtypes, prompt, steps, temperature, top_p, top_k, seed, "
                          "ignore_eos, "
                          "sampler_state, prompt_tokens, options)", prefix);
        goto done;
    }
    /* as written: 16 hex digits, and decimal digits (strtoull alone takes signs, spaces and 0x) */
    if (!hex16(rng->valuestring, 1, &j->rng) || j->rng == 0) {
        mi_set_error(err, "%s: sampler_state '%s' is not 16 hex digits of a non-zero state", prefix, rng->valuestring);
        goto done;
    }
    char *end;
    errno = 0;
    size_t nd = strlen(seed->valuestring);
    j->seed = strtoull(seed->valuestring, &end, 10);
    if (nd == 0 || nd > 20 || strspn(seed->valuestring, "0123456789") != nd || errno || *end) {
        mi_set_error(err, "%s: seed '%s' is not a 64-bit number", prefix, seed->valuestring);
        goto done;
    }
    if (j->rng != mi_sampler_first_state(j->seed)) {
        mi_set_error(err, "%s: line 1: sampler_state %s is not the state seed %s starts the sampler at (%016" PRIx64
                          ")", prefix, rng->valuestring, seed->valuestring, mi_sampler_first_state(j->seed));
        goto done;
    }
    /* the request's check value: its fields as parsed, printed without it */
    uint64_t want_check = 0;
    cJSON *detached = cJSON_DetachItemFromObjectCaseSensitive(root, "check");
    int printed = request_check(root, &want_check) == 0;
    cJSON_Delete(detached);
    if (!printed)
        mi_fatal("out of memory");
    if (want_check != j->check)
        j->edited_line = 1;
    j->ignore_eos = cJSON_IsTrue(ie); /* the token lines are judged by it */
    int V = (int)vocab->valuedouble;
    if (read_ints(pt, V, &j->prompt_ids, &j->n_prompt) || j->n_prompt < 1) {
        mi_set_error(err, "%s: prompt_tokens must be token ids below vocab_size %d, at least one", prefix, V);
        goto done;
    }
    /* the options as given: strings, none empty, at most JOURNAL_MAX_OPTIONS of 4095 bytes */
    int n_opts = cJSON_IsArray(opts) ? cJSON_GetArraySize(opts) : -1;
    int opts_ok = n_opts >= 0 && n_opts <= JOURNAL_MAX_OPTIONS;
    for (const cJSON *e = opts_ok ? opts->child : NULL; e; e = e->next)
        if (!cJSON_IsString(e) || !e->valuestring[0] || strlen(e->valuestring) > 4095)
            opts_ok = 0;
        else
            j->options_len += strlen(e->valuestring) + 1;
    if (!opts_ok) {
        mi_set_error(err, "%s: options must be an array of at most %d non-empty strings (the run's distributed "
                          "options)", prefix, JOURNAL_MAX_OPTIONS);
        goto done;
    }
    j->options = mi_malloc(j->options_len + 1, "journal options");
    j->n_options = n_opts;
    size_t at = 0;
    for (const cJSON *e = opts->child; e; e = e->next) {
        memcpy(j->options + at, e->valuestring, strlen(e->valuestring) + 1);
        at += strlen(e->valuestring) + 1;
    }
    size_t valid = 0;
    if (read_lines(eol + 1, len - head - 1, prefix, V, (float)temp->valuedouble > 0.0f, (long)steps->valuedouble, j,
                   &valid, err))
        goto done;
    if (j->done && j->ignore_eos && j->n_out != steps->valuedouble) { /* only -n ends such a run */
        mi_set_error(err, "%s: line %d: 'done' after %d of %g tokens, but the run ignored BOS and EOS (only the "
                          "count asked for ends it): inconsistent", prefix, j->done_line, j->n_out, steps->valuedouble);
        goto done;
    }
    j->valid_bytes = (long)(head + 1 + valid);
    snprintf(j->model, sizeof j->model, "%s", model->valuestring);
    snprintf(j->model_name, sizeof j->model_name, "%s", name->valuestring);
    j->n_layers = (int)nl->valuedouble;
    j->dim = (int)dim->valuedouble;
    j->hidden_dim = (int)hid->valuedouble;
    snprintf(j->dtypes, sizeof j->dtypes, "%s", dts->valuestring);
    j->vocab_size = V;
    j->prompt = strdup(prompt->valuestring);
    j->chat = cJSON_IsTrue(chat);
    j->system = cJSON_IsString(sys) ? strdup(sys->valuestring) : NULL;
    j->chat_template = cJSON_IsString(tmpl) ? strdup(tmpl->valuestring) : NULL;
    j->steps = (long)steps->valuedouble;
    j->temperature = temp->valuedouble;
    j->topp = topp->valuedouble;
    j->top_k = (int)topk->valuedouble;
    j->ignore_eos = cJSON_IsTrue(ie);
    rc = 0;
done:
    cJSON_Delete(root);
    free(text);
    if (rc)
        journal_free(j);
    return rc;
}
