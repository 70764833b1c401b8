/* The controller: rank 0's side of a distributed run, which generate,
 * perplexity, bench and forecast share: start-up, the distributed options,
 * making or loading the plan, starting the runtime, the memory check and
 * re-placement, phase switches, runtime scaling (scaling.c), the metrics
 * report, and generate's journal (journal.c). Collective calls say so.
 *
 * Layer: above the runtime (it calls no MPI itself), below the CLI. */
#ifndef MESHINFER_CONTROL_H
#define MESHINFER_CONTROL_H

#include <stdint.h>
#include <stdio.h>

#include "meshinfer/chat.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/runtime.h"
#include "meshinfer/tokenizer.h"

typedef struct {
    const char *planner;     /* default "greedy" */
    const char *cluster;     /* cluster file, NULL: equal devices */
    const char *plan_file;   /* saved plan to use instead of a planner */
    const char *trace;       /* Chrome trace output */
    const char *text_input;  /* another input of the command (perplexity's --text): no output may replace it */
    uint64_t plan_seed;
    int controller_works;    /* -1 default, 0 no, 1 yes */
    int scatter;             /* --weights scatter */
    int speculate;           /* --speculate */
    double tolerance;        /* --tolerance (default 0.05) */
    double min_acceptance;   /* --min-acceptance (default 0.7) */
    const char *spec_profile;/* --spec-profile FILE from `meshinfer profile` */
    int replan;              /* --replan: memory-triggered re-placement */
    int placement_opts;      /* --planner, --plan-seed given: they cannot go with --plan-file */
    int kv_positions;        /* --kv-positions: KV positions the first placement budgets (0: default) */
    int wire;                /* --wire-dtype: dtype of activation messages (mi_dtype; default fp32) */
    int wire_set;            /* --wire-dtype given (a plan file carries its own) */
    double prune[MI_N_PRUNED_XCH]; /* --prune: CATS pruning ratio per exchange kind */
    int prune_mode;          /* --prune-mode (mi_prune_mode) */
    int prune_set;           /* --prune or --prune-mode given (somegather only; a plan file has its own) */
    double loss;             /* --loss: CATS message-loss probability */
    int loss_mode;           /* --loss-mode (mi_loss_mode) */
    uint64_t loss_seed;      /* --loss-seed */
    int loss_set;            /* --loss, --loss-mode or --loss-seed given (somegather only) */
    int prune_given, loss_given; /* --prune itself, --loss itself (--prune-mode and --loss-mode, --loss-seed
                                    only qualify them) */
    const char *prune_spec;  /* every --prune joined by commas: a second --prune adds kinds, never drops the
                                first (a kind given twice is refused) */
    int spec_given;          /* --tolerance, --min-acceptance or --spec-profile given (they qualify --speculate) */
    int plan_seed_set;       /* --plan-seed given (it seeds the random planner only) */
    int phase_plans;         /* --phase-plans: hybrid's placements, 0 auto (apart when the prompt's gain
                                pays for the re-placements), 1 decode's for both phases, 2 prefill's
                                for both (to measure what each phase gains), 3 apart always */
    int auto_prompt, auto_steps; /* --planner auto: the request judged (prompt tokens, decoded tokens) */
    double tpot_ms;          /* --tpot-ms: Voltron runtime scaling's target (0: off) */
    const char *importance;  /* --importance: `meshinfer importance` file ordering computation scaling */
    int energy;              /* --energy: spend the margin under --tpot-ms on lower DVFS levels */
    int prune_ffn;           /* --prune-ffn: FFN shards pruned per layer at load (needs --importance) */
    double ppl_budget;       /* --ppl-budget: percent perplexity somegather's pruning may cost under auto (-1: none) */
    const char *sg_quality;  /* --somegather-quality: its measured perplexities (mi_sg_quality) */
    const char *journal;     /* generate --journal/--resume: another output the trace must not overwrite */
    int forecast;            /* the command is forecast: the model must be a time-series one (and only then) */
    int explain;             /* --explain: rank 0 writes the programs that run in words to stderr (partition.h
                                mi_programs_explain) once the plan is made, before the first pass */
    int split_vocab;         /* --split-vocab: the head-level planners split the embeddings and classifier by
                                vocabulary rows over the workers (planner.h mi_plan_options.split_vocab) */
    int kv_slots;            /* KV cache slots (serve --max-batch: sequences decoding together); 0: one */
    int logits_k;            /* what the command needs of the logits (plan.h logits_k): the candidates its
                                sampler needs per classifier slice (sampler.h mi_logit_candidates; 1 greedy),
                                0: every logit (perplexity, temperature sampling without top-k) */
} session_opts;


