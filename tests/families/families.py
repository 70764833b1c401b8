"""Small synthetic models of seven real families, in each family's Hugging Face layout.

Each entry of FIXTURES is one tiny config in the real model's proportions (named after the real
model it imitates) with the REAL vocabulary size, so the real tokenizers apply. The weights are
seeded random numbers, not a trained model: every config.json says "_synthetic": true.

  fixture     architecture  imitates                        vocab   dim  layers  heads/kv  head_dim
  llama3      llama         Llama 3.2 1B (rope llama3, tied) 128256  128    2      4/2       32
  tinyllama   llama         TinyLlama 1.1B (untied)          32000   128    2      8/1       16
  qwen2       qwen2         Qwen2.5 0.5B (q/k/v biases)      151936  128    2      4/2       32
  qwen3       qwen3         Qwen3 0.6B (q/k norms)           151936   64    2      4/2       32 (4*32 != 64)
  gemma3      gemma3        Gemma 3 1B (5 local + 1 global)  262144   64    6      4/1       32 (4*32 != 64)
  gpt2        gpt2          GPT-2 (learned positions)        50257    64    2      4/4       16
  qwen2moe    qwen2moe      Qwen1.5-MoE-A2.7B (8 experts,    151936   64    2      4/2       16
                            top-4, shared expert)
  qwen3moe    qwen3moe      Qwen3-30B-A3B (8 experts, top-2, 151936   64    2      4/2       32 (4*32 != 64)
                            norm_topk_prob)

Weights are generated per tensor from a seed and the tensor's name, so any subset can be rebuilt
alone and the same name always gets the same numbers.
"""

import zlib

import numpy as np

# std of the random weights: large enough that attention is not uniform and the logits of a
# 64-wide model are not all alike, small enough that nothing saturates
STD_EMBED = 0.05
STD_QK = 0.05
STD_LINEAR = 0.04
STD_BIAS = 0.05
STD_NORM = 0.05  # norm weights are 1 + N(0, STD_NORM) (Gemma stores the N(0, .) part only)
# the routers: wide enough that the top-k choice is clear (no near-ties the float32 and float64
# passes could resolve differently)
STD_ROUTER = 0.3


def _llama3():
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": True, "vocab_size": 128256,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
    }


def _tinyllama():
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 1,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "vocab_size": 32000,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "attention_bias": False, "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
    }


def _qwen2():
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 128, "intermediate_size": 704, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "vocab_size": 151936,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 2,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
    }


def _qwen3():
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": None, "tie_word_embeddings": True, "vocab_size": 151936,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 2, "initializer_range": 0.02,
        "use_cache": True,
    }


def _gemma3():
    n_layers, pattern = 6, 6
    # layer i is local (sliding) unless (i + 1) is a multiple of the pattern, as in HF and llama.cpp
    types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 64, "intermediate_size": 384, "num_hidden_layers": n_layers,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "query_pre_attn_scalar": 32, "sliding_window": 4, "sliding_window_pattern": pattern,
        "layer_types": types, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
        "vocab_size": 262144, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
        "attn_logit_softcapping": None, "attention_bias": False, "attention_dropout": 0.0,
        "cache_implementation": "hybrid", "initializer_range": 0.02, "use_cache": True,
    }


def _qwen2moe():
    return {
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_experts": 8, "num_experts_per_tok": 4, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64, "norm_topk_prob": False, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "output_router_logits": False, "router_aux_loss_coef": 0.001,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "vocab_size": 151936,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 2,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
    }


def _qwen3moe():
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "output_router_logits": False, "router_aux_loss_coef": 0.001,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "vocab_size": 151936,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 48, "initializer_range": 0.02,
        "use_cache": True,
    }


def _gpt2():
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 1024, "n_ctx": 1024,
        "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
        "vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256,
        "scale_attn_weights": True, "initializer_range": 0.02, "use_cache": True,
        "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
    }


