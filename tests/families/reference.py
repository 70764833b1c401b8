#!/usr/bin/python3
"""Reference forward pass in float64 PyTorch for llama, qwen2, qwen3, gemma3, gpt2, qwen2moe and qwen3moe
HF folders.

  /usr/bin/python3 tests/families/reference.py --model HF_DIR --tokens 1,2,3 [--all] [--out FILE]

prints (or writes to FILE) JSON {"logits": [[...]], "n_vocab": V, "positions": [...]}: the logits of
the last position, or of every position with --all. The folder needs config.json and
model.safetensors (or model.safetensors.index.json and its shards), read by safetensors_io.

Written from the published architectures (Hugging Face modeling_llama/qwen2/qwen3/gemma3/gpt2):
  RMSNorm   x / sqrt(mean(x^2) + eps) * w   (Gemma 3: * (1 + w))
  RoPE      rotate-half on q and k (pairs i and i + head_dim/2), inv_freq = theta^(-2i/head_dim);
            Llama 3 rope scaling divides the low frequencies by factor and blends the middle band;
            Gemma 3's local layers use rope_local_base_freq, its global ones rope_theta (and
            rope_scaling when given)
  attention causal softmax(q k^T * scale) v with grouped kv heads (query head h reads kv head
            h // (n_heads / n_kv_heads)); scale 1/sqrt(head_dim), Gemma 3 query_pre_attn_scalar^-0.5;
            Gemma 3's local layers mask a key at distance >= sliding_window (HF: kv > q - window)
  qwen2     biases on q, k, v;  qwen3 and gemma3: RMSNorm over head_dim on q and k before RoPE
  gemma3    embeddings * sqrt(hidden_size) (in the weights' dtype, as HF), norms after attention and
            after the FFN too, GeGLU with tanh GELU
  qwen2moe, qwen3moe  qwen2's / qwen3's attention; the FFN a sparse MoE block as transformers'
            Qwen2MoeSparseMoeBlock: softmax over all router logits, top-k, renormalised only with
            norm_topk_prob, weighted sum of the chosen SwiGLU experts, plus (qwen2moe) the shared
            expert times sigmoid(shared_expert_gate h)
  gpt2      learned positions, LayerNorm with bias, fused QKV (Conv1D [in, out]) with biases,
            GELU tanh, logits from the tied wte
Everything is computed in float64 from the stored weights (bf16/f16 widened exactly).
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families as fm  # noqa: E402
import safetensors_io as st  # noqa: E402

TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load(model_dir):
    """(config dict, {name: float64 tensor}) of a HF folder."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arrays = st.read_folder(model_dir)
    return cfg, {k: torch.from_numpy(v).to(torch.float64) for k, v in arrays.items()}


def weights_from_numpy(arrays):
    return {k: torch.from_numpy(v).to(torch.float64) for k, v in arrays.items()}


def act(name, x):
    if name == "silu":
        return x * torch.sigmoid(x)
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    raise ValueError("config.json: activation %r is not supported" % name)


def rms_norm(x, w, eps, plus_one=False):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * ((1.0 + w) if plus_one else w)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def inv_freq(hd, base, scaling=None):
    """float64 [hd/2] RoPE inverse frequencies, with linear or llama3 rope scaling."""
    f = 1.0 / base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    if not scaling:
        return f
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return f
    factor = float(scaling["factor"])
    if kind == "linear":
        return f / factor
    if kind == "llama3":
        lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > old / lo, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        return torch.where(medium, blended, scaled)
    raise ValueError("config.json: rope scaling %r is not supported" % kind)


def rope(x, freqs):
    """Rotate-half RoPE of x [heads, T, hd] at positions 0..T-1."""
    T, hd = x.shape[1], x.shape[2]
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos + rot * sin


def attend(q, k, v, scale, window=None, softcap=None):
    """Causal attention; q [H, T, hd], k/v [KV, T, hd]; a key at distance >= window is masked."""
    H, T = q.shape[0], q.shape[1]
    rep = H // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = q @ k.transpose(1, 2) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if window is not None:
        allowed = allowed & (i - j < window)
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