/* --prune-ffn k: plan's layers each prune their k least important FFN
 * shards by imp (mi_prune_keep: the shards `quantize --prune-ffn k` drops).
 * Returns 0, or -1 with err: no shard measurements, k over half the shards. */
int session_prune_ffn(mi_plan *plan, const mi_importance *imp, int k, char *err);



/* One memory-triggered re-placement (HeadSplit), as reported in --json. */
typedef struct {
    int position;           /* KV positions after the forward pass that triggered it */
    int rank;               /* the device that crossed the threshold (or outgrew the plan) */
    double fraction;        /* its use of its budget at that position under the old plan */
    int kv_positions;       /* positions the new plan budgets for */
    double plan_ms;         /* planner time, all attempts */
    double seconds;         /* the move: loading shards and sending KV heads (0 if nothing moved) */
    int moved;              /* 0: the planner kept the placement */
    int kv_heads_moved;     /* (layer, KV head) pairs whose rank changed */
} session_replan;

#define SESSION_MAX_REPLANS 64

/* A plan's wire dtypes: its own (the messages of no layer, and the widest)
 * and each layer's (plan.h mi_layer_plan.wire, mi_plan_wire). */
typedef struct {
    int wire;
    unsigned char layer[MI_MAX_LAYERS];
} session_wires;

/* One runtime-scaling decision (Voltron §4.3), as reported in --json. */
typedef struct {
    int token;              /* the decode step after which it was taken */
    char trigger[192];      /* what crossed the target, and the diagnosis */
    int weights;            /* 1: computation scaling (layer dtypes), 0: communication scaling (wire dtype) */
    int restore;            /* 1: a probe undoing the last lowering */
    int wire_from, wire_to; /* mi_dtype of activation messages: the plan's before, the step taken */
    int rank;               /* computation scaling: the device diagnosed slow (-1: none) */
    double slowdown;        /* its compute per step against its baseline (1: unchanged) */
    char change[240];       /* the layers and dtypes changed ("messages of layers 7 6 -> fp16"; "": every message) */
    double predicted_ms;    /* TPOT expected after the change (cost model or bytes, scaled to what was measured) */
    double poll_ms;         /* the diagnosis's poll of every rank's compute time (0 for a probe) */
    double decide_us;       /* the decision itself (cost-model predictions included) */
    double apply_ms;        /* installing it (a re-placement: layers re-encoded or reloaded) */
} session_decision;
#define SESSION_MAX_DECISIONS 64
#define SESSION_MAX_TOKENS 65536

/* A session's memory account and HeadSplit's re-placements (replace.c), rank 0. */
typedef struct {
    int replan;             /* --replan */
    int kv_positions0;      /* the KV positions the first placement budgets */
    int from_plan_file;     /* the plan came from --plan-file (it cannot be re-made) */
    double mem_w[MI_MAX_RANKS], mem_kv[MI_MAX_RANKS]; /* per rank, weight bytes and KV bytes per position of
                                                         the current plan (checked every pass) */
    int pos_hi;             /* the highest position a forward pass has reached */
    int n_replans;          /* every re-placement (replans holds the first SESSION_MAX_REPLANS) */
    int n_replans_moved;    /* ... of which moved shards */
    session_replan replans[SESSION_MAX_REPLANS];
} session_memory;