# fixture name -> (config builder, tokenizer folder names to try under --tokenizers DIR)
FIXTURES = {
    "llama3": (_llama3, ["llama3"]),
    "tinyllama": (_tinyllama, ["tinyllama", "llama2"]),
    "qwen2": (_qwen2, ["qwen2", "qwen3"]),
    "qwen3": (_qwen3, ["qwen3"]),
    "gemma3": (_gemma3, ["gemma3"]),
    "gpt2": (_gpt2, ["gpt2"]),
    "qwen2moe": (_qwen2moe, ["qwen2moe", "qwen3"]),
    "qwen3moe": (_qwen3moe, ["qwen3moe", "qwen3"]),
}
# the family names of the task map onto fixtures ("llama" is both llama configs)
ALIASES = {"llama": ["llama3", "tinyllama"]}


def fixture_names(requested=None):
    """Fixture names for a list of requested family/fixture names (all when None or empty)."""
    if not requested:
        return list(FIXTURES)
    out = []
    for r in requested:
        for name in ALIASES.get(r, [r]):
            if name not in FIXTURES:
                raise KeyError("unknown family %r (known: %s)" % (r, ", ".join(list(FIXTURES) + list(ALIASES))))
            if name not in out:
                out.append(name)
    return out


def config(name, dtype="float32"):
    """The config.json dict of a fixture; dtype is the torch_dtype the weights are stored in."""
    cfg = FIXTURES[name][0]()
    cfg["torch_dtype"] = dtype
    cfg["_synthetic"] = True
    cfg["_synthetic_note"] = ("seeded random weights in the %s architecture (%s), not a trained "
                              "model: written by tests/families/make_fixtures.py" % (cfg["model_type"], name))
    return cfg


def family(cfg):
    """The architecture of a config.json dict: llama, qwen2, qwen3, gemma3, gpt2, qwen2moe or qwen3moe."""
    mt = cfg.get("model_type")
    fam = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3",
           "gemma3": "gemma3", "gpt2": "gpt2", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}.get(mt)
    if fam is None:
        raise ValueError("config.json: model_type %r is none of llama, qwen2, qwen3, gemma3_text, gpt2, qwen2_moe, "
                         "qwen3_moe" % (mt,))
    return fam


def is_moe(cfg):
    return family(cfg) in ("qwen2moe", "qwen3moe")


def tied(cfg):
    """Whether lm_head shares the embedding, with each family's HF default when the key is absent."""
    default = family(cfg) in ("gemma3", "gpt2")
    return bool(cfg.get("tie_word_embeddings", default))


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def layer_types(cfg):
    """Gemma 3: per layer 'sliding_attention' or 'full_attention' (layer_types, else the pattern)."""
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    p = cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(cfg["num_hidden_layers"])]


def weight_specs(cfg):
    """[(HF tensor name, shape, kind)] in the order a HF checkpoint lists them.

    kind is one of embed, qk, linear, bias, norm (1 + noise), norm0 (Gemma's zero-centred norm),
    ln_w, ln_b (LayerNorm), pos (learned positions), mask (GPT-2's causal-mask buffer)."""
    fam = family(cfg)
    if fam == "gpt2":
        return _gpt2_specs(cfg)
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    norm = "norm0" if fam == "gemma3" else "norm"
    specs = [("model.embed_tokens.weight", (V, D), "embed")]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        specs.append((p + "input_layernorm.weight", (D,), norm))
        specs += [(p + "self_attn.q_proj.weight", (H * hd, D), "qk"),
                  (p + "self_attn.k_proj.weight", (KV * hd, D), "qk"),
                  (p + "self_attn.v_proj.weight", (KV * hd, D), "linear"),
                  (p + "self_attn.o_proj.weight", (D, H * hd), "linear")]
        if fam in ("qwen2", "qwen2moe"):
            specs += [(p + "self_attn.q_proj.bias", (H * hd,), "bias"),
                      (p + "self_attn.k_proj.bias", (KV * hd,), "bias"),
                      (p + "self_attn.v_proj.bias", (KV * hd,), "bias")]
        if fam in ("qwen3", "gemma3", "qwen3moe"):
            specs += [(p + "self_attn.q_norm.weight", (hd,), norm),
                      (p + "self_attn.k_norm.weight", (hd,), norm)]
        specs.append((p + "post_attention_layernorm.weight", (D,), norm))
        if fam == "gemma3":
            specs += [(p + "pre_feedforward_layernorm.weight", (D,), norm),
                      (p + "post_feedforward_layernorm.weight", (D,), norm)]
        if is_moe(cfg):
            specs += _moe_specs(cfg, p)
            continue
        specs += [(p + "mlp.gate_proj.weight", (F, D), "linear"),
                  (p + "mlp.up_proj.weight", (F, D), "linear"),
                  (p + "mlp.down_proj.weight", (D, F), "linear")]
    specs.append(("model.norm.weight", (D,), norm))
    if not tied(cfg):
        specs.append(("lm_head.weight", (V, D), "embed"))
    return specs


