"""HF weights and config.json -> GGUF tensors and metadata, with llama.cpp's conventions.

What llama.cpp's convert_hf_to_gguf.py does, per family (learned from it, written anew):
  llama  q_proj/k_proj rows permuted from HF's rotate-half order into Meta's interleaved pairs
         (llama.cpp rotates llama's q/k as adjacent pairs); Llama 3 rope scaling becomes the F32
         tensor rope_freqs.weight [head_dim/2] of per-frequency divisors (no metadata key); the
         converter also writes vocab_size and rope.dimension_count; tied models have no output.weight.
  qwen2, qwen3, gemma3  HF order kept (llama.cpp rotates them NEOX style, i.e. rotate-half).
  gemma3 every *norm.weight stored as 1 + w (Gemma3RMSNorm multiplies by 1 + w); sliding_window
         written; the global rope_theta as rope.freq_base and rope_local_base_freq as
         rope.freq_base_swa; the attention scale and the 5:1 local:global pattern are not keys
         (llama.cpp fixes pattern 6 and 1/sqrt(head_dim) for every size but 27B).
  gpt2   Conv1D weights ([in, out]) transposed to [out, in]; attn.bias (the mask buffer) dropped;
         output.weight written as a copy of token_embd (llama.cpp's gpt2 loader requires it).
  qwen2moe, qwen3moe (Qwen2MoeModel) each layer's experts stacked into 3-D tensors [E, rows, cols]
         ffn_{gate,up,down}_exps; the router ffn_gate_inp (always F32), the shared expert
         ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp kept [1, dim] as HF has it; keys
         expert_count, expert_used_count, expert_feed_forward_length (moe_intermediate_size) and
         expert_shared_feed_forward_length (qwen2moe); feed_forward_length stays intermediate_size.
Types: 1-D tensors, *_norm.weight, biases, position_embd and rope_freqs stay F32; every other
.weight gets the file's type (F16/Q8_0/Q4_0), F16 where a row is not a whole number of 32-blocks.
Shapes: a torch [rows, cols] array is ne = [cols, rows] (ne[0] contiguous).
"""

import math

import numpy as np

import families as fm
import ggml_quants as gq
import gguf_file as gf

FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_K_M": 15}  # llama.cpp's LlamaFileType
GGML_OF = {"f32": "F32", "f16": "F16", "q4_0": "Q4_0", "q8_0": "Q8_0"}
QUANT_VERSION = 2

_LAYER = {  # HF per-layer suffix -> GGUF per-layer suffix (llama, qwen2, qwen3)
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
_EXPERTS = {"gate_proj": "ffn_gate_exps.weight", "up_proj": "ffn_up_exps.weight", "down_proj": "ffn_down_exps.weight"}
_LAYER_GEMMA3 = dict(_LAYER, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
})
_GPT2_LAYER = {  # suffix -> (GGUF suffix, transpose the Conv1D weight)
    "ln_1.weight": ("attn_norm.weight", False), "ln_1.bias": ("attn_norm.bias", False),
    "attn.c_attn.weight": ("attn_qkv.weight", True), "attn.c_attn.bias": ("attn_qkv.bias", False),
    "attn.c_proj.weight": ("attn_output.weight", True), "attn.c_proj.bias": ("attn_output.bias", False),
    "ln_2.weight": ("ffn_norm.weight", False), "ln_2.bias": ("ffn_norm.bias", False),
    "mlp.c_fc.weight": ("ffn_up.weight", True), "mlp.c_fc.bias": ("ffn_up.bias", False),
    "mlp.c_proj.weight": ("ffn_down.weight", True), "mlp.c_proj.bias": ("ffn_down.bias", False),
}
_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight", "wte.weight": "token_embd.weight",
           "wpe.weight": "position_embd.weight", "ln_f.weight": "output_norm.weight",
           "ln_f.bias": "output_norm.bias"}