/* Voltron's phases: a hybrid plan for the prefill phase apart from the
 * decode plan, when the planner made them differ (replace.c), rank 0. */
typedef struct {
    int has_prefill_plan;
    mi_plan plan_prefill;
    mi_programs prog_prefill; /* its programs (the cost model's TTFT) */
    int installed_prefill;  /* the runtime runs plan_prefill now */
    int n_switches;         /* phase switches (each a re-placement: shards loaded, KV heads moved) */
    double switch_s;        /* their time */
} session_phases;

/* Voltron §4.3 runtime scaling (--tpot-ms; scaling.c), rank 0. */
typedef struct {
    double tpot_target_s;   /* 0: off */
    int n_tokens;           /* decode steps timed */
    float *token_ms;        /* [SESSION_MAX_TOKENS] each step's time */
    int last_change;        /* step of the last decision */
    int hold;               /* steps a lowered precision is kept before a probe (16, doubled per failed probe) */
    int last_was_probe;     /* the last decision raised the precision */
    int n_decisions;
    session_decision decisions[SESSION_MAX_DECISIONS];
    mi_importance *imp;     /* --importance, or NULL: layers lowered from the last */
    int poll_k;             /* step of the last poll of compute times (-1: none open) */
    int probe_k;            /* no check for a recovered device before this step */
    double busy_pred[MI_MAX_RANKS]; /* the cost model's compute per step of each rank (0: too little to judge) */
    int busy_valid, busy_pos;       /* ... valid for the plan in force, predicted at this context */
    double poll_c[MI_MAX_RANKS];     /* every rank's compute seconds at that poll */
    double base_ratio[MI_MAX_RANKS]; /* each rank's measured / predicted compute per step, steps 8-16 (0: unknown) */
    int has_base;
    int rebase_k;           /* > 0: after lowering weights, the baseline is measured again from this step */
    int rebase_rank;        /* ... with this rank's compute counted as slowed by rebase_slow */
    double rebase_slow;
    int n_undo;             /* lowerings in force, newest last: what each replaced */
    struct session_undo {
        session_wires wires;
        unsigned char dtype[MI_MAX_LAYERS][MI_N_LAYER_MATS];
        uint64_t ffn_pruned[MI_MAX_LAYERS]; /* the layers' pruned FFN shards (mi_layer_plan) */
        int ffn_shard;
        double base_ratio[MI_MAX_RANKS];
        int rank;           /* weights lowered for this slowed rank (-1: the wire was lowered) */
        double slow;        /* ... which computed this many times its baseline then */
        double comm_per_byte; /* the wire lowered: seconds a step spent not computing per byte moved then */
    } *undo;                /* [SESSION_MAX_DECISIONS] */
} session_scaling;

/* HeadSplit's energy report and Voltron §4.4's DVFS levels (--energy). */
typedef struct {
    double freq[MI_MAX_RANKS]; /* every rank's DVFS level (1: top; --energy lowers some), on every rank */
    int energy;             /* --energy chose the levels (rank 0: en holds the search) */
    mi_energy_result en;
    double run_s;           /* the command's wall time for the energy report (0: none) */
    int run_tokens;         /* ... and the tokens it generated */
} session_power;