def _moe_specs(cfg, p):
    """A sparse MoE block's tensors (transformers' Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock)."""
    D, E, M = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
    specs = [(p + "mlp.gate.weight", (E, D), "router")]
    for e in range(E):
        q = p + "mlp.experts.%d." % e
        specs += [(q + "gate_proj.weight", (M, D), "linear"), (q + "up_proj.weight", (M, D), "linear"),
                  (q + "down_proj.weight", (D, M), "linear")]
    S = cfg.get("shared_expert_intermediate_size", 0) if family(cfg) == "qwen2moe" else 0
    if S:
        specs += [(p + "mlp.shared_expert.gate_proj.weight", (S, D), "linear"),
                  (p + "mlp.shared_expert.up_proj.weight", (S, D), "linear"),
                  (p + "mlp.shared_expert.down_proj.weight", (D, S), "linear"),
                  (p + "mlp.shared_expert_gate.weight", (1, D), "router")]
    return specs


def _gpt2_specs(cfg):
    D, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    F = cfg.get("n_inner") or 4 * D
    specs = [("wte.weight", (V, D), "embed"), ("wpe.weight", (P, D), "pos")]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        # Conv1D weights are stored [in, out]; the attn.bias buffer is the causal mask
        specs += [(p + "ln_1.weight", (D,), "ln_w"), (p + "ln_1.bias", (D,), "ln_b"),
                  (p + "attn.bias", (1, 1, P, P), "mask"),
                  (p + "attn.c_attn.weight", (D, 3 * D), "qk"), (p + "attn.c_attn.bias", (3 * D,), "bias"),
                  (p + "attn.c_proj.weight", (D, D), "linear"), (p + "attn.c_proj.bias", (D,), "bias"),
                  (p + "ln_2.weight", (D,), "ln_w"), (p + "ln_2.bias", (D,), "ln_b"),
                  (p + "mlp.c_fc.weight", (D, F), "linear"), (p + "mlp.c_fc.bias", (F,), "bias"),
                  (p + "mlp.c_proj.weight", (F, D), "linear"), (p + "mlp.c_proj.bias", (D,), "bias")]
    specs += [("ln_f.weight", (D,), "ln_w"), ("ln_f.bias", (D,), "ln_b")]
    return specs


def _tensor(seed, name, shape, kind):
    if kind == "mask":
        n = shape[-1]
        return np.tril(np.ones((n, n), dtype=np.float32)).reshape(shape)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    z = rng.standard_normal(shape, dtype=np.float32)
    std = {"embed": STD_EMBED, "qk": STD_QK, "linear": STD_LINEAR, "bias": STD_BIAS,
           "norm": STD_NORM, "norm0": STD_NORM, "ln_w": STD_NORM, "ln_b": 0.02, "pos": 0.02,
           "router": STD_ROUTER}[kind]
    z *= np.float32(std)
    if kind in ("norm", "ln_w"):
        z += np.float32(1.0)
    return z


def make_weights(cfg, seed=0):
    """{HF name: float32 array} for a config.json dict, in checkpoint order."""
    return {name: _tensor(seed, name, shape, kind) for name, shape, kind in weight_specs(cfg)}
