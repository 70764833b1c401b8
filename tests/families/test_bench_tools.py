"""Tests of the benchmark helpers built on these fixtures (run with the others by ctest
families_reference): jobs/lib/synth_gguf.py (the Llama-3.2-1B-shape GGUF), the GGUF writer's tensors
made while writing, and jobs/lib/to_dllama.py's Llama 3 tokenizer, RoPE scaling and chat template.
"""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "jobs", "lib"))
import families as fm  # noqa: E402
import ggml_quants as gq  # noqa: E402
import gguf_file as gf  # noqa: E402
import hf_to_gguf as h2g  # noqa: E402
import synth_gguf  # noqa: E402
import to_dllama  # noqa: E402

LLAMA3_TOKENIZER = os.path.join(os.environ.get("MESHINFER_TOKENIZERS", os.path.join(
    HERE, "..", "..", "models", "cache", "tokenizers")), "node_modules", "@lenml", "tokenizer-llama3", "models")


class TestSynthGguf(unittest.TestCase):
    def test_llama32_1b_shape(self):
        cfg = synth_gguf.config("llama3.2-1b", 16)
        n = sum(int(np.prod(shape)) for _, shape, _ in fm.weight_specs(cfg))
        # Llama 3.2 1B's published count: the tied embeddings once, no output.weight
        self.assertEqual(n, 1235814400)
        self.assertNotIn("lm_head.weight", [name for name, _, _ in fm.weight_specs(cfg)])
        self.assertEqual(h2g.llama3_rope_factors(cfg).shape, (32,))

    def test_tinyllama_shape(self):
        cfg = synth_gguf.config("tinyllama-1.1b", 22)
        n = sum(int(np.prod(shape)) for _, shape, _ in fm.weight_specs(cfg))
        # TinyLlama-1.1B's count (untied: embeddings and lm_head both counted)
        self.assertEqual(n, 1100048384)
        self.assertIn("lm_head.weight", [name for name, _, _ in fm.weight_specs(cfg)])
        self.assertFalse(h2g.is_llama3_scaled(cfg))

    def test_tensors_match_the_fixture_path(self):
        # a one-layer model's tensors, made while written, equal gguf_arrays' encoding of the same weights
        cfg = synth_gguf.config("llama3.2-1b", 1)
        cfg.update(vocab_size=64, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16)  # small and fast; the layout is the same
        ts = {t.name: t for t in synth_gguf.tensors(cfg, seed=3, std=0.02)}
        weights = {name: synth_gguf.tensor(3, name, shape, kind, 0.02) for name, shape, kind in fm.weight_specs(cfg)}
        want = dict(h2g.gguf_arrays(cfg, weights))
        self.assertEqual(sorted(ts), sorted(want))
        for name, a in want.items():
            t = ts[name]
            self.assertEqual(t.shape, a.shape, name)
            self.assertEqual(t.data().tobytes(), gq.encode(a, t.ggml_type).tobytes(), name)
        self.assertEqual(ts["blk.0.attn_q.weight"].ggml_type, "F16")
        self.assertEqual(ts["blk.0.attn_norm.weight"].ggml_type, "F32")
        w = ts["blk.0.attn_norm.weight"].data().view(np.float32)
        self.assertAlmostEqual(float(w.mean()), 1.0, delta=0.005)


class TestLazyTensors(unittest.TestCase):
    def test_same_file_as_eager(self):
        a = np.arange(64, dtype=np.float32).reshape(2, 32) / 7
        with tempfile.TemporaryDirectory() as d:
            p1, p2 = os.path.join(d, "a.gguf"), os.path.join(d, "b.gguf")
            gf.write(p1, [("k", gf.UINT32, 1)], [gf.Tensor("x", a.shape, "Q8_0", gq.encode(a, "Q8_0"))])
            gf.write(p2, [("k", gf.UINT32, 1)], [gf.Tensor("x", a.shape, "Q8_0", make=lambda: gq.encode(a, "Q8_0"))])
            self.assertEqual(open(p1, "rb").read(), open(p2, "rb").read())

    def test_wrong_size_is_refused_by_name(self):
        t = gf.Tensor("blk.0.x", (2, 32), "F16", make=lambda: np.zeros(63, np.uint16))
        with self.assertRaisesRegex(ValueError, "blk.0.x: 126 bytes"):
            t.data()


