"""tokenizer.json + tokenizer_config.json -> GGUF tokenizer.* key-values, as llama.cpp lays them out.

Two kinds, as llama.cpp's converter writes them:
  "gpt2"  byte-level BPE (Llama 3, Qwen, GPT-2): tokens as in the vocabulary (byte-level strings),
          token_type (1 normal, 3 control = special added tokens and ones that look special such as
          <|...|>, 4 user-defined = other added tokens, 5 unused = "[PAD<i>]" filling ids the
          tokenizer lacks up to vocab_size), merges ("a b"; a space inside a part of the
          list-of-pairs format becomes U+0120), pre (llama-bpe, qwen2, gpt-2).
  "llama" SentencePiece-style BPE with byte fallback (Llama 2/TinyLlama, Gemma 3): tokens, scores,
          token_type (6 for <0xXX> bytes, 2 for unk), pre "default", add_space_prefix.
          tokenizer.json carries no SentencePiece scores, so a token's score here is minus the rank
          of the first merge that forms it (0 for tokens no merge forms): a tokenizer that merges
          the highest-scoring pair first then follows the merge order of tokenizer.json.
Tokens with ids >= vocab_size are left out (Gemma 3's tokenizer lists <image_soft_token> = 262144).
Special ids as gguf-py's SpecialVocab finds them: tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask
token text looked up among added_tokens, else config.json's *_token_id; add_bos/add_eos from
tokenizer_config.json when they are booleans; chat_template when it is a string.
"""

import json
import os
import re

import gguf_file as gf

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# the pre-tokenizer regexes of the known byte-level tokenizers -> llama.cpp's pre names
_PRE_OF_REGEX = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
}
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>\Z")


def looks_special(tok):
    """llama.cpp's does_token_look_special: added tokens marked non-special that are control tokens."""
    return (tok in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (tok.startswith("<|") and tok.endswith("|>"))
            or (tok.startswith("<｜") and tok.endswith("｜>")) or (tok.startswith("<unused") and tok.endswith(">")))


def _walk(node, typ):
    """Every dict with "type" == typ inside a tokenizer.json component (Sequence or not)."""
    if isinstance(node, dict):
        if node.get("type") == typ:
            yield node
        for v in node.values():
            yield from _walk(v, typ)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, typ)


def _pairs(merges):
    for m in merges:
        yield tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1))


def kind_of(tj):
    """'gpt2' (byte-level BPE) or 'llama' (SentencePiece-style BPE with byte fallback)."""
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError("tokenizer.json: model type %r is not BPE" % model.get("type"))
    if any(True for _ in _walk(tj.get("pre_tokenizer"), "ByteLevel")):
        return "gpt2"
    if model.get("byte_fallback"):
        return "llama"
    raise ValueError("tokenizer.json: neither byte-level nor byte-fallback BPE")


def _pre_name(tj):
    for split in _walk(tj.get("pre_tokenizer"), "Split"):
        regex = split.get("pattern", {}).get("Regex")
        if regex in _PRE_OF_REGEX:
            return _PRE_OF_REGEX[regex]
    bl = list(_walk(tj.get("pre_tokenizer"), "ByteLevel"))
    if bl and bl[0].get("use_regex", True):
        return "gpt-2"
    return "default"


def _special_ids(tj, tc, cfg, n_vocab):
    added = tj.get("added_tokens", [])
    ids = {}
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        entry = tc.get(typ + "_token")
        text = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(text, str):
            tid = next((a["id"] for a in added if a.get("content") == text), None)
            if isinstance(tid, int) and 0 <= tid < n_vocab:
                ids[typ] = tid
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        tid = cfg.get(typ + "_token_id")
        if typ not in ids and isinstance(tid, int) and 0 <= tid < n_vocab:
            ids[typ] = tid
    return ids


def _id_table(tj, n_vocab):
    id2tok = {}
    for tok, i in tj["model"]["vocab"].items():
        if i < n_vocab:
            id2tok[i] = tok
    added = {}
    for a in tj.get("added_tokens", []):
        if a["id"] < n_vocab:
            id2tok[a["id"]] = a["content"]
            added[a["id"]] = a
    return id2tok, added


