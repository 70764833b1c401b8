#!/usr/bin/python3
"""Convert a meshinfer HDF5 model (and its tokenizer, or a llama2.c tokenizer.bin)
into distributed-llama's model (.m) and tokenizer (.t) files, for side-by-side
benchmarks (jobs/experiments/bench_reference.sh). Written from the file formats as
distributed-llama's loader reads them (src/llm.cpp loadLlmHeader and
loadLlmNetWeight, src/tokenizer.cpp, src/nn/nn-quants.hpp); no code of it is used.

usage: to_dllama.py -m MODEL.h5 [--model-out OUT.m] [--tokenizer-out OUT.t]
                    [--weights f32|q40] [--tokenizer-bin tokenizer.bin] [--keep-ids]
                    [--tokenizer-json DIR] [--llama3-rope FACTOR,LOW,HIGH,ORIGINAL]
                    [--chat-template llama2|llama3|chatml|@FILE]

Model file (.m): int32 magic 0xA00ABCD, int32 header size (bytes of magic, size
and the pairs), int32 (key, value) pairs, then the tensors back to back:
  token embeddings (always f32) [vocab, dim]
  per layer: wq [q_dim, dim], wk, wv [kv_dim, dim], wo [dim, q_dim],
             w1 [hidden, dim], w2 [dim, hidden], w3 [hidden, dim]  (weight type)
             attention_norm [dim], ffn_norm [dim]                  (f32)
  final norm [dim] (f32), classifier [vocab, dim] (weight type; the embeddings
  again when our file shares them)
Matrices are row-major [out, in] (PyTorch's layout); our wo_t and w2_t are
transposed back. q40 is ggml's q4_0 block, 18 bytes: fp16 scale, then 16 bytes
holding element j in the low nibble and element j+16 in the high nibble,
x = d * (q - 8). That is exactly our q4_0 block, so q4_0 weights are repacked
bit for bit (both programs then multiply by the very same weights); fp32 weights
are quantized with the same rule as ggml / distributed-llama (d = max / -8).
RoPE: distributed-llama's "llama" RoPE rotates adjacent pairs (x[2i], x[2i+1]),
as llama2.c and we do, so q and k need no permutation.

Tokenizer file (.t): int32 magic 0x567124, int32 header size, (key, value)
pairs (version 1, vocab_size, max_token_length, bos_id, n_eos_tokens, add_bos,
and chat_template = its length in bytes when there is one), the template's
bytes, the EOS ids, then per token: float32 score, uint32 length, bytes.

Chat template: dllama-api (its HTTP server, chat completions only) refuses a
tokenizer without one. dllama does not interpret the template: it looks for a
marker in it ("[INST]": Llama 2, "<|start_header_id|>": Llama 3, "<|im_start|>":
ChatML, "<｜Assistant｜>": DeepSeek 3) and renders chats its own way. --chat-template
NAME writes a short template of that kind (llama2, llama3, chatml); @FILE writes the
file's text (a Jinja template, e.g. a tokenizer_config.json's chat_template), which
must hold one of the markers. With --tokenizer-json, tokenizer_config.json's
chat_template is written (when it holds a marker) unless --chat-template says otherwise.

Two things make distributed-llama's tokenizer differ from sentencepiece /
llama2.c, and the converter works around both so that it encodes a prompt into
the same tokens as we do:
 * It takes every id below bos_id as the "regular" vocabulary (merged by score)
   and every id from bos_id up as "special" tokens, matched as raw text prefixes
   in id order. With Llama 2's bos_id = 1 almost the whole vocabulary would be
   "special" and a prompt would not be BPE-encoded at all. Unless --keep-ids is
   given, the converter therefore moves BOS to the last id: new ids are
   0, 2, 3, ..., V-1 of the old vocabulary followed by old id 1, and the
   embedding and classifier rows are permuted the same way. The model computes
   exactly the same function; only the numbering of tokens changes (the
   matrices keep their shapes, so the work per token is unchanged).
 * It keeps no separate byte-fallback table: a byte token is a one-byte string.
   A byte whose string is also an ordinary token (e.g. "a") keeps the
   unreachable spelling "<0x61>" so that the encoder finds the ordinary token as
   sentencepiece does; other bytes (newline, bytes of UTF-8 sequences) become the
   raw byte, so that distributed-llama prints them. Byte-fallback tokens never
   merge in our encoder (nor in sentencepiece), but they would in dllama's; so a
   piece containing a character that exists only as a byte token (none in the
   Llama 2 vocabulary; about half of a `meshinfer synth` vocabulary, whose space
   is such a byte) is renamed "<unreachable ID>" and cannot be produced.
It adds no dummy prefix space: give it the prompt with a leading space
(" Once upon a time") to get our tokens for "Once upon a time".

Llama 3 (a model imported from GGUF or Hugging Face, byte-level BPE):
 * --tokenizer-json DIR takes the tokenizer from DIR/tokenizer.json (+ tokenizer_config.json)
   instead: every token as the bytes it stands for (the byte-level alphabet mapped back to
   bytes), score minus its id (dllama merges the pair whose token has the highest score, so
   the lowest id: Llama 3's ids follow its merge order), BOS from tokenizer_config.json. Its
   BOS (128000) is the first special token, so ids stay as they are.
 * --llama3-rope FACTOR,LOW,HIGH,ORIGINAL writes dllama's Llama 3.1 RoPE scaling (its integer
   header keys), after checking that dllama's frequency rule gives the divisors of the model's
   own rope_freqs (within 1e-5). A model with rope_freqs is refused without it.
 * A model whose RoPE rotates halves (imported from Hugging Face) is refused: dllama's llama
   RoPE rotates pairs, as a GGUF llama's q and k rows are ordered.
"""
import argparse
import json
import math
import os
import struct
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # the Debian packages python3-h5py and python3-numpy
    sys.exit(f"to_dllama: error: {e} (apt-get install python3-numpy python3-h5py; run with /usr/bin/python3)")