def permute_qk(w, n_head):
    """HF rotate-half row order -> Meta's interleaved pairs, per head (convert_hf_to_gguf's permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w, n_head):
    """Inverse of permute_qk."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """float64 [head_dim/2]: llama.cpp's per-frequency divisors for rope_type llama3 (rope_freqs.weight)."""
    rs = cfg["rope_scaling"]
    hd, base = fm.head_dim(cfg), cfg.get("rope_theta", 10000.0)
    factor, lo, hi = rs.get("factor", 8.0), rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    lo_wavelen, hi_wavelen = old / lo, old / hi
    out = []
    for i in range(0, hd, 2):
        wavelen = 2 * math.pi * base ** (i / hd)
        if wavelen < hi_wavelen:
            out.append(1.0)
        elif wavelen > lo_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def is_llama3_scaled(cfg):
    rs = cfg.get("rope_scaling") or {}
    return str(rs.get("rope_type", rs.get("type", ""))).lower() == "llama3"


def gguf_arrays(cfg, weights, dtype=np.float32):
    """[(GGUF name, array in torch layout)] of HF weights, converted as llama.cpp does.

    dtype float32 is what a file holds before encoding; float64 keeps 1 + w and the rope factors
    unrounded (for comparisons against the float64 reference)."""
    fam = fm.family(cfg)
    if fam == "gpt2":
        return _gpt2_arrays(cfg, weights, dtype)
    out = []
    if fam == "llama" and is_llama3_scaled(cfg):
        out.append(("rope_freqs.weight", llama3_rope_factors(cfg).astype(dtype)))
    stacks = {}  # (block, GGUF suffix) -> [expert arrays], written once the block's last expert is read
    for name, a in weights.items():
        part = name.split(".")
        if len(part) == 8 and part[3] == "mlp" and part[4] == "experts":  # model.layers.B.mlp.experts.E.W.weight
            gname = "blk.%s.%s" % (part[2], _EXPERTS[part[6]])
            stacks.setdefault(gname, []).append(np.asarray(a))
            if len(stacks[gname]) == cfg["num_experts"]:
                out.append((gname, np.ascontiguousarray(np.stack(stacks.pop(gname)), dtype=dtype)))
            continue
        out.append(gguf_array(cfg, name, a, dtype))
    return out


def gguf_name(cfg, name):
    """The GGUF name of one HF tensor of a llama, qwen2, qwen3 or gemma3 config."""
    layer_map = _LAYER_GEMMA3 if fm.family(cfg) == "gemma3" else _LAYER
    if name in _GLOBAL:
        return _GLOBAL[name]
    if name.startswith("model.layers."):
        bid, suffix = name[len("model.layers."):].split(".", 1)
        if suffix in layer_map:
            return "blk.%s.%s" % (bid, layer_map[suffix])
    raise ValueError("no GGUF name for HF tensor %s" % name)


def gguf_array(cfg, name, a, dtype=np.float32):
    """(GGUF name, array) of one HF tensor of a llama, qwen2, qwen3 or gemma3 config (not gpt2,
    whose fused and copied tensors need the whole set); rope_freqs is not among them."""
    fam = fm.family(cfg)
    gname = gguf_name(cfg, name)
    if fam == "llama" and gname.endswith((".attn_q.weight", ".attn_q.bias")):
        a = permute_qk(a, cfg["num_attention_heads"])
    elif fam == "llama" and gname.endswith((".attn_k.weight", ".attn_k.bias")):
        a = permute_qk(a, cfg["num_key_value_heads"])
    a = np.ascontiguousarray(a, dtype=dtype)
    if fam == "gemma3" and name.endswith("norm.weight"):
        a = a + dtype(1.0)
    return gname, a


def _gpt2_arrays(cfg, weights, dtype):
    out = []
    for name, a in weights.items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # the causal-mask buffers are not weights
        if name in _GLOBAL:
            out.append((_GLOBAL[name], np.ascontiguousarray(a, dtype=dtype)))
            if name == "wte.weight":
                out.append(("output.weight", np.ascontiguousarray(a, dtype=dtype)))
            continue
        if not name.startswith("h."):
            raise ValueError("no GGUF name for HF tensor %s" % name)
        bid, suffix = name[2:].split(".", 1)
        if suffix not in _GPT2_LAYER:
            raise ValueError("no GGUF name for HF tensor %s" % name)
        gsuffix, transpose = _GPT2_LAYER[suffix]
        out.append(("blk.%s.%s" % (bid, gsuffix), np.ascontiguousarray(a.T if transpose else a, dtype=dtype)))
    # llama.cpp lists output.weight after the blocks; keep token_embd first, output last
    out.sort(key=lambda t: (t[0] == "output.weight",))
    return out