def _gpt2_kind(tj, n_vocab):
    id2tok, added = _id_table(tj, n_vocab)
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in id2tok:
            tokens.append("[PAD%d]" % i)
            types.append(UNUSED)
            continue
        tok = id2tok[i]
        if i in added:
            if added[i].get("special") or looks_special(tok):
                types.append(CONTROL)
            else:
                tok = tok.replace("\u2581", " ")  # llama.cpp pre-normalizes user-defined spaces
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(tok)
    merges = [" ".join(p.replace(" ", chr(ord(" ") + 256)) for p in pair) for pair in _pairs(tj["model"].get("merges", []))]
    kv = [("tokenizer.ggml.model", gf.STRING, "gpt2"), ("tokenizer.ggml.pre", gf.STRING, _pre_name(tj)),
          ("tokenizer.ggml.tokens", gf.ARRAY, tokens, gf.STRING),
          ("tokenizer.ggml.token_type", gf.ARRAY, types, gf.INT32)]
    if merges:
        kv.append(("tokenizer.ggml.merges", gf.ARRAY, merges, gf.STRING))
    return kv


def merge_scores(tj):
    """{token: -(rank of the first merge forming it)} from tokenizer.json's merges."""
    scores = {}
    for rank, (a, b) in enumerate(_pairs(tj["model"].get("merges", []))):
        scores.setdefault(a + b, -float(rank))
    return scores


def _llama_kind(tj, n_vocab):
    id2tok, added = _id_table(tj, n_vocab)
    unk = tj["model"].get("unk_token")
    ranks = merge_scores(tj)
    tokens, scores, types = [], [], []
    for i in range(n_vocab):
        tok = id2tok.get(i)
        if tok is None:
            tokens.append("[PAD%d]" % i)
            scores.append(0.0)
            types.append(UNUSED)
            continue
        if i in added and (added[i].get("special") or looks_special(tok)):
            t = CONTROL
        elif i in added:
            t = USER_DEFINED
        elif tok == unk:
            t = UNKNOWN
        elif _BYTE_TOKEN.match(tok):
            t = BYTE
        else:
            t = NORMAL
        if tok == unk:
            t = UNKNOWN
        tokens.append(tok)
        scores.append(ranks.get(tok, 0.0) if t == NORMAL else 0.0)
        types.append(t)
    prepend = any(True for _ in _walk(tj.get("normalizer"), "Prepend"))
    return [("tokenizer.ggml.model", gf.STRING, "llama"), ("tokenizer.ggml.pre", gf.STRING, "default"),
            ("tokenizer.ggml.tokens", gf.ARRAY, tokens, gf.STRING),
            ("tokenizer.ggml.scores", gf.ARRAY, scores, gf.FLOAT32),
            ("tokenizer.ggml.token_type", gf.ARRAY, types, gf.INT32),
            ("tokenizer.ggml.add_space_prefix", gf.BOOL, prepend)]


def tokenizer_kvs(tok_dir, cfg):
    """GGUF tokenizer.* key-values from tok_dir/tokenizer.json (+ tokenizer_config.json) for a config."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tc = {}
    tc_path = os.path.join(tok_dir, "tokenizer_config.json")
    if os.path.exists(tc_path):
        with open(tc_path, encoding="utf-8") as f:
            tc = json.load(f)
    n_vocab = cfg["vocab_size"]
    kind = kind_of(tj)
    kv = _gpt2_kind(tj, n_vocab) if kind == "gpt2" else _llama_kind(tj, n_vocab)
    prefix_kv = [k for k in kv if k[0] == "tokenizer.ggml.add_space_prefix"]
    kv = [k for k in kv if k[0] != "tokenizer.ggml.add_space_prefix"]
    for typ, tid in _special_ids(tj, tc, cfg, n_vocab).items():
        if typ == "cls":
            continue  # gguf-py has no writer for a cls id and skips it
        key = {"unk": "unknown", "sep": "seperator", "pad": "padding"}.get(typ, typ)
        kv.append(("tokenizer.ggml.%s_token_id" % key, gf.UINT32, tid))
    for typ in ("bos", "eos"):
        if isinstance(tc.get("add_%s_token" % typ), bool):
            kv.append(("tokenizer.ggml.add_%s_token" % typ, gf.BOOL, tc["add_%s_token" % typ]))
    kv += prefix_kv
    if isinstance(tc.get("chat_template"), str):
        kv.append(("tokenizer.chat_template", gf.STRING, tc["chat_template"]))
    return kv
