"""Tests of the family fixtures: /usr/bin/python3 -m unittest discover -s tests/families

Quantizer bytes worked out by hand, GGUF and safetensors round trips through readers of our own,
llama.cpp's conventions (q/k permutation, rope_freqs, 1 + w, Conv1D transposes, tied output), the
tokenizer metadata, and the float64 reference against an independent numpy forward pass.
"""

import io
import json
import os
import struct
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import families as fm  # noqa: E402
import ggml_quants as gq  # noqa: E402
import gguf_file as gf  # noqa: E402
import hf_to_gguf as h2g  # noqa: E402
import independent  # noqa: E402
import make_fixtures  # noqa: E402
import reference as ref  # noqa: E402
import safetensors_io as st  # noqa: E402
import vocab  # noqa: E402

torch.set_num_threads(2)
TOKENIZERS = os.environ.get("MESHINFER_TOKENIZERS",
                            os.path.join(HERE, "..", "..", "models", "cache", "tokenizers"))


# ---- a tiny GGUF reader of our own (independent of gguf_file's writer) ----

_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_TYPE_NAME = {0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0"}


class _Buf:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(_FMT[vtype])


def read_gguf(path):
    """(kvs {key: (vtype, value)}, tensors {name: (ne, type name, offset, raw bytes)}, data start)."""
    with open(path, "rb") as f:
        b = _Buf(f.read())
    magic, version, n_t, n_kv = b.take("<I"), b.take("<I"), b.take("<Q"), b.take("<Q")
    assert magic == 0x46554747 and version == 3, (hex(magic), version)
    kvs = {}
    for _ in range(n_kv):
        key = b.string()
        vt = b.take("<I")
        kvs[key] = (vt, b.value(vt))
    infos = []
    for _ in range(n_t):
        name = b.string()
        nd = b.take("<I")
        ne = [b.take("<Q") for _ in range(nd)]
        infos.append((name, ne, _TYPE_NAME[b.take("<I")], b.take("<Q")))
    align = kvs.get("general.alignment", (4, 32))[1]
    start = b.pos + (-b.pos % align)
    tensors = {}
    for name, ne, t, off in infos:
        n = int(np.prod(ne))
        tensors[name] = (ne, t, off, b.data[start + off:start + off + gq.nbytes(t, n)])
    return kvs, tensors, start


def small(name, **over):
    """A fixture config with a small vocabulary (fast), other keys overridden."""
    cfg = fm.config(name)
    cfg["vocab_size"] = 320
    cfg.update(over)
    return cfg


def logits(cfg, w, tokens):
    return ref.forward(cfg, ref.weights_from_numpy(w), tokens).numpy()


class TestQuants(unittest.TestCase):
    def test_q8_0_by_hand(self):
        # amax 127 -> d = 1, id = 1: roundf takes halves away from zero (banker's would give 2, -2, 0, 126)
        a = np.zeros(32, np.float32)
        a[:10] = [127, -127, 2.5, -2.5, 0.5, -0.5, 1.5, 0.49, 126.5, 3.0]
        # amax 254 -> d = 2 (fp16 0x4000), id = 0.5
        b = np.zeros(32, np.float32)
        b[:7] = [-254, 5, -5, 3, 1, -1, 253]
        q = gq.quantize_q8_0(np.concatenate([a, b, np.zeros(32, np.float32)])).reshape(3, 34)
        self.assertEqual(q[0].tobytes().hex(), "003c" + "7f8103fd01ff02007f03" + "00" * 22)
        self.assertEqual(q[1].tobytes().hex(), "0040" + "8103fd0201ff7f" + "00" * 25)
        self.assertEqual(q[2].tobytes().hex(), "00" * 34)  # an all-zero block: d = 0, id = 0

    def test_q8_0_scale_rounds_to_nearest_even(self):
        # d = 1 + 2^-11 lies halfway between fp16 1.0 and 1 + 2^-10: even -> 1.0 (0x3C00);
        # d = 1 + 3*2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: even -> 0x3C02
        for eps, want in ((2.0 ** -11, "003c"), (3 * 2.0 ** -11, "023c")):
            x = np.zeros(32, np.float32)
            x[0] = 127 * (1 + eps)
            q = gq.quantize_q8_0(x)
            self.assertEqual(q[:2].tobytes().hex(), want)
            self.assertEqual(q[2], 127)

    def test_q4_0_by_hand(self):
        # max = -8 (negative) -> d = 1, id = 1, q = min(15, trunc(x + 8.5)): ties at .5 go up
        lo = [-8, 7, 7.5, 0.5, -0.5, 1.5, -1.5, 0.49, -7.6, 3] + [0] * 6
        hi = [6.5, -3.2] + [0] * 14
        qa = [0, 15, 15, 9, 8, 10, 7, 8, 0, 11] + [8] * 6
        qb = [15, 5] + [8] * 14
        want_a = "003c" + bytes(a | b << 4 for a, b in zip(qa, qb)).hex()
        # max = +8 (first of |8| = |-8|) -> d = -1 (0xBC00): -8 lands on 16 and is clipped to 15
        blk_b = [8, -8, 4, -4, 0.5] + [0] * 27
        qb_lo = [0, 15, 4, 12, 8] + [8] * 11
        want_b = "00bc" + bytes(a | 8 << 4 for a in qb_lo).hex()
        # the first of equal |x| wins: -8 before 8 -> d = +1, 8 -> trunc(16.5) -> 15
        blk_c = [-8, 8] + [0] * 30
        want_c = "003c" + bytes([0x80, 0x8f] + [0x88] * 14).hex()
        x = np.array(lo + hi + blk_b + blk_c + [0] * 32 + [-0.0] * 32, np.float32)
        q = gq.quantize_q4_0(x).reshape(5, 18)
        self.assertEqual(q[0].tobytes().hex(), want_a)
        self.assertEqual(q[1].tobytes().hex(), want_b)
        self.assertEqual(q[2].tobytes().hex(), want_c)
        # all zero: the C loop keeps its initial max = +0.0f, so d = 0/-8 = -0.0 (fp16 0x8000), q = 8
        self.assertEqual(q[3].tobytes().hex(), "0080" + "88" * 16)
        self.assertEqual(q[4].tobytes().hex(), "0080" + "88" * 16)  # -0.0 inputs alike

    def test_q4_0_float32_rounding_against_fma(self):
        # x = -24, -22.5, ..., 22.5: max -24 -> d = 3 (0x4200), id = float32(1/3) = 0.33333334.
        # In float32, -22.5 * id rounds to exactly -7.5, + 8.5 = 1.0 -> q = 1 (the C source as
        # written); fused, -7.50000022 + 8.5 = 0.99999978 -> q = 0 (an FMA-contracted build,
        # gguf-py's quants.py). Both checked against C compiled both ways.
        x = np.arange(-16, 16, dtype=np.float32) * np.float32(1.5)
        self.assertEqual(gq.quantize_q4_0(x).tobytes().hex(), "0042" + "809191a2a2b3b3c4c4d5d5e6e6f7f7f8")
        self.assertEqual(gq.quantize_q4_0(x, fma=True).tobytes().hex(), "0042" + "809091a1a2b2b3c3c4d5d5e6e6f7f7f8")

    def test_dequantized_error_is_within_half_a_step(self):
        x = np.random.default_rng(3).standard_normal(32 * 500).astype(np.float32)
        blocks = x.reshape(-1, 32)
        d8 = np.abs(blocks).max(1) / 127
        err8 = np.abs(gq.dequantize_q8_0(gq.quantize_q8_0(x), x.size).reshape(-1, 32) - blocks).max(1)
        # half a step, plus |q| <= 127 times the fp16 rounding of d (2^-11 relative)
        self.assertTrue(np.all(err8 <= d8 * (0.5 + 127 * 2.0 ** -11) + 1e-12))
        d4 = np.abs(blocks).max(1) / 8
        err4 = np.abs(gq.dequantize_q4_0(gq.quantize_q4_0(x), x.size).reshape(-1, 32) - blocks).max(1)
        self.assertTrue(np.all(err4 <= d4 * (1 + 8 * 2.0 ** -11)))  # -max clips to 7d: one full step there
        self.assertGreater(float(err4.mean()), 0.1 * float(d4.mean()))


class TestSafetensors(unittest.TestCase):
    def test_bf16_rounds_as_torch(self):
        rng = np.random.default_rng(1)
        x = np.concatenate([rng.standard_normal(5000).astype(np.float32),
                            np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.4e38, np.inf, -np.inf, 0.0, -0.0],
                                     np.float32)])
        want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        self.assertTrue(np.array_equal(st.f32_to_bf16_bits(x), want))
        # the two ties by hand: 1 + 2^-8 -> 1.0 (0x3F80, even), 1 + 3*2^-8 -> 1 + 2^-6 (0x3F82)
        self.assertEqual(list(st.f32_to_bf16_bits(x[5000:5002])), [0x3F80, 0x3F82])
        self.assertEqual(st.f32_to_bf16_bits(np.array([np.nan], np.float32))[0], 0x7FC0)

    def test_round_trip_single_and_sharded(self):
        cfg = small("tinyllama")
        w = fm.make_weights(cfg)
        with tempfile.TemporaryDirectory() as d:
            for dt in ("F32", "F16", "BF16"):
                stored = st.write(os.path.join(d, "model.safetensors"), w, dt)
                back = st.read(os.path.join(d, "model.safetensors"))
                self.assertEqual(list(back), list(w))
                for n in w:
                    self.assertTrue(np.array_equal(back[n], stored[n]), (dt, n))
                with open(os.path.join(d, "model.safetensors"), "rb") as f:
                    (hlen,) = struct.unpack("<Q", f.read(8))
                self.assertEqual(hlen % 8, 0)
            sh = os.path.join(d, "sh")
            os.makedirs(sh)
            st.write_sharded(sh, w, "BF16", 2)
            with open(os.path.join(sh, "model.safetensors.index.json")) as f:
                wm = json.load(f)["weight_map"]
            self.assertEqual(sorted(set(wm.values())),
                             ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
            self.assertEqual(set(wm), set(w))
            single = st.read(os.path.join(d, "model.safetensors"))  # the BF16 one written last
            both = st.read_folder(sh)
            self.assertTrue(all(np.array_equal(both[n], single[n]) for n in w))

    def test_truncated_file_names_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "bad.safetensors")
            with open(p, "wb") as f:
                f.write(struct.pack("<Q", 1000) + b"{}")
            with self.assertRaisesRegex(ValueError, "bad.safetensors: header length 1000"):
                st.read(p)


