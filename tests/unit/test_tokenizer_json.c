/* CUnit tests for the BPE-kind tokenizers (tokenizer.json, GGUF metadata,
 * the stored form) on small hand-written vocabularies with ids worked out
 * by hand, and bad files (one error line each).
 *
 * Usage: test_tokenizer_json [TOKENIZER_BIN TOKENIZERS_DIR STRINGS]
 *   with the optional arguments (llama2.c's tokenizer.bin, what
 *   jobs/dev/fetch_tokenizers.sh fills, tests/data/tokenizer_strings.txt)
 *   also the real vocabularies (test_tokenizer_real.c): the GGUF
 *   path on Llama 2's scores against llama2.c's encoder, the GGUF path on
 *   Llama 3's and Qwen 3's merges against their tokenizer.json, the stored
 *   form of each, and the 10 KB encode time; a missing file skips its part. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/model_file.h"
#include "meshinfer/tokenizer.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_bin, *g_dir, *g_strings;
static char g_scratch[4096];

/* ------------------------------------------------------------- fixtures */

/* Llama 2's scheme in miniature: "▁" normalizers, merges by rank, byte
 * fallback with only <0xC3> and <0xA9> present, BOS by template. */
static const char k_spm[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{"
    "\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xC3>\":3,\"<0xA9>\":4,\"\xE2\x96\x81\":5,\"a\":6,\"b\":7,\"c\":8,\"h\":9,"
    "\"i\":10,\"\xE2\x96\x81h\":11,\"\xE2\x96\x81hi\":12,\"ab\":13,\"abc\":14,\"\xE2\x96\x81" "a\":15},"
    "\"merges\":[\"\xE2\x96\x81 h\",\"\xE2\x96\x81h i\",\"a b\",\"ab c\",[\"\xE2\x96\x81\",\"a\"]]}}";

/* GPT-2's scheme in miniature: ids 0..255 the bytes (id = byte), merges
 * spelled in GPT-2's characters ("Ġ" is the space), Llama 3's regex, NFC,
 * ignore_merges, a special and a non-special added token. */
static char *byte_level_json(int ignore_merges)
{
    static const char *const merges[] = {"3 4", "h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r",
                                         "\xC4\xA0w or", "l d", "\xC4\xA0wor ld", "1 2", "12 3", "4 5"};
    static const char *const tokens[] = {"34", "he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld",
                                         "\xC4\xA0world", "12", "123", "45", "xyz"};
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"added_tokens\":[{\"id\":270,\"content\":\"<|eot|>\",\"special\":true,\"normalized\":false},"
                          "{\"id\":271,\"content\":\"<think>\",\"special\":false,\"normalized\":false}],"
                          "\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                          "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}"
                          "\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
                          "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
                          "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
                          "\"post_processor\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
                          "\"model\":{\"type\":\"BPE\",\"ignore_merges\":%s,\"vocab\":{",
                          ignore_merges ? "true" : "false");
    for (int b = 0; b < 256; b++) {
        /* GPT-2's character of byte b: printable Latin-1 as is, the rest from U+0100 */
        unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? (unsigned)b
                      : b <= 0x20                                                       ? 0x100u + (unsigned)b
                      : b <= 0xA0                                                       ? 0x121u + (unsigned)b - 0x7F
                                                                                        : 0x143u;
        char ch[8];
        if (cp < 0x80)
            snprintf(ch, sizeof ch, "%s%c", cp == '"' || cp == '\\' ? "\\" : "", (char)cp);
        else
            snprintf(ch, sizeof ch, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
        n += (size_t)snprintf(s + n, cap - n, "%s\"%s\":%d", b ? "," : "", ch, b);
    }
    for (int i = 0; i < 14; i++)
        n += (size_t)snprintf(s + n, cap - n, ",\"%s\":%d", tokens[i], 256 + i);
    n += (size_t)snprintf(s + n, cap - n, "},\"merges\":[");
    for (int i = 0; i < 13; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"%s\"", i ? "," : "", merges[i]);
    snprintf(s + n, cap - n, "]}}");
    return s;
}

static int load(mi_tokenizer *t, const char *json, const char *config, char *err)
{
    return mi_tokenizer_load_json_mem(t, json, strlen(json), config, config ? strlen(config) : 0, "test.json", err);
}

/* encode(text) == want[0..n) */
static int encodes_to(const mi_tokenizer *t, const char *text, int bos, const int *want, int n)
{
    int out[2048];
    char err[MI_ERRLEN] = "";
    const int got = mi_tokenizer_encode_n(t, text, bos, out, 2048, err);
    int same = got == n;
    for (int i = 0; same && i < n; i++)
        same = out[i] == want[i];
    if (!same) {
        fprintf(stderr, "\n  encode(\"%s\") = ", text);
        for (int i = 0; i < got; i++)
            fprintf(stderr, "%d ", out[i]);
        fprintf(stderr, "(%s)\n", got < 0 ? err : "");
    }
    return same;
}

#define ENC(t, text, bos, ...)                                                                                   \
    do {                                                                                                         \
        const int w_[] = {__VA_ARGS__};                                                                          \
        CU_ASSERT(encodes_to(t, text, bos, w_, (int)(sizeof w_ / sizeof w_[0])));                                \
    } while (0)

static int decodes_to(const mi_tokenizer *t, int prev, int id, const char *want)
{
    int len = -1;
    const char *s = mi_tokenizer_decode(t, prev, id, &len);
    return len == (int)strlen(want) && memcmp(s, want, (size_t)len) == 0;
}

/* ----------------------------------------------------------- the kinds */

static void test_spm(void)
{
    mi_tokenizer t;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(load(&t, k_spm, NULL, err), 0);
    CU_ASSERT_EQUAL(t.kind, MI_TOK_SPM);
    CU_ASSERT(t.bos_id == 1 && t.add_bos == 1 && t.eos_id == -1);
    ENC(&t, "hi", 1, 1, 12);
    /* merges by rank: "a b" (2) and "ab c" (3) come before "▁ a" (4) */
    ENC(&t, "hi abc", 1, 1, 12, 5, 14);
    ENC(&t, "hi abc", 0, 12, 5, 14);
    ENC(&t, "", 1, 1);
    ENC(&t, "\xC3\xA9", 1, 1, 5, 3, 4);        /* é: byte fallback */
    ENC(&t, "\xC3\xBC\xC3\xBC", 1, 1, 5, 0);   /* ü ü: <0xBC> missing, one fused <unk> */
    ENC(&t, "hi</s>", 1, 1, 12, 2);            /* special token matched in the text */
    ENC(&t, "</s>hi", 1, 1, 2, 12);            /* Prepend runs on each section */
    ENC(&t, "a\xE2\x96\x81" "b", 0, 15, 5, 7); /* a literal ▁ is a space */
    CU_ASSERT(decodes_to(&t, 1, 12, "hi"));    /* Strip after BOS */
    CU_ASSERT(decodes_to(&t, 12, 15, " a"));
    CU_ASSERT(decodes_to(&t, 12, 3, "\xC3"));
    CU_ASSERT(decodes_to(&t, 12, 2, ""));
    CU_ASSERT(decodes_to(&t, 12, 99, ""));
    mi_tokenizer_free(&t);
}

static void test_byte_level(void)
{
    mi_tokenizer t, u;
    char err[MI_ERRLEN], *json = byte_level_json(1);
    CU_ASSERT_EQUAL_FATAL(load(&t, json, "{\"eos_token\":\"<|eot|>\",\"add_bos_token\":false}", err), 0);
    CU_ASSERT(t.kind == MI_TOK_BYTE_BPE && t.vocab_size == 272 && t.eos_id == 270 && t.bos_id == -1);
    CU_ASSERT(mi_tokenizer_is_eog(&t, 270) && !mi_tokenizer_is_eog(&t, 271));
    ENC(&t, "hello world", 1, 260, 265);
    ENC(&t, "hello<|eot|>", 1, 260, 270);
    {
        /* guarded bytes (a chat message's own text): an added token's text there is text */
        const size_t in[] = {5, 12}, before[] = {0, 5};
        int ids[32];
        CU_ASSERT_EQUAL(mi_tokenizer_encode_guarded(&t, "hello<|eot|>", 0, ids, 32, in, 1, err), 8);
        const int want[] = {260, '<', '|', 'e', 'o', 't', '|', '>'};
        CU_ASSERT(!memcmp(ids, want, sizeof want));
        CU_ASSERT_EQUAL(mi_tokenizer_encode_guarded(&t, "hello<|eot|>", 0, ids, 32, before, 1, err), 2);
        CU_ASSERT(ids[0] == 260 && ids[1] == 270);
    }
    ENC(&t, "<think>hi", 1, 271, 'h', 'i');
    ENC(&t, "12345", 1, 267, 268);            /* \p{N}{1,3}: "123" "45", not "34" first */
    ENC(&t, "e\xCC\x81", 1, 0xC3, 0xA9);      /* NFC: e + U+0301 is é */
    ENC(&t, "xyz", 1, 269);                   /* ignore_merges: a token without merges */
    ENC(&t, "\"\\", 1, '"', '\\');
    CU_ASSERT(decodes_to(&t, -1, 265, " world")); /* byte-level strips nothing */
    CU_ASSERT(decodes_to(&t, 5, 0xC3, "\xC3"));
    CU_ASSERT(decodes_to(&t, 5, 271, "<think>"));
    CU_ASSERT(decodes_to(&t, 5, 270, ""));
    free(json);
    json = byte_level_json(0);
    CU_ASSERT_EQUAL_FATAL(load(&u, json, NULL, err), 0);
    ENC(&u, "xyz", 1, 'x', 'y', 'z');
    free(json);
    mi_tokenizer_free(&t);
    mi_tokenizer_free(&u);
}

/* The same vocabulary through GGUF metadata gives the same ids. */
static void test_spec_gpt2(void)
{
    mi_tokenizer t, g;
    char err[MI_ERRLEN], *json = byte_level_json(1);
    CU_ASSERT_EQUAL_FATAL(load(&t, json, NULL, err), 0);
    free(json);
    const int V = t.vocab_size;
    int *type = malloc((size_t)V * sizeof *type);
    for (int i = 0; i < V; i++)
        type[i] = i == 270 ? 3 : i == 271 ? 4 : 1;
    static const char *const merges[] = {"3 4", "h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r",
                                         "\xC4\xA0w or", "l d", "\xC4\xA0wor ld", "1 2", "12 3", "4 5"};
    int mlen[13];
    for (int i = 0; i < 13; i++)
        mlen[i] = (int)strlen(merges[i]);
    mi_tok_spec sp = {.model = "gpt2", .pre = "llama-bpe", .n_tokens = V, .tokens = (const char *const *)t.pieces,
                      .token_len = t.piece_len, .token_type = type, .n_merges = 13, .merges = merges,
                      .merge_len = mlen, .bos_id = -1, .eos_id = 270, .eot_id = -1, .pad_id = -1, .unk_id = -1,
                      .add_bos = 0, .add_space_prefix = -1};
    CU_ASSERT_EQUAL_FATAL(mi_tokenizer_init_spec(&g, &sp, err), 0);
    static const char *const texts[] = {"hello world", "hello<|eot|>", "<think>hi", "12345", "xyz", "I'LL go 1,000!"};
    for (int k = 0; k < 6; k++) {
        int a[64], b[64];
        const int na = mi_tokenizer_encode_n(&t, texts[k], 1, a, 64, err);
        const int nb = mi_tokenizer_encode_n(&g, texts[k], 1, b, 64, err);
        CU_ASSERT(na > 0 && na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    }
    sp.pre = "smaug";
    CU_ASSERT_EQUAL(mi_tokenizer_init_spec(&g, &sp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "pre-tokenizer 'smaug' is not supported"));
    mi_tokenizer_free(&g);
    mi_tokenizer_free(&t);
    free(type);
}

/* SentencePiece by score: the best-scored merged token first, equal scores leftmost. */
static void test_spec_llama(void)
{
    static const char *const tok[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                                      "\xE2\x96\x81" "ab", "aa", "<0xC3>", "<0xA9>", "<|eot|>"};
    static const float score[] = {0, 0, 0, -5, -5, -5, -1, -2, -0.5f, -3, 0, 0, 0};
    static const int type[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6, 3};
    int len[13];
    for (int i = 0; i < 13; i++)
        len[i] = (int)strlen(tok[i]);
    mi_tok_spec sp = {.model = "llama", .n_tokens = 13, .tokens = tok, .token_len = len, .scores = score,
                      .token_type = type, .bos_id = 1, .eos_id = 2, .eot_id = 12, .pad_id = -1, .unk_id = -1,
                      .add_bos = -1, .add_space_prefix = -1};
    mi_tokenizer t;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_tokenizer_init_spec(&t, &sp, err), 0);
    CU_ASSERT(t.kind == MI_TOK_SPM && t.add_bos == 1 && mi_tokenizer_is_eog(&t, 12) && mi_tokenizer_is_eog(&t, 2));
    ENC(&t, "ab", 1, 1, 8);             /* ▁a (-1) before ab (-2), then ▁ab (-0.5) */
    ENC(&t, "aaa", 0, 6, 9);            /* ▁a first, then aa: "▁a" "aa" */
    ENC(&t, "b aaa", 0, 3, 5, 6, 9);
    ENC(&t, "\xC3\xA9<|eot|>", 0, 3, 10, 11, 12);
    ENC(&t, "\xC3\xBC", 0, 3, 0);       /* no <0xBC>: unk */
    CU_ASSERT(decodes_to(&t, 1, 8, "ab"));
    CU_ASSERT(decodes_to(&t, 4, 8, " ab"));
    mi_tokenizer_free(&t);
    sp.add_space_prefix = 0; /* Gemma: no leading ▁, nothing stripped */
    CU_ASSERT_EQUAL_FATAL(mi_tokenizer_init_spec(&t, &sp, err), 0);
    ENC(&t, "ab", 0, 7);
    ENC(&t, "aaa", 0, 9, 4); /* two "aa" of equal score: the left one */
    CU_ASSERT(decodes_to(&t, 1, 8, " ab"));
    mi_tokenizer_free(&t);
    sp.scores = NULL;
    CU_ASSERT_EQUAL(mi_tokenizer_init_spec(&t, &sp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs tokenizer.ggml.scores"));
    sp.model = "bert";
    CU_ASSERT_EQUAL(mi_tokenizer_init_spec(&t, &sp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "model 'bert' is not supported"));
}

/* ------------------------------------------------------------ bad files */

/* k_spm with one piece replaced: -1 and an error line holding want. */
static void expect_bad(const char *from, const char *to, const char *want)
{
    char json[sizeof k_spm + 256], err[MI_ERRLEN] = "";
    const char *at = strstr(k_spm, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(json, sizeof json, "%.*s%s%s", (int)(at - k_spm), k_spm, to, at + strlen(from));
    mi_tokenizer t;
    const int rc = load(&t, json, NULL, err);
    CU_ASSERT_EQUAL(rc, -1);
    if (rc == 0)
        mi_tokenizer_free(&t);
    CU_ASSERT(strstr(err, want) != NULL && strstr(err, "test.json") == err && !strchr(err, '\n'));
    if (!strstr(err, want))
        fprintf(stderr, "\n  error '%s' lacks '%s'\n", err, want);
}

static void test_bad_files(void)
{
    expect_bad("{\"version\"", "{\"version\"]", "JSON syntax error");
    expect_bad("\"type\":\"BPE\"", "\"type\":\"Unigram\"", "model type 'Unigram' is not supported");
    expect_bad("\"ab c\"", "\"ab q\"", "merge 3 names token 'q', which is not in the vocabulary");
    expect_bad("\"ab c\"", "\"ab h\"", "merge 3 ('ab' 'h') makes a token not in the vocabulary");
    expect_bad("\"ab c\"", "17", "merge 3 is neither");
    expect_bad("{\"type\":\"Prepend\"", "{\"type\":\"Lowercase\"", "normalizer type 'Lowercase' is not supported");
    expect_bad("\"pre_tokenizer\":null", "\"pre_tokenizer\":{\"type\":\"Whitespace\"}",
               "pre_tokenizer type 'Whitespace' is not supported");
    expect_bad("{\"type\":\"Fuse\"}", "{\"type\":\"CTC\"}", "decoder type 'CTC' is not supported");
    expect_bad("\"abc\":14", "\"abc\":99", "vocab id 99 out of range 0..18");
    expect_bad("\"abc\":14", "\"abc\":13", "token id 13 is given twice");
    expect_bad("\"abc\":14", "\"abc\":-1", "not an integer");
    expect_bad("\"abc\":14", "\"abc\":17", "no token has id 14");
    expect_bad("\"pre_tokenizer\":null",
               "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}",
               "does not compile");
    expect_bad("\"unk_token\":\"<unk>\"", "\"unk_token\":\"<nope>\"", "unk_token '<nope>' is not in the vocabulary");
    char err[MI_ERRLEN];
    mi_tokenizer t;
    CU_ASSERT_EQUAL(load(&t, "[1,2]", NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a tokenizer.json"));
    CU_ASSERT_EQUAL(load(&t, k_spm, "{\"bos_token\":\"<nope>\"}", err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bos_token or eos_token ('<nope>') is not in the vocabulary"));
    CU_ASSERT_EQUAL(mi_tokenizer_load_json(&t, "/nonexistent/tokenizer.json", NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/tokenizer.json"));
    /* bytes that are not UTF-8 are refused before any look-up */
    CU_ASSERT_EQUAL_FATAL(load(&t, k_spm, NULL, err), 0);
    int out[8];
    CU_ASSERT_EQUAL(mi_tokenizer_encode_n(&t, "a\xFF", 1, out, 8, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not valid UTF-8"));
    CU_ASSERT_EQUAL(mi_tokenizer_encode_n(&t, "hi abc hi abc", 1, out, 3, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than 3 token ids"));
    mi_tokenizer_free(&t);
}

/* ------------------------------------------------------- the stored form */

static int same_ids(const mi_tokenizer *a, const mi_tokenizer *b, const char *text)
{
    int x[4096], y[4096];
    char err[MI_ERRLEN];
    const int n = mi_tokenizer_encode_n(a, text, 1, x, 4096, err), m = mi_tokenizer_encode_n(b, text, 1, y, 4096, err);
    return n >= 0 && n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0;
}

static void test_stored_form(void)
{
    char err[MI_ERRLEN], *json = byte_level_json(1);
    mi_tokenizer t[2], back;
    CU_ASSERT_EQUAL_FATAL(load(&t[0], k_spm, NULL, err), 0);
    CU_ASSERT_EQUAL_FATAL(load(&t[1], json, "{\"eos_token\":\"<|eot|>\"}", err), 0);
    free(json);
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        char *s = mi_tokenizer_serialize(&t[k], &len, err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        CU_ASSERT_EQUAL_FATAL(mi_tokenizer_deserialize(&back, s, len, "stored", err), 0);
        CU_ASSERT(back.kind == t[k].kind && back.vocab_size == t[k].vocab_size && back.bos_id == t[k].bos_id &&
                  back.eos_id == t[k].eos_id && back.n_eog == t[k].n_eog);
        CU_ASSERT(same_ids(&t[k], &back, "hi abc hello world 12345 \xC3\xA9 <think></s><|eot|>"));
        CU_ASSERT(decodes_to(&back, 1, k ? 265 : 12, k ? " world" : "hi"));
        mi_tokenizer_free(&back);
        /* damaged: each is one error naming the stored form */
        const char *damage[][2] = {{"\"format\":\"meshinfer-tokenizer-1\"", "\"format\":\"other\""},
                                   {"\"bos\":", "\"bos\":9999,\"x\":"},
                                   {"\"merges\":[", "\"merges\":[99999,"},
                                   {"\"pre_tokenizer\":[", "\"pre_tokenizer\":[[\"split\"],"}};
        for (int d = 0; d < 4; d++) {
            char *at = strstr(s, damage[d][0]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(at);
            char *bad = malloc(len + 64);
            const int n = snprintf(bad, len + 64, "%.*s%s%s", (int)(at - s), s, damage[d][1], at + strlen(damage[d][0]));
            CU_ASSERT_EQUAL(mi_tokenizer_deserialize(&back, bad, (size_t)n, "stored", err), -1);
            CU_ASSERT(strncmp(err, "stored", 6) == 0 && !strchr(err, '\n'));
            free(bad);
        }
        free(s);
    }
    CU_ASSERT_PTR_NULL(mi_tokenizer_serialize(NULL, NULL, err));
    mi_tokenizer_free(&t[0]);
    mi_tokenizer_free(&t[1]);
}

/* The stored form through a model file: written by the writer, read back. */
static void test_model_file(void)
{
    mi_config c;
    char err[MI_ERRLEN], path[4200], *json = byte_level_json(1);
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("tiny-gqa", &c), 0);
    mi_tokenizer t, back;
    CU_ASSERT_EQUAL_FATAL(load(&t, json, NULL, err), 0);
    free(json);
    tu_path(path, sizeof path, g_scratch, "bpe.h5");
    mi_model_writer *w = mi_model_writer_create(path, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    const size_t d = (size_t)c.dim, V = (size_t)c.vocab_size, h = (size_t)c.hidden_dim;
    const size_t q = (size_t)c.n_heads * (size_t)c.head_dim, kv = (size_t)mi_kv_dim(&c);
    float *buf = malloc((V > h ? V : h) * d * sizeof *buf);
    for (size_t i = 0; i < (V > h ? V : h) * d; i++)
        buf[i] = 0.01f;
    int rc = mi_model_writer_put(w, "tok_embeddings", buf, V, d, 0, err) || mi_model_writer_put(w, "norm", buf, d, 1, 0, err);
    if (!c.shared_classifier)
        rc = rc || mi_model_writer_put(w, "classifier", buf, V, d, 0, err);
    static const char *const ln[] = {"attention_norm", "wq", "wk", "wv", "wo_t", "ffn_norm", "w1", "w3", "w2_t"};
    for (int l = 0; l < c.n_layers && !rc; l++)
        for (int i = 0; i < 9 && !rc; i++) {
            char name[64];
            mi_model_layer_name(name, sizeof name, l, ln[i]);
            const size_t rows = i == 0 || i == 5 ? d : i == 1 || i == 4 ? q : i == 2 || i == 3 ? kv : h;
            rc = mi_model_writer_put(w, name, buf, rows, i == 0 || i == 5 ? 1 : d, 0, err);
        }
    free(buf);
    rc = rc || mi_model_writer_put_tokenizer(w, &t, err);
    CU_ASSERT_EQUAL_FATAL(rc ? (mi_model_writer_abort(w), -1) : mi_model_writer_commit(w, err), 0);
    mi_model_file *mf = mi_model_open(path, &c, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
    CU_ASSERT_EQUAL_FATAL(mi_model_read_tokenizer(mf, &back, err), 0);
    mi_model_close(mf);
    CU_ASSERT(back.kind == MI_TOK_BYTE_BPE && back.vocab_size == 272);
    CU_ASSERT(same_ids(&t, &back, "hello world<|eot|> 12345 <think>"));
    mi_tokenizer_free(&back);
    mi_tokenizer_free(&t);
}

/* ---------------------------------------------------------------- main */

int test_real_vocabs(const char *bin, const char *dir, const char *strings_path); /* test_tokenizer_real.c */

static void test_real(void)
{
    if (!g_bin) {
        fprintf(stderr, " (no real vocabularies given: skipped)");
        return;
    }
    CU_ASSERT_EQUAL(test_real_vocabs(g_bin, g_dir, g_strings), 0);
}

int main(int argc, char **argv)
{
    if (argc != 1 && argc != 4) {
        fprintf(stderr, "usage: %s [TOKENIZER_BIN TOKENIZERS_DIR STRINGS]\n", argv[0]);
        return 2;
    }
    g_bin = argc == 4 ? argv[1] : NULL;
    g_dir = argc == 4 ? argv[2] : NULL;
    g_strings = argc == 4 ? argv[3] : NULL;
    if (tu_make_scratch(g_scratch, sizeof g_scratch, "test_tokenizer_json"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("tokenizer_json", NULL, NULL);
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"SentencePiece-style tokenizer.json: ids, specials, fallback, decode", test_spm},
        {"byte-level tokenizer.json: regex split, NFC, ignore_merges, added tokens", test_byte_level},
        {"GGUF gpt2 metadata gives the tokenizer.json's ids", test_spec_gpt2},
        {"GGUF llama metadata: merges by score, leftmost on ties", test_spec_llama},
        {"bad files: one error line each", test_bad_files},
        {"stored form: round trip and damage", test_stored_form},
        {"stored form in a model file", test_model_file},
        {"real vocabularies (with arguments)", test_real},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn))
            return 1;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    const unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    tu_rm_tree(g_scratch);
    return failed ? 1 : 0;
}