MODEL_MAGIC = 0xA00ABCD
TOKENIZER_MAGIC = 0x567124
ARCH_LLAMA = 0xABCD00
F_32, F_Q40 = 0, 2
QK = 32
# header keys of src/llm.hpp (LlmHeaderKey)
K_VERSION, K_ARCH, K_DIM, K_HIDDEN, K_LAYERS, K_HEADS, K_KV_HEADS = 0, 1, 2, 3, 4, 5, 6
K_EXPERTS, K_ACTIVE_EXPERTS, K_VOCAB, K_SEQ, K_ACT, K_THETA, K_WTYPE = 7, 8, 9, 10, 11, 12, 13
K_HEAD_DIM, K_NORM_EPS = 19, 20
K_ROPE_FACTOR, K_ROPE_LOW, K_ROPE_HIGH, K_ROPE_ORIG, K_ROPE_TYPE = 14, 15, 16, 17, 18
ROPE_LLAMA3_1 = 2
HIDDEN_ACT_SILU = 1
# tokenizer header keys of src/tokenizer.hpp
T_VERSION, T_VOCAB, T_MAXLEN, T_BOS, T_CHAT_TEMPLATE, T_N_EOS, T_ADD_BOS = 0, 1, 2, 3, 7, 9, 10
# chat templates dllama tells apart by a marker (it renders chats itself); ours are minimal Jinja of the kind
CHAT_MARKERS = ["[INST]", "<|start_header_id|>", "<|im_start|>", "<\uff5cAssistant\uff5c>"]
CHAT_TEMPLATES = {
    "llama2": "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] + "
              "' [/INST]' }}{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + ' ' + eos_token }}"
              "{% endif %}{% endfor %}",
    "llama3": "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
              "'<|end_header_id|>\n\n' + m['content'] + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "chatml": "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
}


def die(msg):
    sys.exit(f"to_dllama: error: {msg}")