class TestGGUF(unittest.TestCase):
    def test_every_key_and_tensor_round_trips(self):
        with tempfile.TemporaryDirectory() as d:
            for name in fm.FIXTURES:
                cfg = small(name)
                w = fm.make_weights(cfg)
                arrays = dict(h2g.gguf_arrays(cfg, w))
                for ft in ("f32", "f16", "q8_0", "q4_0"):
                    kvs = h2g.gguf_params(cfg, ft, name)
                    tensors = h2g.gguf_tensors(cfg, w, ft)
                    path = os.path.join(d, "%s-%s.gguf" % (name, ft))
                    gf.write(path, kvs, tensors)
                    got_kv, got_t, start = read_gguf(path)
                    self.assertEqual(start % 32, 0)
                    self.assertEqual(list(got_kv), [k[0] for k in kvs])
                    for key, vt, val in kvs:
                        self.assertEqual(got_kv[key][0], vt, key)
                        want = float(np.float32(val)) if vt == gf.FLOAT32 else val
                        self.assertEqual(got_kv[key][1], want, key)
                    self.assertEqual(list(got_t), [t.name for t in tensors])
                    for t in tensors:
                        ne, tname, off, raw = got_t[t.name]
                        self.assertEqual(ne, list(reversed(arrays[t.name].shape)), t.name)
                        self.assertEqual((tname, off % 32), (t.ggml_type, 0), t.name)
                        self.assertEqual(raw, t.raw.tobytes(), t.name)
                        back = gq.decode(np.frombuffer(raw, np.uint8), tname, arrays[t.name].size)
                        tol = {"F32": 0, "F16": 1e-3, "Q8_0": 5e-3, "Q4_0": 6e-2}[tname]
                        self.assertLessEqual(float(np.abs(back - arrays[t.name].reshape(-1)).max()), tol, (name, ft, t.name))

    def test_types_follow_llama_cpp(self):
        cfg = small("qwen2")
        types = {t.name: t.ggml_type for t in h2g.gguf_tensors(cfg, fm.make_weights(cfg), "q4_0")}
        self.assertEqual(types["token_embd.weight"], "Q4_0")
        self.assertEqual(types["blk.0.attn_q.bias"], "F32")
        self.assertEqual(types["blk.1.ffn_norm.weight"], "F32")
        self.assertEqual(types["blk.1.ffn_down.weight"], "Q4_0")
        self.assertEqual(h2g.tensor_type("blk.0.ffn_down.weight", (64, 48), "q8_0"), "F16")
        g = small("gpt2")
        gt = {t.name: t.ggml_type for t in h2g.gguf_tensors(g, fm.make_weights(g), "q8_0")}
        self.assertEqual((gt["position_embd.weight"], gt["blk.0.attn_qkv.weight"], gt["blk.0.attn_qkv.bias"]),
                         ("F32", "Q8_0", "F32"))
        kv = {k[0]: k[2] for k in h2g.gguf_params(cfg, "q4_0", "qwen2")}
        self.assertEqual((kv["general.file_type"], kv["general.architecture"]), (2, "qwen2"))
        self.assertNotIn("qwen2.attention.key_length", kv)  # no head_dim in Qwen2's config.json

    def test_llama_q_k_are_interleaved_and_unpermute_to_hf(self):
        # one head of 4 rows: rotate-half pairs (0, 2), (1, 3) become adjacent rows 0, 2, 1, 3
        w = np.arange(8, dtype=np.float32).reshape(4, 2)
        self.assertEqual(h2g.permute_qk(w, 1)[:, 0].tolist(), [0, 4, 2, 6])
        cfg = small("llama3")
        hf = fm.make_weights(cfg)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.gguf")
            gf.write(path, h2g.gguf_params(cfg, "f32", "llama3"), h2g.gguf_tensors(cfg, hf, "f32"))
            _, tensors, _ = read_gguf(path)
        for il in range(cfg["num_hidden_layers"]):
            for n, heads in (("q", cfg["num_attention_heads"]), ("k", cfg["num_key_value_heads"])):
                ne, _, _, raw = tensors["blk.%d.attn_%s.weight" % (il, n)]
                g = np.frombuffer(raw, np.float32).reshape(ne[1], ne[0])
                h = hf["model.layers.%d.self_attn.%s_proj.weight" % (il, n)]
                self.assertFalse(np.array_equal(g, h))
                self.assertTrue(np.array_equal(h2g.unpermute_qk(g, heads), h))
            ne, _, _, raw = tensors["blk.%d.attn_v.weight" % il]
            self.assertTrue(np.array_equal(np.frombuffer(raw, np.float32).reshape(ne[1], ne[0]),
                                           hf["model.layers.%d.self_attn.v_proj.weight" % il]))
        self.assertNotIn("output.weight", tensors)  # tied: llama.cpp reuses token_embd

    def test_llama3_rope_freqs(self):
        # head_dim 32, theta 5e5: wavelength 2*pi*5e5^(i/16); < 2048 for i <= 7 (factor 1),
        # > 8192 for i >= 9 (factor 32); i = 8: 4442.9, smooth (8192/4442.9 - 1)/3 = 0.2813,
        # factor 1/((1 - 0.2813)/32 + 0.2813) = 3.292
        cfg = fm.config("llama3")
        f = h2g.llama3_rope_factors(cfg)
        self.assertEqual(f[:8].tolist(), [1.0] * 8)
        self.assertEqual(f[9:].tolist(), [32.0] * 7)
        self.assertAlmostEqual(f[8], 3.292, places=3)
        base = ref.inv_freq(32, 500000.0).numpy()
        scaled = ref.inv_freq(32, 500000.0, cfg["rope_scaling"]).numpy()
        self.assertTrue(np.allclose(base / scaled, f, rtol=1e-12))  # HF's form and llama.cpp's agree

    def test_gemma3_norms_and_gpt2_layout(self):
        cfg = small("gemma3")
        w = fm.make_weights(cfg)
        g = dict(h2g.gguf_arrays(cfg, w))
        for gname, hname in (("blk.0.attn_norm", "0.input_layernorm"), ("blk.5.post_ffw_norm", "5.post_feedforward_layernorm"),
                             ("blk.2.attn_k_norm", "2.self_attn.k_norm")):
            self.assertTrue(np.array_equal(g[gname + ".weight"], w["model.layers.%s.weight" % hname] + np.float32(1)))
        self.assertTrue(np.array_equal(g["blk.0.attn_q.weight"], w["model.layers.0.self_attn.q_proj.weight"]))  # NEOX: kept
        self.assertNotIn("output.weight", g)
        kv = {k[0]: k[2] for k in h2g.gguf_params(cfg, "f32", "gemma3")}
        self.assertEqual((kv["gemma3.attention.sliding_window"], kv["gemma3.rope.freq_base"],
                          kv["gemma3.rope.freq_base_swa"]), (4, 1e6, 1e4))
        p = small("gpt2")
        w = fm.make_weights(p)
        g = dict(h2g.gguf_arrays(p, w))
        self.assertEqual(g["blk.1.attn_qkv.weight"].shape, (192, 64))
        self.assertTrue(np.array_equal(g["blk.1.attn_qkv.weight"], w["h.1.attn.c_attn.weight"].T))
        self.assertTrue(np.array_equal(g["blk.0.ffn_down.weight"], w["h.0.mlp.c_proj.weight"].T))
        self.assertTrue(np.array_equal(g["output.weight"], w["wte.weight"]))
        self.assertFalse(any("attn.bias" in n or n.endswith("attn_mask") for n in g))
        self.assertEqual(sum(n.endswith(".bias") for n in g), 2 * 6 + 1)