typedef struct {
    int rank, size;
    mi_config cfg;
    mi_runtime *rt;
    mi_tokenizer tok;       /* rank 0 */
    char *chat_template;    /* rank 0: the model file's chat template (model_file.h), or NULL */
    const char *model_file; /* the model file loaded: the path given, or a GGUF file's or Hugging Face
                               folder's converted copy in the model cache */
    double load_seconds;
    double plan_ms;
    mi_prediction pred;     /* rank 0: the cost model's view of the plan */
    mi_programs prog;       /* rank 0: the plan's programs */
    mi_plan plan;           /* rank 0 */
    double rtt_s[MI_MAX_RANKS]; /* rank 0: measured round trip to each rank (0 for itself) */
    mi_cluster cl;          /* rank 0: the devices the plan was made for (with measured RTTs) */
    mi_plan_options po;     /* rank 0: how the plan was made, to make it again */
    double *acc;            /* rank 0: profiled acceptance per transition, or NULL */
    char planned_with[320]; /* rank 0: what the placement was made for (plan file, cluster file, measured
                               round trips and free memory), said in --metrics, --json and --explain */
    int max_T;              /* positions per forward pass */
    double stream_rate[MI_MAX_RANKS]; /* rank 0: each rank's measured weight-streaming rate, bytes/s */
    double stream_rate_cpu[MI_MAX_RANKS]; /* the same passes on the CPU clock (unthrottled under a quota) */
    double cpu_quota[2 * MI_MAX_RANKS]; /* rank 0: each rank's cgroup CPU quota (cores; 0: none) and its
                                           period (seconds), interleaved */
    char (*hosts)[64];      /* rank 0: the host each rank runs on ([size]), to hold a calibration to */
    int loss_mode;          /* CATS emulated message loss (runtime options) */
    double loss;
    uint64_t loss_seed;
    session_memory memory;  /* the memory account and re-placements */
    session_phases phases;  /* a hybrid plan's prefill placement */
    session_scaling scaling;/* runtime scaling */
    session_power power;    /* DVFS levels and the energy report */
} mi_session;

void session_mpi_init(int *argc, char ***argv, int *rank, int *size);

/* Collective: rank 0 opens the model and makes (or loads) the plan; every rank
 * loads its shard. chunk: positions per forward pass. One error line and exit
 * 1 on every rank for any failure. */
void session_open(mi_session *ss, const char *cmd, const char *path, const session_opts *o, int chunk, int threads);

/* Collective: stop workers (rank 0 releases them; workers return from
 * serving here), write the trace if asked, free. */
void session_close(mi_session *ss, const session_opts *o);

/* Rank 0: mi_runtime_forward after the memory check of HeadSplit "Memory
 * needs active management": when the KV cache after this pass (pos0+T
 * positions) takes a device across 85% of its budget, or past the positions
 * the plan budgeted, and --replan is on, the planner runs again for twice as
 * many positions (fewer if that does not fit) and the runtime moves to the new
 * placement; without --replan a device that would exceed its budget stops the
 * run with one error line. Also stops when no placement fits any more. */
float *session_forward(mi_session *ss, const int *tokens, int T, int pos0, int flags);

/* Rank 0: the same for a pass over rows of several sequences (runtime.h
 * mi_runtime_forward_at: row t at position pos[t] of KV slot slot[t], in
 * n_micro pipelined micro-batches where the plan allows; the last n_decode
 * rows decode rows, for the counters); the memory check takes every slot as
 * full as the fullest row's. */
float *session_forward_at(mi_session *ss, const int *tokens, int T, const int *pos, const int *slot, int T_logits,
                          int n_decode, int n_micro);

/* Rank 0: install the plan of a phase (prefill = 1 or decode) with n_pos
 * positions cached: with a hybrid plan whose phases differ this is a
 * re-placement (runtime.h mi_runtime_replan: shards loaded, KV heads moved
 * to where the other phase's program expects them, counted in the
 * metrics); otherwise nothing. Returns the seconds it took. */
double session_phase(mi_session *ss, int prefill, int n_pos);

/* Rank 0: predicted TTFT of a prompt of n_prompt tokens and TPOT of n_steps
 * decode steps after it (cost.h, on the cluster the plan was made for),
 * seconds; the phase's own plan for each. */
void session_predict(const mi_session *ss, int n_prompt, int n_steps, double *ttft, double *tpot);