def _decoder_layer(cfg, W, x, il, fam):
    p = "model.layers.%d." % il
    H, KV, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], fm.head_dim(cfg), cfg["rms_norm_eps"]
    gem = fam == "gemma3"
    T = x.shape[0]
    h = rms_norm(x, W[p + "input_layernorm.weight"], eps, gem)
    q, k, v = (h @ W[p + "self_attn.%s_proj.weight" % n].T for n in "qkv")
    if fam in ("qwen2", "qwen2moe") or cfg.get("attention_bias"):
        q, k, v = (t + W[p + "self_attn.%s_proj.bias" % n] for t, n in zip((q, k, v), "qkv"))
    q, k, v = q.view(T, H, hd).transpose(0, 1), k.view(T, KV, hd).transpose(0, 1), v.view(T, KV, hd).transpose(0, 1)
    if fam in ("qwen3", "gemma3", "qwen3moe"):
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps, gem)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps, gem)
    window, scale = None, hd ** -0.5
    freqs = inv_freq(hd, cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling"))
    if gem:
        scale = cfg["query_pre_attn_scalar"] ** -0.5
        if fm.layer_types(cfg)[il] == "sliding_attention":
            window = cfg["sliding_window"]
            freqs = inv_freq(hd, cfg.get("rope_local_base_freq", 10000.0))
    q, k = rope(q, freqs), rope(k, freqs)
    o = attend(q, k, v, scale, window, cfg.get("attn_logit_softcapping") if gem else None)
    o = o.transpose(0, 1).reshape(T, H * hd) @ W[p + "self_attn.o_proj.weight"].T
    if gem:
        o = rms_norm(o, W[p + "post_attention_layernorm.weight"], eps, True)
        h = rms_norm(x + o, W[p + "pre_feedforward_layernorm.weight"], eps, True)
    else:
        h = rms_norm(x + o, W[p + "post_attention_layernorm.weight"], eps)
    x = x + o
    if fm.is_moe(cfg):
        return x + moe_block(cfg, W, p, h)
    a = act(cfg.get("hidden_activation") or cfg.get("hidden_act", "silu"), h @ W[p + "mlp.gate_proj.weight"].T)
    m = (a * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    if gem:
        m = rms_norm(m, W[p + "post_feedforward_layernorm.weight"], eps, True)
    return x + m


def swiglu(W, p, h):
    return (act("silu", h @ W[p + "gate_proj.weight"].T) * (h @ W[p + "up_proj.weight"].T)) @ W[p + "down_proj.weight"].T


def moe_block(cfg, W, p, h):
    """transformers' Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock on h [T, D], in its order: softmax of
    the router logits over every expert, top-k of those weights, renormalised to sum 1 only when
    norm_topk_prob, each chosen expert's output times its weight summed over the experts in index order
    (index_add_), then the shared expert times sigmoid(shared_expert_gate h) added (qwen2moe)."""
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(h @ W[p + "mlp.gate.weight"].T, dim=-1)
    weights, chosen = torch.topk(probs, k, dim=-1)
    if cfg.get("norm_topk_prob", False):
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        rows, slot = torch.where(chosen == e)
        if len(rows):
            out[rows] += swiglu(W, p + "mlp.experts.%d." % e, h[rows]) * weights[rows, slot, None]
    if fm.family(cfg) == "qwen2moe" and cfg.get("shared_expert_intermediate_size"):
        gate = torch.sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].T)
        out = out + gate * swiglu(W, p + "mlp.shared_expert.", h)
    return out


def decoder_forward(cfg, W, tokens):
    """Logits [T, V] of llama, qwen2, qwen3 and gemma3 configs."""
    fam = fm.family(cfg)
    x = W["model.embed_tokens.weight"][tokens]
    if fam == "gemma3":
        # HF multiplies by sqrt(hidden_size) cast to the weights' dtype (bf16: sqrt(3072) -> 55.5)
        dt = TORCH_DTYPE.get(cfg.get("torch_dtype"), torch.float32)
        x = x * torch.tensor(math.sqrt(cfg["hidden_size"]), dtype=torch.float32).to(dt).to(torch.float64)
    for il in range(cfg["num_hidden_layers"]):
        x = _decoder_layer(cfg, W, x, il, fam)
    x = rms_norm(x, W["model.norm.weight"], cfg["rms_norm_eps"], fam == "gemma3")
    head = W["model.embed_tokens.weight"] if fm.tied(cfg) else W["lm_head.weight"]
    logits = x @ head.T
    cap = cfg.get("final_logit_softcapping") if fam == "gemma3" else None
    return torch.tanh(logits / cap) * cap if cap else logits


def gpt2_forward(cfg, W, tokens):
    """Logits [T, V] of a gpt2 config."""
    D, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T, hd = len(tokens), cfg["n_embd"] // cfg["n_head"]
    x = W["wte.weight"][tokens] + W["wpe.weight"][:T]
    for il in range(cfg["n_layer"]):
        p = "h.%d." % il
        h = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # Conv1D: x @ W[in, out]
        q, k, v = (t.view(T, H, hd).transpose(0, 1) for t in qkv.split(D, -1))
        o = attend(q, k, v, hd ** -0.5 if cfg.get("scale_attn_weights", True) else 1.0)
        x = x + o.transpose(0, 1).reshape(T, D) @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = act(cfg.get("activation_function", "gelu_new"), h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return x @ W["wte.weight"].T


def forward(cfg, W, tokens):
    """float64 logits [len(tokens), vocab] of a config and its weights."""
    V = cfg["vocab_size"]
    if not tokens:
        raise ValueError("no tokens")
    bad = [t for t in tokens if not 0 <= t < V]
    if bad:
        raise ValueError("token ids %s are outside the vocabulary [0, %d)" % (bad[:5], V))
    tokens = torch.tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        if fm.family(cfg) == "gpt2":
            if len(tokens) > cfg["n_positions"]:
                raise ValueError("%d tokens exceed n_positions %d" % (len(tokens), cfg["n_positions"]))
            return gpt2_forward(cfg, W, tokens)
        return decoder_forward(cfg, W, tokens)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF folder (config.json + safetensors)")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--all", action="store_true", help="logits of every position, not only the last")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
        cfg, W = load(args.model)
        logits = forward(cfg, W, tokens)
    except (OSError, ValueError, KeyError) as e:
        print("reference.py: %s: %s" % (args.model, e), file=sys.stderr)
        return 1
    rows = logits if args.all else logits[-1:]
    positions = list(range(len(tokens))) if args.all else [len(tokens) - 1]
    doc = json.dumps({"logits": rows.tolist(), "n_vocab": cfg["vocab_size"], "positions": positions})
    if args.out:
        with open(args.out, "w") as f:
            f.write(doc)
    else:
        print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