def tensor_type(name, shape, ftype):
    """The ggml type a tensor gets in a file of type ftype (f32, f16, q8_0, q4_0)."""
    if ftype == "f32" or len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return "F32"
    if name in ("position_embd.weight", "rope_freqs.weight") or name.endswith(".ffn_gate_inp.weight"):
        return "F32"  # llama.cpp keeps the router (FFN_GATE_INP) in F32
    t = GGML_OF[ftype]
    if t in ("Q8_0", "Q4_0") and shape[-1] % gq.QK:
        return "F16"  # convert_hf_to_gguf falls back to F16 when a row is no whole block
    return t


def gguf_tensors(cfg, weights, ftype):
    """[gguf_file.Tensor] of HF weights in a file of type ftype."""
    out = []
    for name, a in gguf_arrays(cfg, weights):
        t = tensor_type(name, a.shape, ftype)
        out.append(gf.Tensor(name, a.shape, t, gq.encode(a, t)))
    return out


def gguf_params(cfg, ftype, fixture):
    """The general.* and {arch}.* key-values (no tokenizer keys) of a GGUF of this config."""
    fam = fm.family(cfg)
    arch = fam
    U, F = gf.UINT32, gf.FLOAT32
    kv = [("general.architecture", gf.STRING, arch), ("general.type", gf.STRING, "model"),
          ("general.name", gf.STRING, "synthetic-" + fixture),
          ("general.description", gf.STRING, "synthetic: seeded random weights in the %s architecture, "
                                              "not a trained model (tests/families)" % arch)]
    a = arch + "."
    if fam == "gpt2":
        kv += [(a + "block_count", U, cfg["n_layer"]), (a + "context_length", U, cfg["n_ctx"]),
               (a + "embedding_length", U, cfg["n_embd"]), (a + "feed_forward_length", U, 4 * cfg["n_embd"]),
               (a + "attention.head_count", U, cfg["n_head"]),
               (a + "attention.layer_norm_epsilon", F, cfg["layer_norm_epsilon"])]
    else:
        kv += [(a + "block_count", U, cfg["num_hidden_layers"]),
               (a + "context_length", U, cfg["max_position_embeddings"]),
               (a + "embedding_length", U, cfg["hidden_size"]),
               (a + "feed_forward_length", U, cfg["intermediate_size"]),
               (a + "attention.head_count", U, cfg["num_attention_heads"]),
               (a + "attention.head_count_kv", U, cfg["num_key_value_heads"]),
               (a + "rope.freq_base", F, cfg.get("rope_theta", 10000.0))]
        if fam == "gemma3":
            kv.append((a + "rope.freq_base_swa", F, cfg.get("rope_local_base_freq", 10000.0)))
        kv.append((a + "attention.layer_norm_rms_epsilon", F, cfg["rms_norm_eps"]))
        if "head_dim" in cfg:
            kv += [(a + "attention.key_length", U, cfg["head_dim"]), (a + "attention.value_length", U, cfg["head_dim"])]
        if fam == "gemma3":
            kv.append((a + "attention.sliding_window", U, cfg["sliding_window"]))
        if fm.is_moe(cfg):
            kv += [(a + "expert_count", U, cfg["num_experts"]), (a + "expert_used_count", U, cfg["num_experts_per_tok"]),
                   (a + "expert_feed_forward_length", U, cfg["moe_intermediate_size"])]
            if cfg.get("shared_expert_intermediate_size"):
                kv.append((a + "expert_shared_feed_forward_length", U, cfg["shared_expert_intermediate_size"]))
    kv.append(("general.file_type", U, FILE_TYPE[ftype]))
    if fam == "llama":
        kv += [(a + "vocab_size", U, cfg["vocab_size"]), (a + "rope.dimension_count", U, fm.head_dim(cfg))]
    kv.append(("general.quantization_version", U, QUANT_VERSION))
    return kv