/* Rank 0, after a decode step of step_s seconds that left n_pos positions
 * cached: record it and, with --tpot-ms, scale at run time (Voltron §4.3;
 * scaling.c). When the median of the last 5 steps is over the target, every
 * rank's compute time is polled twice 8 steps apart. A device whose compute
 * per step has grown 1.3x over its own baseline (steps 8-16, against the cost
 * model's prediction for the plan in force), by at least half the overshoot,
 * is the cause: computation scaling lowers the layers it holds down the
 * precision ladder (fp32 -> fp16 -> q8_0 -> q6_K -> q5_K -> q4_K -> q4_0, each
 * layer the rungs of mi_precision_chain; the cheapest next step first by
 * --importance, else from the last layer), as few as the cost model, with that device slowed as measured,
 * says meet 90% of the target. Otherwise the links are: communication
 * scaling lowers the wire dtype of the messages of the fewest layers one
 * step (fp32 -> fp16 -> q8_0; least important first by --importance, else
 * from the last layer) that bring the step under 90% of the target, the
 * step's time not computing taken to scale with the bytes moved; all
 * messages when no subset is enough. The newest lowering is undone as a
 * probe, at the earliest 16 steps after the last change: lowered weights
 * when two polls show their device back within 1.3x (or the square root of
 * its slowdown then) of its baseline (it recovered), a lowered wire when two
 * polls show the step with the bytes as before under 90% of the target or
 * the links at 60% of their time per byte then, or either when TPOT is under
 * 60% of it (a probe that fails soon after doubles the wait before the
 * next). Each decision is logged (stderr, --json) with its trigger,
 * diagnosis and cost. */
void session_after_step(mi_session *ss, double step_s, int n_pos);

/* Rank 0, with --tpot-ms, before a forward pass that would take rank r's
 * memory at need positions past limit bytes (the KV cache grows past its
 * budget; Voltron §4.3.1 computation scaling): lower the layers r holds, in
 * the order session_after_step would, just enough that r fits at need, and
 * install that with pos0 positions cached. Such a lowering is not undone (the
 * cache does not shrink within a sequence). Returns 1 if it did, 0 when
 * lowering all r holds would not be enough (re-placement's turn) or scaling is
 * off. */
int session_scale_memory(mi_session *ss, int r, int pos0, int need, double limit);

/* Rank 0: session_forward over n tokens in chunks (prompt processing), on
 * the prefill plan (session_phase). */
/* Empty the KV cache (a new generation in the same job: generate --repeat)
 * and, under --replan, go back to the first placement, so each generation
 * re-places as it grows as the first did. Rank 0. */
void session_restart(mi_session *ss);

float *session_prefill(mi_session *ss, const int *tokens, int n, int pos0);

/* One generation: what to generate, and what it gave. */
typedef struct {
    const int *prompt;      /* [n_prompt] prompt tokens, BOS first */
    int n_prompt;
    long steps;             /* tokens to generate at most (>= 1) */
    int ignore_eos;         /* go on after BOS/EOS */
    float temperature, topp;/* sampler (mi_sampler; temperature 0: greedy) */
    int top_k;              /* the sampler's top-k (0: off) */
    uint64_t seed;
    const int *forced;      /* [n_forced] tokens replayed instead of sampled (--resume), or NULL */
    int n_forced;
    int rng_set;            /* the sampler goes on from rng (a journal's state after its last token) */
    uint64_t rng;
    int replay_only;        /* the forced tokens are the whole text: no forward pass at all */
    int scale;              /* call session_after_step after each decode step (runtime scaling) */
    int n_cached;           /* prompt[0 .. n_cached) are in the KV cache already (an earlier turn of a
                               chat): prefill starts at position n_cached */
} mi_gen_request;

typedef struct {
    /* after each token is chosen (replayed: one of the forced tokens), before
     * the next forward pass; prev is the token before it; rng the sampler's
     * state after it */
    void (*on_token)(void *ctx, int token, int prev, uint64_t rng, int replayed);
    void *ctx;
    /* the end token (BOS/EOS, not ignored) the run stops at, which is not one
     * of its tokens; rng the sampler's state after it; NULL: not called */
    void (*on_end)(void *ctx, int token, uint64_t rng, int replayed);
} mi_gen_hooks;

