/* A conversation rendered with the model's chat template and encoded (see
 * control.h session_encode_chat). */
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/control.h"

int session_chat_kind(const mi_session *ss, const char *template_name, char *err)
{
    int kind;
    if (template_name)
        kind = mi_chat_kind_from_name(template_name, err);
    else if (ss->chat_template)
        kind = mi_chat_detect(ss->chat_template, err);
    else
        return mi_set_error(err, "the model file has no chat template (convert it from a GGUF file or a Hugging Face "
                                 "folder that has one, or name one with --chat-template)");
    if (kind < 0)
        return -1;
    /* the end-of-turn marker must be one token of this vocabulary: else every
     * marker the template writes is read as plain text (ChatML's <|im_end|> on
     * GPT-2's vocabulary, </s> on a llama2.c tokenizer that does not match
     * special tokens in text) and no reply can stop at it */
    const char *const *stops = mi_chat_stop_texts(kind);
    int one[8];
    if (stops && stops[0] && mi_tokenizer_encode_n(&ss->tok, stops[0], 0, one, 8, err) != 1)
        return mi_set_error(err, "the %s template ends a turn with '%s', which this model's tokenizer does not "
                                 "read as one token: its markers would be plain text (use the model's own template)",
                            mi_chat_kind_name(kind), stops[0]);
    return kind;
}

int *session_encode_chat(mi_session *ss, const mi_chat_msg *msgs, int n_msgs, const char *template_name, int flags,
                         int *n, char *err)
{
    *n = 0;
    int kind = session_chat_kind(ss, template_name, err);
    if (kind < 0)
        return NULL;
    const mi_tokenizer *t = &ss->tok;
    const char *bos = t->bos_id >= 0 && t->bos_id < t->vocab_size ? t->pieces[t->bos_id] : "";
    char *text = NULL;
    size_t *spans = NULL;
    int n_spans = 0;
    if (mi_chat_render_spans(kind, msgs, n_msgs, flags, bos, &text, &spans, &n_spans, err))
        return NULL;
    size_t cap = strlen(text) + 4;
    int *ids = mi_malloc(cap * sizeof(int), "chat tokens");
    /* the template writes BOS where the family wants it; the tokenizer adds
     * one only where the template did not. The messages' own texts are read
     * as text: a "<|im_end|>" typed in one cannot end its turn */
    int k = mi_tokenizer_encode_guarded(t, text, 0, ids + 1, (int)cap - 1, spans, n_spans, err);
    free(text);
    free(spans);
    if (k < 0) {
        free(ids);
        return NULL;
    }
    int lead = t->add_bos && t->bos_id >= 0 && (k == 0 || ids[1] != t->bos_id);
    if (lead)
        ids[0] = t->bos_id;
    else
        memmove(ids, ids + 1, (size_t)k * sizeof(int));
    *n = k + lead;
    for (int i = 0; i < *n; i++)
        if (ids[i] >= ss->cfg.vocab_size) {
            int bad = ids[i];
            free(ids);
            return mi_set_error(err, "token %d ('%.40s') has no embedding row in this model (%d rows)", bad,
                                t->pieces[bad], ss->cfg.vocab_size),
                   NULL;
        }
    if (*n >= ss->cfg.seq_len) {
        free(ids);
        return mi_set_error(err, "the conversation is %d tokens but the model's context is %d: start a new one or "
                                 "convert with a larger --ctx", *n, ss->cfg.seq_len),
               NULL;
    }
    return ids;
}