def spm_tokenizer():
    """A hand-made SentencePiece-style tokenizer.json (byte fallback, Prepend normalizer)."""
    v = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "\u2581": 4, "t": 5, "h": 6, "e": 7,
         "\u2581t": 8, "he": 9, "\u2581the": 10}
    return {"model": {"type": "BPE", "vocab": v, "merges": ["\u2581 t", "h e", "\u2581t he"],
                      "byte_fallback": True, "unk_token": "<unk>"},
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}]},
            "pre_tokenizer": None,
            "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
                             {"id": 2, "content": "</s>", "special": True}, {"id": 11, "content": "<img>", "special": True}]}


def write_tokenizer(d, tj, tc):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)


class TestVocab(unittest.TestCase):
    def _write(self, d, tj, tc):
        write_tokenizer(d, tj, tc)

    def test_byte_level_bpe(self):
        tj = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120a": 3, "a b": 4},
                        "merges": [["a", "b"], ["\u0120", "a"], ["a b", "c"]]},
              "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": list(vocab._PRE_OF_REGEX)[0]}}, {"type": "ByteLevel"}]},
              "added_tokens": [{"id": 6, "content": "<|end|>", "special": True},
                               {"id": 7, "content": "<think>", "special": False},
                               {"id": 8, "content": "<|im|>", "special": False}]}
        with tempfile.TemporaryDirectory() as d:
            self._write(d, tj, {"bos_token": "<|end|>", "eos_token": {"content": "<|im|>"}, "add_bos_token": False})
            kv = {k[0]: k[2:] for k in vocab.tokenizer_kvs(d, {"vocab_size": 10, "pad_token_id": 7, "bos_token_id": 0})}
        self.assertEqual(kv["tokenizer.ggml.model"], ("gpt2",))
        self.assertEqual(kv["tokenizer.ggml.pre"], ("llama-bpe",))
        self.assertEqual(kv["tokenizer.ggml.tokens"][0],
                         ["a", "b", "ab", "\u0120a", "a b", "[PAD5]", "<|end|>", "<think>", "<|im|>", "[PAD9]"])
        self.assertEqual(kv["tokenizer.ggml.token_type"][0], [1, 1, 1, 1, 1, 5, 3, 4, 3, 5])
        self.assertEqual(kv["tokenizer.ggml.merges"][0], ["a b", "\u0120 a", "a\u0120b c"])
        ids = [kv["tokenizer.ggml.%s_token_id" % t][0] for t in ("bos", "eos", "padding")]
        self.assertEqual(ids, [6, 8, 7])
        self.assertEqual(kv["tokenizer.ggml.add_bos_token"], (False,))

    def test_sentencepiece_style_bpe(self):
        tj = spm_tokenizer()
        with tempfile.TemporaryDirectory() as d:
            self._write(d, tj, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True})
            kv = {k[0]: k[2:] for k in vocab.tokenizer_kvs(d, {"vocab_size": 11})}
        self.assertEqual(kv["tokenizer.ggml.model"], ("llama",))
        self.assertEqual(len(kv["tokenizer.ggml.tokens"][0]), 11)  # <img> (id 11) is past vocab_size
        self.assertEqual(kv["tokenizer.ggml.token_type"][0], [2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1])
        self.assertEqual(kv["tokenizer.ggml.scores"][0], [0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -2])
        self.assertEqual((kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.unknown_token_id"]), ((1,), (0,)))
        self.assertEqual(kv["tokenizer.ggml.add_space_prefix"], (True,))

    def test_real_tokenizers_when_present(self):
        found = 0
        for name, n, model, first_ctrl in (("llama3", 128256, "gpt2", 128000), ("qwen3", 151936, "gpt2", 151643),
                                           ("gemma3", 262144, "llama", 0), ("llama2", 32000, "llama", 1),
                                           ("gpt2", 50257, "gpt2", 50256)):
            d = os.path.join(TOKENIZERS, name)
            if not os.path.isfile(os.path.join(d, "tokenizer.json")):
                continue
            found += 1
            fixture = {"llama2": "tinyllama"}.get(name, name)
            kv = {k[0]: k[2:] for k in vocab.tokenizer_kvs(d, fm.config(fixture))}
            types = kv["tokenizer.ggml.token_type"][0]
            self.assertEqual((len(kv["tokenizer.ggml.tokens"][0]), len(types)), (n, n), name)
            self.assertEqual(kv["tokenizer.ggml.model"], (model,), name)
            self.assertEqual(types.index(3), first_ctrl, name)
            if model == "llama":
                self.assertEqual(types.count(6), 256, name)  # <0x00>..<0xFF>
        if not found:
            self.skipTest("no tokenizer folders under %s" % TOKENIZERS)


class TestReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = {}
        for name in fm.FIXTURES:
            cfg = fm.config(name)
            cls.models[name] = (cfg, fm.make_weights(cfg))

    def test_matches_independent_numpy_forward(self):
        # 12 tokens: wider than gemma3's window of 4, so its local layers mask keys
        for name, (cfg, w) in self.models.items():
            toks = [int(t) for t in np.random.default_rng(5).integers(0, cfg["vocab_size"], 12)]
            G = dict(h2g.gguf_arrays(cfg, {k: v.astype(np.float64) for k, v in w.items()}, np.float64))
            diff = np.abs(logits(cfg, w, toks) - independent.forward(cfg, G, toks)).max()
            self.assertLess(diff, 1e-10, name)

    def test_logits_finite_varied_and_causal(self):
        for name, (cfg, w) in self.models.items():
            rng = np.random.default_rng(7)
            a = [int(t) for t in rng.integers(0, cfg["vocab_size"], 16)]
            b = a[:10] + [int(t) for t in rng.integers(0, cfg["vocab_size"], 6)]
            la, lb = logits(cfg, w, a), logits(cfg, w, b)
            self.assertTrue(np.isfinite(la).all(), name)
            self.assertGreater(float(la.std(axis=1).min()), 0.1, name)
            self.assertGreater(len(set(la.argmax(axis=1).tolist())), 8, name)
            self.assertLess(float(np.abs(la[:10] - lb[:10]).max()), 1e-12, name)  # later tokens unseen
            self.assertGreater(float(np.abs(la[10:] - lb[10:]).max(axis=1).min()), 1e-6, name)

    def test_gemma3_window_is_distance_below_sliding_window(self):
        cfg, w = self.models["gemma3"]
        one = dict(cfg, num_hidden_layers=1, layer_types=["sliding_attention"])
        toks = [11, 12, 13, 14, 15, 16, 17, 18]
        base = logits(one, w, toks)[-1]
        at_w = logits(one, w, toks[:3] + [99] + toks[4:])[-1]      # key at distance 4 = window
        inside = logits(one, w, toks[:4] + [99] + toks[5:])[-1]    # key at distance 3
        self.assertLess(float(np.abs(base - at_w).max()), 1e-12)
        self.assertGreater(float(np.abs(base - inside).max()), 1e-6)
        glob = dict(one, layer_types=["full_attention"])
        seen = logits(glob, w, toks)[-1] - logits(glob, w, toks[:3] + [99] + toks[4:])[-1]
        self.assertGreater(float(np.abs(seen).max()), 1e-6)

    def test_gemma3_global_layer_sees_past_the_windows(self):
        # 6 layers reach back 6 * 3 = 18 positions through windows of 4; token 0 is 23 back
        cfg, w = self.models["gemma3"]
        toks = [int(t) for t in np.random.default_rng(9).integers(0, cfg["vocab_size"], 24)]
        other = [7] + toks[1:]
        self.assertEqual(fm.layer_types(cfg).count("full_attention"), 1)
        self.assertGreater(float(np.abs(logits(cfg, w, toks)[-1] - logits(cfg, w, other)[-1]).max()), 1e-6)
        local = dict(cfg, layer_types=["sliding_attention"] * 6)
        self.assertLess(float(np.abs(logits(local, w, toks)[-1] - logits(local, w, other)[-1]).max()), 1e-12)

    def test_gemma3_rope_bases_and_scale_are_used(self):
        cfg, w = self.models["gemma3"]
        toks = list(range(100, 112))
        base = logits(cfg, w, toks)[-1]
        for change in ({"rope_local_base_freq": 20000.0}, {"rope_theta": 10000.0}, {"query_pre_attn_scalar": 64}):
            self.assertGreater(float(np.abs(logits(dict(cfg, **change), w, toks)[-1] - base).max()), 1e-6, change)

    def test_llama3_scaling_changes_rotation(self):
        cfg, w = self.models["llama3"]
        toks = list(range(1000, 1012))
        plain = dict(cfg, rope_scaling=None)
        self.assertGreater(float(np.abs(logits(cfg, w, toks)[-1] - logits(plain, w, toks)[-1]).max()), 1e-6)


class TestScripts(unittest.TestCase):
    def test_make_fixtures_then_reference(self):
        with tempfile.TemporaryDirectory() as d:
            toks = os.path.join(d, "tokenizers")
            write_tokenizer(os.path.join(toks, "llama2"), spm_tokenizer(), {"bos_token": "<s>", "add_bos_token": True})
            with redirect_stdout(io.StringIO()):
                rc = make_fixtures.main([d, "--family", "tinyllama", "--family", "gpt2", "--dtype", "bf16",
                                         "--gguf-types", "f32,q8_0", "--tokenizers", toks])
            self.assertEqual(rc, 0)
            self.assertTrue(os.path.exists(os.path.join(d, "tinyllama", "hf-sharded", "tokenizer.json")))
            with open(os.path.join(d, "tinyllama", "hf", "config.json")) as f:
                cfg = json.load(f)
            self.assertEqual((cfg["_synthetic"], cfg["architectures"], cfg["torch_dtype"]),
                             (True, ["LlamaForCausalLM"], "bfloat16"))
            single = st.read_folder(os.path.join(d, "tinyllama", "hf"))
            sharded = st.read_folder(os.path.join(d, "tinyllama", "hf-sharded"))
            w = fm.make_weights(cfg)
            for n in w:  # bf16 as torch rounds it, and the shards hold the same values
                want = torch.from_numpy(w[n]).to(torch.bfloat16).to(torch.float32).numpy()
                self.assertTrue(np.array_equal(single[n], want) and np.array_equal(sharded[n], want), n)
            kvs, tensors, _ = read_gguf(os.path.join(d, "tinyllama", "model-f32.gguf"))
            self.assertEqual(len(kvs["tokenizer.ggml.tokens"][1][1]), 32000)  # 11 tokens + [PAD11]..
            self.assertEqual((kvs["tokenizer.ggml.bos_token_id"][1], kvs["tokenizer.ggml.add_bos_token"][1]), (1, True))
            ne, _, _, raw = tensors["output.weight"]
            self.assertTrue(np.array_equal(np.frombuffer(raw, np.float32).reshape(ne[1], ne[0]), single["lm_head.weight"]))
            out = os.path.join(d, "r.json")
            with redirect_stdout(io.StringIO()):
                rc = ref.main(["--model", os.path.join(d, "tinyllama", "hf-sharded"), "--tokens", "1,2,3,4",
                               "--all", "--out", out])
            self.assertEqual(rc, 0)
            with open(out) as f:
                doc = json.load(f)
            self.assertEqual((doc["n_vocab"], len(doc["logits"]), len(doc["logits"][0])), (32000, 4, 32000))
            self.assertTrue(np.array_equal(np.array(doc["logits"]), logits(cfg, single, [1, 2, 3, 4])))
            with open(os.path.join(d, "gpt2", "fixture.json")) as f:
                info = json.load(f)
            self.assertEqual((info["family"], info["tokenizer"]), ("gpt2", None))  # no tokenizers/gpt2 here
            self.assertTrue(os.path.exists(os.path.join(d, "gpt2", "model-q8_0.gguf")))

    def test_bad_input_is_one_clear_error(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(make_fixtures.main([tempfile.gettempdir(), "--family", "mistral"]), 1)
        self.assertIn("unknown family 'mistral'", err.getvalue())
        with tempfile.TemporaryDirectory() as d:
            cfg = small("gpt2")
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            st.write(os.path.join(d, "model.safetensors"), fm.make_weights(cfg))
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(ref.main(["--model", d, "--tokens", "1,320"]), 1)
            self.assertIn("outside the vocabulary [0, 320)", err.getvalue())


if __name__ == "__main__":
    unittest.main()
