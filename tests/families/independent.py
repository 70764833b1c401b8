"""A second, independent forward pass in numpy, written the way llama.cpp sees a model.

It reads the GGUF-named, GGUF-converted arrays (hf_to_gguf.gguf_arrays) rather than the HF ones,
and loops over positions and heads instead of batching:
  - llama rotates ADJACENT pairs (2i, 2i+1) of the permuted q/k rows, as complex numbers, with
    theta_i = pos * base^(-2i/head_dim) / rope_freqs[i] (llama.cpp's Llama 3 scaling);
  - qwen2, qwen3, gemma3 rotate pairs (i, i + head_dim/2) ("NEOX");
  - gemma3's norm weights are used as stored (1 + w already), its local layers attend to the
    keys with pos - key < sliding_window and rotate with rope.freq_base_swa;
  - gpt2 uses the fused attn_qkv rows [q; k; v] in [out, in] layout.
So agreeing with reference.py checks the reference, the weight conversion and the two RoPE
layouts against one another.
"""

import math

import numpy as np

import families as fm


def _rms(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def _ln(x, w, b, eps):
    mu = float(np.mean(x))
    var = float(np.mean((x - mu) ** 2))
    return (x - mu) / math.sqrt(var + eps) * w + b


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _rotate(vec, pos, base, neox, divisors=None):
    """RoPE of one head vector at one position."""
    hd = vec.shape[0]
    out = vec.copy()
    for i in range(hd // 2):
        theta = pos * base ** (-2.0 * i / hd)
        if divisors is not None:
            theta /= divisors[i]
        a, b = (i, i + hd // 2) if neox else (2 * i, 2 * i + 1)
        z = complex(vec[a], vec[b]) * complex(math.cos(theta), math.sin(theta))
        out[a], out[b] = z.real, z.imag
    return out


def _softmax_attend(q, keys, values, scale, visible):
    scores = np.array([q @ keys[j] * scale if visible(j) else -np.inf for j in range(len(keys))])
    p = np.exp(scores - scores.max())
    p /= p.sum()
    return sum(p[j] * values[j] for j in range(len(keys)) if p[j] > 0)


def forward(cfg, G, tokens):
    """float64 logits [T, V] from GGUF-named arrays G (torch layout [out, in])."""
    if fm.family(cfg) == "gpt2":
        return _gpt2(cfg, G, tokens)
    return _rope_model(cfg, G, tokens)


def _attention(cfg, G, il, xs, fam):
    """Attention outputs (before the residual) of one layer for every position."""
    p = "blk.%d." % il
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], fm.head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    local = fam == "gemma3" and fm.layer_types(cfg)[il] == "sliding_attention"
    base = cfg.get("rope_local_base_freq", 10000.0) if local else cfg.get("rope_theta", 10000.0)
    divisors = G.get("rope_freqs.weight") if fam == "llama" else None
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if fam == "gemma3" else 1.0 / math.sqrt(hd)
    Q, K, V = [], [], []
    for pos, x in enumerate(xs):
        h = _rms(x, G[p + "attn_norm.weight"], eps)
        q, k, v = (G[p + "attn_%s.weight" % n] @ h for n in "qkv")
        if p + "attn_q.bias" in G:
            q, k, v = q + G[p + "attn_q.bias"], k + G[p + "attn_k.bias"], v + G[p + "attn_v.bias"]
        qh, kh = q.reshape(H, hd), k.reshape(KV, hd)
        if p + "attn_q_norm.weight" in G:
            qh = np.array([_rms(r, G[p + "attn_q_norm.weight"], eps) for r in qh])
            kh = np.array([_rms(r, G[p + "attn_k_norm.weight"], eps) for r in kh])
        Q.append([_rotate(r, pos, base, fam != "llama", divisors) for r in qh])
        K.append([_rotate(r, pos, base, fam != "llama", divisors) for r in kh])
        V.append(v.reshape(KV, hd))
    outs = []
    for pos in range(len(xs)):
        heads = []
        for h in range(H):
            g = h // (H // KV)  # the kv head this query head shares

            def visible(j, pos=pos):
                return j <= pos and (not local or pos - j < cfg["sliding_window"])
            heads.append(_softmax_attend(Q[pos][h], [K[j][g] for j in range(len(xs))],
                                         [V[j][g] for j in range(len(xs))], scale, visible))
        outs.append(G[p + "attn_output.weight"] @ np.concatenate(heads))
    return outs


def _experts(cfg, G, p, h):
    """One position's mixture of experts from llama.cpp's stacked arrays (ffn_*_exps [E, rows, cols]):
    the k largest routing probabilities (stable order: ties to the lower expert), optionally scaled to
    sum 1, each expert's SwiGLU output weighted; plus the gated shared expert where there is one."""
    logit = G[p + "ffn_gate_inp.weight"] @ h
    prob = np.exp(logit - logit.max())
    prob = prob / prob.sum()
    top = np.argsort(-prob, kind="stable")[:cfg["num_experts_per_tok"]]
    w = prob[top] / (prob[top].sum() if cfg.get("norm_topk_prob") else 1.0)
    out = np.zeros_like(h)
    for e, we in zip(top, w):
        up = _silu(G[p + "ffn_gate_exps.weight"][e] @ h) * (G[p + "ffn_up_exps.weight"][e] @ h)
        out = out + we * (G[p + "ffn_down_exps.weight"][e] @ up)
    if p + "ffn_gate_inp_shexp.weight" in G:
        gate = 1.0 / (1.0 + math.exp(-float(G[p + "ffn_gate_inp_shexp.weight"].reshape(-1) @ h)))
        up = _silu(G[p + "ffn_gate_shexp.weight"] @ h) * (G[p + "ffn_up_shexp.weight"] @ h)
        out = out + gate * (G[p + "ffn_down_shexp.weight"] @ up)
    return out


def _rope_model(cfg, G, tokens):
    fam = fm.family(cfg)
    eps = cfg["rms_norm_eps"]
    xs = [G["token_embd.weight"][t].copy() for t in tokens]
    if fam == "gemma3":
        xs = [x * math.sqrt(cfg["hidden_size"]) for x in xs]
    for il in range(cfg["num_hidden_layers"]):
        p = "blk.%d." % il
        att = _attention(cfg, G, il, xs, fam)
        new = []
        for x, a in zip(xs, att):
            if fam == "gemma3":
                x = x + _rms(a, G[p + "post_attention_norm.weight"], eps)
                h = _rms(x, G[p + "ffn_norm.weight"], eps)
                m = G[p + "ffn_down.weight"] @ (_gelu_tanh(G[p + "ffn_gate.weight"] @ h) * (G[p + "ffn_up.weight"] @ h))
                new.append(x + _rms(m, G[p + "post_ffw_norm.weight"], eps))
            elif fm.is_moe(cfg):
                x = x + a
                new.append(x + _experts(cfg, G, p, _rms(x, G[p + "ffn_norm.weight"], eps)))
            else:
                x = x + a
                h = _rms(x, G[p + "ffn_norm.weight"], eps)
                m = G[p + "ffn_down.weight"] @ (_silu(G[p + "ffn_gate.weight"] @ h) * (G[p + "ffn_up.weight"] @ h))
                new.append(x + m)
        xs = new
    out = G.get("output.weight", G["token_embd.weight"])
    return np.array([out @ _rms(x, G["output_norm.weight"], eps) for x in xs])


def _gpt2(cfg, G, tokens):
    D, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd = D // H
    xs = [G["token_embd.weight"][t] + G["position_embd.weight"][i] for i, t in enumerate(tokens)]
    for il in range(cfg["n_layer"]):
        p = "blk.%d." % il
        qkv = [G[p + "attn_qkv.weight"] @ _ln(x, G[p + "attn_norm.weight"], G[p + "attn_norm.bias"], eps)
               + G[p + "attn_qkv.bias"] for x in xs]
        new = []
        for pos, x in enumerate(xs):
            heads = []
            for h in range(H):
                sl = slice(h * hd, (h + 1) * hd)
                heads.append(_softmax_attend(qkv[pos][:D][sl], [r[D:2 * D][sl] for r in qkv],
                                             [r[2 * D:][sl] for r in qkv], 1.0 / math.sqrt(hd),
                                             lambda j, pos=pos: j <= pos))
            x = x + G[p + "attn_output.weight"] @ np.concatenate(heads) + G[p + "attn_output.bias"]
            h = _ln(x, G[p + "ffn_norm.weight"], G[p + "ffn_norm.bias"], eps)
            m = _gelu_tanh(G[p + "ffn_up.weight"] @ h + G[p + "ffn_up.bias"])
            new.append(x + G[p + "ffn_down.weight"] @ m + G[p + "ffn_down.bias"])
        xs = new
    return np.array([G["output.weight"] @ _ln(x, G["output_norm.weight"], G["output_norm.bias"], eps) for x in xs])