typedef struct {
    int *tokens, n;         /* [n] generated tokens (malloc'ed; free it), BOS/EOS included only with ignore_eos */
    const char *stop;       /* "eos" or "length" */
    double t0, t_first, t_end; /* mi_now() at the start, when the first token was chosen, at the end */
    int replayed;           /* forced tokens replayed through forward passes before sampling went on */
    double t_replayed;      /* mi_now() when they were */
} mi_gen_result;

/* Rank 0: the chat template kind a session renders with (chat.h; template_name
 * picks one by name, e.g. "llama3"; NULL: the file's), or -1 with err set: no
 * template, an unknown kind, or a kind whose end-of-turn marker the model's
 * tokenizer does not read as one token (its markers would be plain text). */
int session_chat_kind(const mi_session *ss, const char *template_name, char *err);

/* Rank 0: a conversation rendered with the model's chat template (chat.h;
 * template_name picks a kind by name instead, e.g. "llama3"; NULL: the
 * file's) and encoded, special tokens parsed, the tokenizer's BOS first
 * where it adds one and the template did not write it. flags: chat.h's
 * MI_CHAT_GEN (open the assistant's turn) and MI_CHAT_NO_THINKING. Returns
 * the ids (malloc'd; *n of them), or NULL with err set (session_chat_kind's
 * reasons, roles the template refuses, longer than the context). */
int *session_encode_chat(mi_session *ss, const mi_chat_msg *msgs, int n_msgs, const char *template_name, int flags,
                         int *n, char *err);

/* Rank 0: the token loop, the only one: prefill the prompt (the prefill
 * plan), switch to the decode phase, then per token: stop at BOS/EOS unless
 * ignore_eos, record, call the hook, stop at steps, else one decode step
 * (session_forward: the memory check and re-placement) and the next token
 * (forced, or sampled). Ends the run on NaN logits (session_check_logits).
 * The workers serve meanwhile (mi_runtime_serve). */
void session_generate(mi_session *ss, const mi_gen_request *rq, const mi_gen_hooks *hk, mi_gen_result *res);

/* Rank 0: encode a prompt with BOS; mi_fatal for an empty prompt, invalid
 * UTF-8, or a prompt that leaves no room in the context. */
int *session_encode_prompt(mi_session *ss, const char *prompt, int *n);

/* Acceptance per transition at `tolerance` from a profile file written by
 * `meshinfer profile` (JSON). acc must hold n_layers-1 values. Returns 0 or -1
 * with err: unreadable, malformed, an unknown key, for another model (name,
 * layer count) or other weights (synthetic or real), a transition count other
 * than n_layers-1, or values out of range or disagreeing with each other
 * (percentiles negative, non-finite or decreasing; mean or acceptance not what
 * the percentiles give). */
int session_load_profile(const char *path, const mi_config *c, double tolerance, double *acc, char *err);

/* Rank 0: stop with one error line when logits hold NaN or infinity (corrupt
 * weights, or values that overflow fp32). */
void session_check_logits(const float *logits, int n, int pos);

/* Rank 0: the same check for logits rebuilt from candidates (plan.h
 * logits_k > 0), where -INFINITY marks the tokens no slice sent: NaN or
 * +infinity anywhere, or no finite logit at all, stops the run. */
void session_check_candidates(const float *logits, int n, int pos);

/* Rank 0: the check that fits a pass's n logits: session_check_candidates
 * when ss's plan rebuilds them from candidates, else session_check_logits
 * (ss NULL: one device's whole logits). */
void session_check_output(const mi_session *ss, const float *logits, int n, int pos);

/* 1 when every rank's device in ss's cluster was measured (calibrate, then
 * --cluster): only then can the cost model say how a batch's rows share a
 * weight's reading (the uncalibrated defaults have one speed per dtype). */
int session_devices_measured(const mi_session *ss);

/* Collective: gather every rank's metrics and, on rank 0, print them as a
 * JSON array (key "ranks") to f, per forward pass averages included. */
void session_metrics_json(mi_session *ss, FILE *f);