class TestToDllamaLlama3(unittest.TestCase):
    def test_byte_alphabet(self):
        ab = to_dllama.byte_alphabet()
        self.assertEqual(sorted(ab.values()), list(range(256)))
        self.assertEqual(ab["\u0120"], 0x20)  # "Ġ" is the space
        self.assertEqual(ab["\u010a"], 0x0A)  # "Ċ" the newline
        self.assertEqual(ab["A"], 0x41)
        self.assertEqual(ab["\u0100"], 0x00)

    @unittest.skipUnless(os.path.isfile(os.path.join(LLAMA3_TOKENIZER, "tokenizer.json")), "no Llama 3 tokenizer")
    def test_llama3_tokenizer(self):
        pieces, scores, bos, eos, _ = to_dllama.read_tokenizer_json(LLAMA3_TOKENIZER)
        self.assertEqual(len(pieces), 128256)
        self.assertEqual((bos, eos), (128000, 128001))
        self.assertEqual(pieces[12805], b"Once")
        self.assertEqual(pieces[5304], b" upon")
        self.assertEqual(pieces[198], b"\n")
        self.assertEqual(pieces[128000], b"<|begin_of_text|>")
        self.assertEqual(scores[5304], -5304.0)

    def test_llama3_rope_checked_against_rope_freqs(self):
        cfg = synth_gguf.config("llama3.2-1b", 1)
        h = {"rope_freqs": h2g.llama3_rope_factors(cfg).astype(np.float32)}
        keys = dict(to_dllama.llama3_rope_keys(h, "32,1,4,8192", 500000.0, 64))
        self.assertEqual(keys, {to_dllama.K_ROPE_TYPE: 2, to_dllama.K_ROPE_FACTOR: 32, to_dllama.K_ROPE_LOW: 1,
                                to_dllama.K_ROPE_HIGH: 4, to_dllama.K_ROPE_ORIG: 8192})
        for bad in ("8,1,4,8192", "32,1,4,4096", "32,1.5,4,8192", "32,1,4"):
            with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit, msg=bad):
                to_dllama.llama3_rope_keys(h, bad, 500000.0, 64)
        with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            to_dllama.llama3_rope_keys({}, "32,1,4,8192", 500000.0, 64)

    def test_chat_template_in_the_tokenizer_file(self):
        # dllama reads the header pairs, then the template's bytes (key 7 = their length), then the EOS ids
        tmpl = to_dllama.chat_template_text("llama2")
        self.assertIn(b"[INST]", tmpl)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.t")
            to_dllama.write_tokenizer(path, [b"<unk>", b"</s>", b"a", b"<s>"], [0.0, 0.0, -1.0, 0.0], 3, 1, tmpl)
            with open(path, "rb") as f:
                data = f.read()
        magic, size = np.frombuffer(data[:8], "<i4")
        self.assertEqual(magic, to_dllama.TOKENIZER_MAGIC)
        kv = dict(np.frombuffer(data[8:size], "<i4").reshape(-1, 2).tolist())
        self.assertEqual(kv[to_dllama.T_CHAT_TEMPLATE], len(tmpl))
        self.assertEqual(data[size:size + len(tmpl)], tmpl)
        self.assertEqual(int(np.frombuffer(data[size + len(tmpl):size + len(tmpl) + 4], "<i4")[0]), 1)  # EOS id
        self.assertEqual(data[size + len(tmpl) + 4 + 8:size + len(tmpl) + 4 + 8 + 5], b"<unk>")  # first piece
        self.assertIsNone(to_dllama.chat_template_text(None))
        self.assertIn(b"<|im_start|>", to_dllama.chat_template_text(None, "{{ '<|im_start|>' }}"))
        for bad in ("bogus", "@/nonexistent/template.jinja"):
            with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit, msg=bad):
                to_dllama.chat_template_text(bad)
        with redirect_stderr(io.StringIO()):  # a config's template without a marker: left out, no error
            self.assertIsNone(to_dllama.chat_template_text(None, "{{ messages }}"))
        with tempfile.NamedTemporaryFile("w", suffix=".jinja") as f:
            f.write("{{ messages }}")
            f.flush()
            with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                to_dllama.chat_template_text("@" + f.name)  # asked for, and no marker dllama recognises


if __name__ == "__main__":
    unittest.main()