def attr(h, name):
    v = h.attrs[name]
    return v.item() if hasattr(v, "item") else v


def dtype_of(obj):
    d = obj.attrs.get("dtype", b"fp32")
    return d.decode() if isinstance(d, bytes) else str(d)


# ---------------------------------------------------------------- tensors

def q4_0_rows(g):
    """(qs [rows, cols/2] uint8, d [rows, cols/32] fp16) of a q4_0 group in the
    in-memory row layout (input axis along the row): transposed back for
    blocked_axis 0 (wo_t, w2_t)."""
    qs, d = g["qs"][...], g["d"][...]
    if int(g.attrs["blocked_axis"]) == 0:
        qs, d = qs.T, d.T
    return np.ascontiguousarray(qs), np.ascontiguousarray(d.astype("<f2"))


def q8_0_rows(g):
    qs, d = g["qs"][...], g["d"][...]
    if int(g.attrs["blocked_axis"]) == 0:
        qs, d = qs.T, d.T
    return np.ascontiguousarray(qs.astype(np.int8)), np.ascontiguousarray(d.astype("<f2"))


def dequant(obj):
    """float32 [out, in] of a stored weight (any dtype); the transposed tensors
    (wo_t, w2_t) come back in the [out, in] orientation."""
    t = dtype_of(obj)
    if isinstance(obj, h5py.Dataset):
        a = obj[...].astype(np.float32)
        return a.T if obj.name.endswith("_t") else a
    if t == "q4_0":
        qs, d = q4_0_rows(obj)
        rows, nb = d.shape
        b = qs.reshape(rows, nb, QK // 2)
        q = np.concatenate([b & 0x0F, b >> 4], axis=2).astype(np.int8) - 8
        return (q.astype(np.float32) * d.astype(np.float32)[:, :, None]).reshape(rows, nb * QK)
    if t == "q8_0":
        qs, d = q8_0_rows(obj)
        rows, nb = d.shape
        q = qs.reshape(rows, nb, QK).astype(np.float32)
        return (q * d.astype(np.float32)[:, :, None]).reshape(rows, nb * QK)
    die(f"{obj.name}: unsupported dtype {t}")


def quantize_q40(x):
    """ggml's q4_0 of float32 [rows, cols] (cols a multiple of 32): per block
    d = (the element of largest magnitude) / -8, q = min(15, trunc(x/d + 8.5))."""
    rows, cols = x.shape
    if cols % QK:
        die(f"q40 needs rows of whole blocks of {QK} (got {cols})")
    b = x.reshape(rows, cols // QK, QK)
    idx = np.argmax(np.abs(b), axis=2)
    mx = np.take_along_axis(b, idx[:, :, None], axis=2)[:, :, 0]
    d = mx / np.float32(-8.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = np.minimum(15, (b * inv[:, :, None] + np.float32(8.5)).astype(np.int8)).astype(np.uint8)
    qs = (q[:, :, : QK // 2] | (q[:, :, QK // 2:] << 4)).astype(np.uint8)
    return qs.reshape(rows, cols // 2), d.astype("<f2")


def pack_q40(qs, d):
    """dllama's NnBlockQ40 array: per block 2 bytes fp16 d, 16 bytes qs."""
    rows, nb = d.shape
    out = np.empty((rows, nb, 2 + QK // 2), dtype=np.uint8)
    out[:, :, :2] = d.view(np.uint8).reshape(rows, nb, 2)
    out[:, :, 2:] = qs.reshape(rows, nb, QK // 2)
    return out.reshape(rows, nb * (2 + QK // 2))


def weight_bytes(obj, wtype, perm=None):
    """The bytes of one matrix in dllama's layout and weight type."""
    t = dtype_of(obj)
    if wtype == F_Q40:
        if isinstance(obj, h5py.Group) and t == "q4_0":
            qs, d = q4_0_rows(obj)  # bit-for-bit repack
        else:
            qs, d = quantize_q40(dequant(obj))
        a = pack_q40(qs, d)
    else:
        a = dequant(obj).astype("<f4")
    if perm is not None:
        a = a[perm]
    return np.ascontiguousarray(a).tobytes()


# ---------------------------------------------------------------- tokenizer

def read_tokenizer_bin(path):
    with open(path, "rb") as f:
        data = f.read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    p, pieces, scores = 4, [], []
    while p < len(data):
        s, n = struct.unpack_from("<fi", data, p)
        p += 8
        pieces.append(data[p:p + n])
        scores.append(s)
        p += n
    return pieces, scores, 1, 2, 3


def read_tokenizer_h5(h):
    t = h["tokenizer"]
    off, raw, sc = t["offsets"][...], t["bytes"][...].tobytes(), t["scores"][...]
    pieces = [raw[off[i]:off[i + 1]] for i in range(len(sc))]
    bos = int(attr(t, "bos_id")) if "bos_id" in t.attrs else 1
    eos = int(attr(t, "eos_id")) if "eos_id" in t.attrs else 2
    first_byte = int(attr(t, "byte_fallback_first_id")) if "byte_fallback_first_id" in t.attrs else 3
    return pieces, [float(x) for x in sc], bos, eos, first_byte


def dllama_pieces(pieces, bos, eos, first_byte):
    """Spell the pieces for dllama's encoder/decoder (see the module comment)."""
    out = list(pieces)
    out[bos], out[eos] = b"<s>", b"</s>"
    byte_ids = set(range(first_byte, first_byte + 256)) if first_byte >= 0 else set()
    ordinary = {p for i, p in enumerate(pieces) if i not in byte_ids}
    for i in byte_ids:
        if i >= len(out):
            break
        b = i - first_byte
        raw = bytes([b])
        out[i] = f"<0x{b:02X}>".encode() if raw in ordinary else raw
    # Pieces our encoder can never produce: they contain a character that is
    # not an ordinary one-character piece (it exists only as a byte-fallback
    # token, and byte-fallback tokens never merge). Renamed so that dllama's
    # encoder, which would merge them, cannot produce them either.
    first_piece = first_byte + 256 if first_byte >= 0 else 3
    chars = set()
    for p in pieces[first_piece:]:
        u = p.decode("utf-8", "replace")
        if len(u) == 1:
            chars.add(u)
    for i in range(first_piece, len(pieces)):
        if any(c not in chars for c in pieces[i].decode("utf-8", "replace")):
            out[i] = b"<unreachable %d>" % i
    for i, p in enumerate(out):
        if not p:
            out[i] = b"<empty>"  # dllama's format has no empty pieces
    return out


def chat_template_text(spec, config_template=None):
    """The chat template's bytes for --chat-template NAME|@FILE (None: the tokenizer_config.json's,
    if any); checked to hold a marker dllama recognises."""
    if spec is None:
        if config_template is None:
            return None
        text, where = config_template, "tokenizer_config.json's chat_template"
    elif spec.startswith("@"):
        try:
            with open(spec[1:], encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            die(f"--chat-template {spec}: {e}")
        where = spec[1:]
    elif spec in CHAT_TEMPLATES:
        text, where = CHAT_TEMPLATES[spec], spec
    else:
        die(f"--chat-template {spec!r}: give llama2, llama3, chatml or @FILE")
    if not isinstance(text, str) or not text:
        die(f"chat template of {where}: empty or not text")
    if not any(m in text for m in CHAT_MARKERS):
        if spec is None:  # the tokenizer_config.json's, not asked for: the file goes without, as before
            print(f"to_dllama: {where} holds no marker dllama recognises; not written", file=sys.stderr)
            return None
        die(f"chat template of {where}: distributed-llama recognises only templates holding one of "
            + ", ".join(CHAT_MARKERS))
    return text.encode("utf-8")


def write_tokenizer(path, pieces, scores, bos, eos, template=None):
    kv = [(T_VERSION, 1), (T_VOCAB, len(pieces)), (T_MAXLEN, max(len(p) for p in pieces)),
          (T_BOS, bos), (T_N_EOS, 1), (T_ADD_BOS, 1)]
    if template:
        kv.append((T_CHAT_TEMPLATE, len(template)))
    data = b"".join(struct.pack("<ii", k, v) for k, v in kv)
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", TOKENIZER_MAGIC, 8 + len(data)) + data)
        if template:  # dllama reads the template right after the header, before the EOS ids
            f.write(template)
        f.write(struct.pack("<i", eos))
        for p, s in zip(pieces, scores):
            f.write(struct.pack("<fI", s, len(p)) + p)


def byte_alphabet():
    """{character: byte} of the byte-level BPE alphabet (GPT-2's, also Llama 3's): the printable
    bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves; the other 68 bytes, in
    increasing order, are spelled with the code points 256, 257, ..."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def read_tokenizer_json(folder):
    """(pieces, scores, bos, eos) of a byte-level BPE tokenizer.json for dllama (see the module
    comment): pieces as bytes, score minus the id."""
    try:
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        tc = {}
        if os.path.exists(os.path.join(folder, "tokenizer_config.json")):
            with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
                tc = json.load(f)
    except (OSError, ValueError) as e:
        die(f"--tokenizer-json {folder}: {e}")
    model = tj.get("model", {})
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        die(f"{folder}/tokenizer.json: not a BPE tokenizer")
    text = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a["content"] for a in tj.get("added_tokens", [])}
    text.update(added)
    if sorted(text) != list(range(len(text))):
        die(f"{folder}/tokenizer.json: the token ids are not 0..{len(text) - 1}")
    alphabet = byte_alphabet()
    pieces = []
    for i in range(len(text)):
        t = text[i]
        if i in added:
            pieces.append(t.encode("utf-8"))
        elif all(c in alphabet for c in t):
            pieces.append(bytes(alphabet[c] for c in t))
        else:
            die(f"{folder}/tokenizer.json: token {i} {t!r} is not spelled in the byte-level alphabet")
    ids = {t: i for i, t in added.items()}

    def special(key):
        v = tc.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        if v not in ids:
            die(f"{folder}/tokenizer_config.json: {key} {v!r} is not an added token")
        return ids[v]
    tmpl = tc.get("chat_template")
    if isinstance(tmpl, list):  # named templates: the default one
        tmpl = next((t.get("template") for t in tmpl if t.get("name") == "default"), None)
    return pieces, [-float(i) for i in range(len(pieces))], special("bos_token"), special("eos_token"), tmpl


def llama3_rope_keys(h, spec, theta, head_dim):
    """dllama's header pairs of Llama 3 RoPE scaling 'FACTOR,LOW,HIGH,ORIGINAL', checked against
    the model's rope_freqs (per pair of a head: the divisor of its frequency)."""
    try:
        factor, low, high, orig = (float(x) for x in spec.split(","))
    except ValueError:
        die(f"--llama3-rope wants FACTOR,LOW,HIGH,ORIGINAL (got {spec!r})")
    if any(x != int(x) or x <= 0 for x in (factor, low, high, orig)) or high <= low:
        die(f"--llama3-rope {spec}: dllama stores them as positive integers, and LOW < HIGH")
    if "rope_freqs" not in h:
        die("--llama3-rope given, but the model has no rope_freqs (no Llama 3 scaling)")
    stored = h["rope_freqs"][...].astype(np.float64).reshape(-1)
    want = []
    for j in range(head_dim // 2):  # dllama's rule, per the Llama 3 reference
        freq = theta ** (-2.0 * j / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            scaled = freq
        elif wavelen > orig / low:
            scaled = freq / factor
        else:
            smooth = (orig / wavelen - low) / (high - low)
            scaled = (1 - smooth) * freq / factor + smooth * freq
        want.append(freq / scaled)
    if stored.shape[0] != len(want) or np.max(np.abs(stored / np.array(want) - 1)) > 1e-5:
        die(f"--llama3-rope {spec}: dllama's frequencies differ from the model's rope_freqs")
    return [(K_ROPE_TYPE, ROPE_LLAMA3_1), (K_ROPE_FACTOR, int(factor)), (K_ROPE_LOW, int(low)),
            (K_ROPE_HIGH, int(high)), (K_ROPE_ORIG, int(orig))]


def check_llama(h, path):
    """Refuse what dllama's llama architecture would compute otherwise: another family, RoPE on
    halves (a Hugging Face import), biases or q/k norms."""
    fam = h.attrs.get("family", b"llama")
    fam = fam.decode() if isinstance(fam, bytes) else str(fam)
    if fam != "llama":
        die(f"{path}: family {fam}: distributed-llama's converter here writes llama models only")
    if "rope_type" in h.attrs and int(attr(h, "rope_type")) != 0:
        die(f"{path}: its RoPE rotates halves (Hugging Face order); dllama's llama RoPE rotates "
            "pairs: convert the model from GGUF instead")
    for t in ("qkv_bias", "out_bias", "qk_norm", "post_norms"):
        if t in h.attrs and int(attr(h, t)):
            die(f"{path}: trait {t} is set; dllama's llama has none")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="meshinfer HDF5 model")
    ap.add_argument("--model-out", help="distributed-llama model file to write")
    ap.add_argument("--tokenizer-out", help="distributed-llama tokenizer file to write")
    ap.add_argument("--weights", choices=["f32", "q40"],
                    help="weight type (default: q40 for a q4_0 model, else f32)")
    ap.add_argument("--tokenizer-bin", help="take the tokenizer from this llama2.c tokenizer.bin "
                    "instead of the model file")
    ap.add_argument("--keep-ids", action="store_true",
                    help="keep the token ids (BOS stays at its id: dllama then cannot BPE-encode prompts)")
    ap.add_argument("--tokenizer-json", metavar="DIR",
                    help="take a byte-level BPE tokenizer (Llama 3) from DIR/tokenizer.json")
    ap.add_argument("--llama3-rope", metavar="FACTOR,LOW,HIGH,ORIGINAL",
                    help="Llama 3 RoPE scaling, checked against the model's rope_freqs")
    ap.add_argument("--chat-template", metavar="NAME|@FILE",
                    help="chat template written into the tokenizer (llama2, llama3, chatml, or a file's text); "
                    "dllama-api needs one")
    a = ap.parse_args()
    if not a.model_out and not a.tokenizer_out:
        die("nothing to do: give --model-out and/or --tokenizer-out")
    if a.tokenizer_json and a.tokenizer_bin:
        die("give --tokenizer-json or --tokenizer-bin, not both")
    if a.chat_template and not a.tokenizer_out:
        die("--chat-template goes into the tokenizer: give --tokenizer-out too")
    try:
        h = h5py.File(a.model, "r")
    except OSError as e:
        die(f"{a.model}: {e}")
    dim, hidden, n_layers = attr(h, "dim"), attr(h, "hidden_dim"), attr(h, "n_layers")
    n_heads, n_kv, vocab = attr(h, "n_heads"), attr(h, "n_kv_heads"), attr(h, "vocab_size")
    head_dim = attr(h, "head_dim") if "head_dim" in h.attrs else dim // n_heads
    check_llama(h, a.model)

    perm = None  # perm[new id] = old id

    def new_id(old):
        return old if perm is None else int(np.nonzero(perm == old)[0][0])
    if a.tokenizer_json:
        pieces, scores, bos, eos, config_template = read_tokenizer_json(a.tokenizer_json)
        if len(pieces) != vocab:
            die(f"{a.tokenizer_json}/tokenizer.json has {len(pieces)} tokens, the model {vocab}")
        if a.tokenizer_out:
            write_tokenizer(a.tokenizer_out, pieces, scores, bos, eos,
                            chat_template_text(a.chat_template, config_template))
    else:
        if a.tokenizer_bin:
            pieces, scores, bos, eos, first_byte = read_tokenizer_bin(a.tokenizer_bin)
        else:
            pieces, scores, bos, eos, first_byte = read_tokenizer_h5(h)
        if len(pieces) != vocab:
            die(f"tokenizer has {len(pieces)} tokens, the model {vocab}")
        if not a.keep_ids and bos != vocab - 1:
            perm = np.array([i for i in range(vocab) if i != bos] + [bos], dtype=np.int64)
        if a.tokenizer_out:
            sp = dllama_pieces(pieces, bos, eos, first_byte)
            if perm is not None:
                sp, scores = [sp[i] for i in perm], [scores[i] for i in perm]
            write_tokenizer(a.tokenizer_out, sp, scores, new_id(bos), new_id(eos), chat_template_text(a.chat_template))
    if a.tokenizer_out:
        print(f"to_dllama: wrote {a.tokenizer_out} ({vocab} tokens, bos {new_id(bos)}, eos {new_id(eos)}"
              f"{', chat template' if a.chat_template else ''})", file=sys.stderr)

    if not a.model_out:
        return
    wq0 = h["layers/000/wq"]
    wtype = {"f32": F_32, "q40": F_Q40}[a.weights] if a.weights else (F_Q40 if dtype_of(wq0) == "q4_0" else F_32)
    eps = float(attr(h, "norm_eps"))
    if abs(eps - 1e-5) < 1e-9:
        eps_code = 5
    elif abs(eps - 1e-6) < 1e-10:
        eps_code = 6
    else:
        die(f"distributed-llama supports norm_eps 1e-5 or 1e-6 only (got {eps})")
    theta = float(attr(h, "rope_theta"))
    if theta != int(theta):
        die(f"distributed-llama stores rope_theta as an integer (got {theta})")
    kv = [(K_VERSION, 0), (K_ARCH, ARCH_LLAMA), (K_DIM, dim), (K_HIDDEN, hidden), (K_LAYERS, n_layers),
          (K_HEADS, n_heads), (K_KV_HEADS, n_kv), (K_EXPERTS, 0), (K_ACTIVE_EXPERTS, 0), (K_VOCAB, vocab),
          (K_SEQ, attr(h, "seq_len")), (K_ACT, HIDDEN_ACT_SILU), (K_THETA, int(theta)), (K_WTYPE, wtype),
          (K_HEAD_DIM, head_dim), (K_NORM_EPS, eps_code)]
    if a.llama3_rope:
        kv += llama3_rope_keys(h, a.llama3_rope, theta, head_dim)
    elif "rope_freqs" in h:
        die(f"{a.model} has Llama 3 RoPE scaling (rope_freqs): give its --llama3-rope FACTOR,LOW,HIGH,ORIGINAL")
    data = b"".join(struct.pack("<ii", k, int(v)) for k, v in kv)
    cls = h["classifier"] if "classifier" in h else h["tok_embeddings"]
    tmp = a.model_out + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<ii", MODEL_MAGIC, 8 + len(data)) + data)
        f.write(weight_bytes(h["tok_embeddings"], F_32, perm))
        for l in range(n_layers):
            g = h[f"layers/{l:03d}"]
            for name in ("wq", "wk", "wv", "wo_t", "w1", "w2_t", "w3"):
                f.write(weight_bytes(g[name], wtype))
            for name in ("attention_norm", "ffn_norm"):
                f.write(g[name][...].astype("<f4").tobytes())
        f.write(h["norm"][...].astype("<f4").tobytes())
        f.write(weight_bytes(cls, wtype, perm))
    os.replace(tmp, a.model_out)
    print(f"to_dllama: wrote {a.model_out} ({'q40' if wtype == F_Q40 else 'f32'} weights"
          f"{', token ids permuted: BOS last' if perm is not None else ''})", file=sys.stderr)


if __name__ == "__main__":
    main()