/* Collective: per-rank metrics as a human-readable table on rank 0's stderr. */
void session_metrics_table(mi_session *ss);

/* ---- journal.c: generate --journal / --resume ---- */
#include <stdint.h>
typedef struct {
    char model[4096];       /* the model file's path when the journal was begun */
    char model_name[64];    /* its config: a resumed run must load the same model */
    int n_layers, dim, hidden_dim, vocab_size;
    char dtypes[160];       /* mi_config_dtype_summary: a resumed run must compute with the same weights */
    uint64_t model_bytes, model_hash; /* the model file's size and mi_hash64 of its bytes (common.h
                               mi_file_fingerprint): a resumed run must load this very file */
    char *prompt;           /* the prompt text, as given */
    int chat;               /* --chat: the prompt is a user message in the model's chat template */
    char *system, *chat_template; /* --chat's --system and --chat-template (NULL: not given) */
    int n_prompt, *prompt_ids; /* [n_prompt] its tokens, BOS first: what the tokenizer makes of the prompt */
    long steps;             /* tokens asked for */
    double temperature, topp;
    int top_k;              /* 0: off */
    uint64_t seed;
    int ignore_eos;
    int n_out, *out;        /* [n_out] tokens generated so far */
    uint64_t rng;           /* the sampler's state after out[n_out - 1] was sampled */
    int done;               /* 1: the generation ended (steps reached, or BOS/EOS) */
    int done_line;          /* journal_read: the journal's line of "done" (0: none) */
    long valid_bytes;       /* journal_read: the bytes of its whole lines */
    uint64_t check;         /* the last line's check value: each line's is mi_hash64 of its token and
                               state going on from the line before's, the request's of its fields */
    int edited_line;        /* journal_read: the first line whose check value is not that of its
                               contents (0: none). Left to the caller to report after its own
                               checks of the request, which name what was changed more exactly */
    /* the distributed options that went into the tokens (--planner, --wire-dtype, --prune-ffn, ...),
     * as given: n_options strings packed one after another, each NUL-terminated, options_len bytes */
    char *options;
    int n_options;
    size_t options_len;
    int sync;               /* --journal-sync: each line reaches the disk before the next token */
    int fd;                 /* open to append (journal_begin, journal_append_open), else -1 */
} gen_journal;

/* Start a journal at path: the request's line (written whole, synced,
 * renamed into place; its check value set in j->check), then path open to
 * append (j->fd). journal_append_open reopens an
 * existing one to go on, first cutting it to keep_bytes (the whole lines
 * journal_read found; -1: as it is). journal_token appends a token, the
 * sampler's state after it and the line's check value (from j->check, which
 * it advances); journal_finish appends "done" and its check value (going
 * on from the last token line's) and closes. With
 * j->sync each line is on disk (fdatasync) before they return. Each returns 0
 * or -1 with one line in err. */
int journal_begin(const char *path, gen_journal *j, char *err);
int journal_append_open(const char *path, gen_journal *j, long keep_bytes, char *err);
int journal_token(gen_journal *j, int token, uint64_t rng, char *err);
int journal_finish(gen_journal *j, char *err);
/* Read a journal strictly, as the record of one run: unknown or duplicate
 * keys, fields out of range, a version before 6 (no fingerprint or check
 * values, or a "done" without one: to be rerun), a first sampler state not the seed's, token ids past
 * vocab_size, lines that are not token lines, a sampler state that does not
 * follow from the one before (mi_sampler_advance when sampled, unchanged when
 * greedy): one line in err naming the journal's line, -1. A check value that
 * does not match its line is not refused here but set in j->edited_line. A
 * torn last line is dropped. "done" before the tokens asked for when the run ignored
 * end tokens is refused; what needs the model (its fingerprint, the prompt's
 * tokens, end tokens, that an early "done" follows an end token) the caller
 * checks. journal_free releases it. */
int journal_read(const char *path, gen_journal *j, char *err);
void journal_free(gen_journal *j);

#endif
