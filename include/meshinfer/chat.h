/* Chat templates of known model families, recognised and rendered in C.
 *
 * A model imported from a GGUF file (`tokenizer.chat_template`) or a Hugging
 * Face folder (`tokenizer_config.json` "chat_template") carries a Jinja
 * template that turns a conversation into the prompt text. Like llama.cpp we
 * run no Jinja: mi_chat_detect recognises the template by distinctive
 * substrings and mi_chat_render writes what that family's template writes,
 * byte for byte (tests/cli/chat_templates.sh compares it with the real
 * templates rendered by @huggingface/jinja and by Python's Jinja2, which
 * transformers uses; where the two differ, this follows Python). The prompt
 * holds BOS where the template
 * writes it: tokenize it without adding BOS again, as transformers'
 * apply_chat_template does. */
#ifndef MESHINFER_CHAT_H
#define MESHINFER_CHAT_H

#include <stddef.h>

/* One message. role: "system", "user" or "assistant"; content: UTF-8. */
typedef struct {
    const char *role;
    const char *content;
} mi_chat_msg;

/* The kinds (families) of templates; mi_chat_kind_name gives each one's name. */
enum {
    MI_CHAT_LLAMA3,        /* "llama3": Llama 3 Instruct (<|start_header_id|>, <|eot_id|>) */
    MI_CHAT_LLAMA3_ORIG,   /* "llama3-orig": Llama 3's first template (April 2024), which opens
                              the assistant turn even without add_generation_prompt */
    MI_CHAT_LLAMA31,       /* "llama3.1": Llama 3.1 and 3.3: a system header with
                              "Cutting Knowledge Date" and "Today Date: 26 Jul 2024" */
    MI_CHAT_LLAMA32,       /* "llama3.2": as 3.1 with today's local date ("05 Mar 2025") */
    MI_CHAT_CHATML_QWEN25, /* "qwen2.5": ChatML with Qwen2.5's default system prompt */
    MI_CHAT_CHATML_QWEN2,  /* "qwen2": ChatML with Qwen1.5's and Qwen2's ("You are a helpful
                              assistant.") */
    MI_CHAT_QWEN3,         /* "qwen3": ChatML with Qwen3's <think> handling */
    MI_CHAT_GEMMA3,        /* "gemma3": <start_of_turn>user/model, system folded into the first
                              user turn, roles alternating */
    MI_CHAT_ZEPHYR,        /* "zephyr": TinyLlama-1.1B-Chat (<|system|>, <|user|>, <|assistant|>, </s>) */
    MI_CHAT_LLAMA2,        /* "llama2": Llama 2 Chat ([INST] <<SYS>>), roles alternating */
    MI_CHAT_CHATML,        /* "chatml": plain ChatML (<|im_start|>, <|im_end|>) */
    MI_CHAT_N_KINDS
};

/* Bits of mi_chat_render's add_generation_prompt. MI_CHAT_GEN opens the
 * assistant's turn after the last message (Jinja's add_generation_prompt);
 * MI_CHAT_NO_THINKING, with it, is Qwen3's enable_thinking=false (an empty
 * <think></think> block); other kinds ignore MI_CHAT_NO_THINKING, as their
 * templates ignore enable_thinking. */
#define MI_CHAT_GEN 1
#define MI_CHAT_NO_THINKING 2

/* The kind of a template's text. Returns a kind (0..MI_CHAT_N_KINDS-1), or
 * -1 with one line in err (MI_ERRLEN) when the text is NULL, empty or not one
 * of the known kinds; that line lists the kinds' names, which
 * mi_chat_kind_from_name accepts. A ChatML template with <think> handling
 * other than Qwen3's is refused rather than rendered as plain ChatML. */
int mi_chat_detect(const char *template_text, char *err);

/* The kind named name ("llama3", "qwen3", ...: mi_chat_kind_name's names).
 * Returns the kind, or -1 with one line in err listing the names. */
int mi_chat_kind_from_name(const char *name, char *err);

/* The name of a kind, or NULL when kind is out of range. */
const char *mi_chat_kind_name(int kind);

/* Render msgs[0..n-1] (n >= 1) as the kind's template does, into *out
 * (malloc'ed, NUL-terminated; the caller frees it). add_generation_prompt:
 * 0 or MI_CHAT_GEN, optionally | MI_CHAT_NO_THINKING (above). bos_text: the
 * BOS token's text where the template writes it ("<|begin_of_text|>",
 * "<bos>", "<s>"); NULL gives the family's usual one, "" none. Kinds whose
 * templates write no BOS (Qwen, ChatML, Zephyr) ignore it.
 * Content is trimmed where the template trims it, with Python's whitespace
 * (str.strip). Returns 0, or -1 with *out NULL and one line in err: a bad
 * kind, n < 1, a NULL message, role or content, a role other than system,
 * user and assistant, or roles that the template rejects (Gemma 3 and Llama 2
 * raise unless user and assistant alternate after an optional system message). */
int mi_chat_render(int kind, const mi_chat_msg *msgs, int n, int add_generation_prompt,
                   const char *bos_text, char **out, char *err);

/* mi_chat_render, and where the messages' own texts landed: *spans (malloc'ed,
 * the caller frees it) holds *n_spans pairs [start, end) of byte offsets into
 * *out, in order, each a piece of a message's content (the template's markers
 * and role names are outside them). The tokenizer reads special tokens'
 * texts inside them as plain text (mi_tokenizer_encode_guarded), so that a
 * message cannot close its turn and open another. */
int mi_chat_render_spans(int kind, const mi_chat_msg *msgs, int n, int add_generation_prompt,
                         const char *bos_text, char **out, size_t **spans, int *n_spans, char *err);

/* The texts of the tokens that end an assistant turn ("<|eot_id|>",
 * "<|im_end|>", "<end_of_turn>", "</s>", ...): a NULL-terminated list, first
 * the turn's own end token. NULL when kind is out of range. */
const char *const *mi_chat_stop_texts(int kind);

#endif
