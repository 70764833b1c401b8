"""Tests of train/patchtst.py: /usr/bin/python3 -m unittest discover -s train (Debian's python3: torch, h5py)."""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patchtst as pt  # noqa: E402

torch.set_num_threads(2)


def synth(seed=3, **kw):
    cfg = pt.Config(n_channels=3, synthetic=1, name="t", **kw)
    return pt.PatchTST(cfg).init_weights(torch.Generator().manual_seed(seed), synthetic=True)


def inputs(B, L, seed=5, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(L, dtype=torch.float64)
    x = (torch.randn(B, L, generator=g, dtype=torch.float64) * 0.5 + torch.sin(t / 4)[None]
         * torch.rand(B, 1, generator=g, dtype=torch.float64) * 3 + torch.randn(B, 1, generator=g,
                                                                                dtype=torch.float64) * 10)
    return x.to(dtype)


def np_mix(z):
    """splitmix64 in numpy uint64 (wrapping) arithmetic: an implementation independent of pt.mix."""
    with np.errstate(over="ignore"):
        z = np.uint64(z) + np.uint64(0x9e3779b97f4a7c15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        return int(z ^ (z >> np.uint64(31)))


def reference_forward(model, x, D, keep, mode, lost):
    """docs/patchtst.md done literally, one device and one row at a time, float64: device r's residual
    columns, its heads and hidden units; lost(l, w, n, s, r) -> bool. Slow; small models only."""
    cfg = model.cfg
    F, H, hd, N, Hd = cfg.dim, cfg.n_heads, cfg.head_dim, cfg.n_patches, cfg.hidden_dim
    P = {k: v.detach().double() for k, v in model.named_parameters()}
    own = lambda width, c: c // (width // D)  # noqa: E731
    widths = cfg.widths()

    def held(l, w, d, n, c):
        o = own(widths[w], c)
        kept = True if w == pt.FINAL else bool(keep[w][l, c])
        if o == d:
            return kept or mode == "aware"
        return kept and not lost(l, w, n, o, d)

    def ln(xrow, l, w, d, n, g, b):
        hmask = [held(l, w, d, n, c) for c in range(F)]
        vals = [float(xrow[c]) for c in range(F) if hmask[c]]
        cnt = len(vals)
        mu = sum(vals) / cnt
        var = sum((v - mu) ** 2 for v in vals) / cnt
        return torch.tensor([(float(xrow[c]) - mu) / math.sqrt(var + cfg.norm_eps) * float(g[c]) + float(b[c])
                             if hmask[c] else 0.0 for c in range(F)], dtype=torch.float64)

    out = []
    for xb in x.double():
        mu = xb.mean()
        sigma = math.sqrt(float(((xb - mu) ** 2).mean()) + pt.REVIN_EPS)
        xn = (xb - mu) / sigma
        X = torch.stack([P["patch_embed"] @ xn[n * cfg.patch_stride:n * cfg.patch_stride + cfg.patch_len]
                         + P["patch_embed_b"] + P["pos_embed"][n] for n in range(N)])
        for l in range(cfg.n_layers):
            p = {k: P[f"layers.{l}.{k}"] for k in pt.LAYER_TENSORS}
            heads = torch.zeros(N, F, dtype=torch.float64)
            for d in range(D):
                Xb = torch.stack([ln(X[n], l, pt.ATTN_IN, d, n, p["attention_norm"], p["attention_norm_b"])
                                  for n in range(N)])
                for h in range(d * H // D, (d + 1) * H // D):
                    sl = slice(h * hd, (h + 1) * hd)
                    Q = Xb @ p["wq"][sl].t() + p["wq_b"][sl]
                    K = Xb @ p["wk"][sl].t() + p["wk_b"][sl]
                    V = Xb @ p["wv"][sl].t() + p["wv_b"][sl]
                    heads[:, sl] = torch.softmax(Q @ K.t() / math.sqrt(hd), -1) @ V
            Xn = X.clone()
            for d in range(D):
                C = slice(d * F // D, (d + 1) * F // D)
                for n in range(N):
                    hv = torch.tensor([float(heads[n, c]) if held(l, pt.HEADS, d, n, c) else 0.0 for c in range(F)],
                                      dtype=torch.float64)
                    Xn[n, C] += p["wo"][C] @ hv + p["wo_b"][C]
            X = Xn
            hid = torch.zeros(N, Hd, dtype=torch.float64)
            for d in range(D):
                U = slice(d * Hd // D, (d + 1) * Hd // D)
                for n in range(N):
                    Xb = ln(X[n], l, pt.FFN_IN, d, n, p["ffn_norm"], p["ffn_norm_b"])
                    hid[n, U] = torch.nn.functional.gelu(p["w1"][U] @ Xb + p["w1_b"][U])
            Xn = X.clone()
            for d in range(D):
                C = slice(d * F // D, (d + 1) * F // D)
                for n in range(N):
                    hv = torch.tensor([float(hid[n, u]) if held(l, pt.HIDDEN, d, n, u) else 0.0 for u in range(Hd)],
                                      dtype=torch.float64)
                    Xn[n, C] += p["w2"][C] @ hv + p["w2_b"][C]
            X = Xn
        y = torch.zeros(cfg.horizon, dtype=torch.float64)
        for j in range(cfg.horizon):
            d = next(r for r in range(D) if cfg.horizon * r // D <= j < cfg.horizon * (r + 1) // D)
            Xv = torch.stack([torch.tensor([float(X[n, c]) if held(-1, pt.FINAL, d, n, c) else 0.0 for c in range(F)],
                                           dtype=torch.float64) for n in range(N)])
            y[j] = P["head"][j] @ Xv.reshape(-1) + P["head_b"][j]
        out.append(y * sigma + mu)
    return torch.stack(out)


class TestHash(unittest.TestCase):
    def test_splitmix64_known_outputs(self):
        # splitmix64 with state 0: outputs mix(0), mix(golden), mix(2 golden), ...
        known = [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f]
        g = 0x9e3779b97f4a7c15
        for i, want in enumerate(known):
            self.assertEqual(pt.mix((i * g) & pt.M64), want)
            self.assertEqual(np_mix((i * g) & pt.M64), want)

    def test_mix_matches_numpy(self):
        for z in [1, 2, 0x5eed, 0xffffffffffffffff, 0x123456789abcdef0, 1 << 63, 42 ^ 0x5eed]:
            self.assertEqual(pt.mix(z), np_mix(z))

    def test_loss_rule_by_hand(self):
        def u(seed, n, l, w, s, r, mode):
            h = np_mix(seed ^ 0x5eed)
            h = np_mix(h ^ n)
            h = np_mix(h ^ (((l + 1) << 8) | w))
            if mode != "receiver":
                h = np_mix(h ^ (s * 2 + 1))
            if mode != "sender":
                h = np_mix(h ^ (r * 2))
            return (h >> 11) / 9007199254740992.0

        for args in [(1, 0, 0, 0, 0, 1), (1, 10, 5, 3, 3, 2), (7, 4, -1, 4, 1, 0), (2 ** 64 - 1, 3, 2, 1, 15, 14)]:
            for mode in pt.LOSS_MODES:
                self.assertEqual(pt.loss_u(*args, mode), u(*args, mode))
        # the final exchange hashes (0 << 8 | 4) = 4; the sender's word is odd, the receiver's even
        self.assertEqual(pt.loss_u(1, 0, -1, 4, 0, 1, "link"),
                         (np_mix(np_mix(np_mix(np_mix(np_mix(1 ^ 0x5eed) ^ 0) ^ 4) ^ 1) ^ 2) >> 11) * 2.0 ** -53)
        # mode sender ignores r, receiver ignores s; never lost to oneself
        self.assertEqual(pt.loss_u(3, 2, 1, 2, 1, 0, "sender"), pt.loss_u(3, 2, 1, 2, 1, 3, "sender"))
        self.assertEqual(pt.loss_u(3, 2, 1, 2, 0, 1, "receiver"), pt.loss_u(3, 2, 1, 2, 3, 1, "receiver"))
        self.assertFalse(pt.message_lost(1.0, 3, 0, 0, 0, 2, 2, "link"))
        self.assertTrue(pt.message_lost(1.0, 3, 0, 0, 0, 1, 2, "link"))

    def test_loss_rate(self):
        m = pt.HashLoss(0.3, 9, "link", 8, 11)
        rate = float(torch.stack([m(l, w) for l in range(6) for w in range(4)]).float().sum()) / (24 * 11 * 56)
        self.assertAlmostEqual(rate, 0.3, delta=0.03)


class TestLayerNorm(unittest.TestCase):
    def test_device_local_by_hand(self):
        x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], dtype=torch.float64)  # B=1, N=1, F=4
        held = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)[:, None, None]  # D=2
        g = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
        b = torch.tensor([0.5, 0.25, 0.0, -1.0], dtype=torch.float64)
        y = pt.local_layernorm(x, held, g, b, 1e-5)[:, 0, 0]  # [D, F]
        # device 0 holds 1, 3, 4: mean 8/3, variance ((5/3)^2 + (1/3)^2 + (4/3)^2) / 3 = 14/9
        s = math.sqrt(14 / 9 + 1e-5)
        want0 = [(1 - 8 / 3) / s * 1 + 0.5, 0.0, (3 - 8 / 3) / s * 3 + 0.0, (4 - 8 / 3) / s * 4 - 1.0]
        # device 1 holds all: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
        s1 = math.sqrt(1.25 + 1e-5)
        want1 = [(1 - 2.5) / s1 + 0.5, (2 - 2.5) / s1 * 2 + 0.25, (3 - 2.5) / s1 * 3, (4 - 2.5) / s1 * 4 - 1.0]
        for got, want in ((y[0], want0), (y[1], want1)):
            for a, c in zip(got.tolist(), want):
                self.assertAlmostEqual(a, c, places=12)


class TestDevices(unittest.TestCase):
    def test_d_devices_equal_one(self):
        model = synth()
        x = inputs(16, model.cfg.lookback)
        with torch.no_grad():
            y1 = model(x)
            for D in (2, 4, 8, 16):
                sg = pt.Somegather(model.cfg, D)
                yD = model(x, sg, fast=False)
                self.assertLess(float((yD - y1).abs().max()), 1e-5, f"D={D}")
                # all-ones held masks with no loss at all: also through the loss path (p = 0)
                yL = model(x, sg, pt.HashLoss(0.0, 1, "link", D, model.cfg.n_patches), fast=False)
                self.assertLess(float((yL - y1).abs().max()), 1e-5, f"D={D}, p=0")

    def test_vectorised_equals_reference(self):
        cfg_kw = dict(dim=16, hidden_dim=32, n_layers=2, n_heads=4, head_dim=4, lookback=32, horizon=6,
                      patch_len=8, patch_stride=8)
        model = synth(seed=11, **cfg_kw).double()
        x = inputs(2, model.cfg.lookback, seed=2, dtype=torch.float64)
        D = 4
        for mode in ("aware", "magnitude"):
            keep = pt.prune_masks(model, D, 0.5, mode)
            for lmode in pt.LOSS_MODES:
                hl = pt.HashLoss(0.4, 5, lmode, D, model.cfg.n_patches)
                sg = pt.Somegather(model.cfg, D, keep, mode)
                with torch.no_grad():
                    got = model(x, sg, hl)
                want = reference_forward(model, x, D, keep, mode,
                                         lambda l, w, n, s, r: pt.message_lost(0.4, 5, n, l, w, s, r, lmode))
                self.assertLess(float((got - want).abs().max()), 1e-9, f"{mode} {lmode}")

    def test_dropout_runs_and_differs(self):
        model = synth()
        x = inputs(4, model.cfg.lookback)
        sg = pt.Somegather(model.cfg, 4)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            y0 = model(x, sg)
            for mode in pt.LOSS_MODES:
                for unit in ("row", "window"):
                    y = model(x, sg, pt.DropoutLoss(0.5, mode, 4, 4, model.cfg.n_patches, unit, g))
                    self.assertTrue(torch.isfinite(y).all())
                    self.assertGreater(float((y - y0).abs().max()), 1e-4)


class TestPruning(unittest.TestCase):
    def test_counts_and_nesting(self):
        model = synth()
        D = 4
        k1 = pt.prune_masks(model, D, 0.25, "aware")
        k2 = pt.prune_masks(model, D, 0.5, "aware", k1)
        for w, width in enumerate(model.cfg.widths()[:4]):
            n = width // D
            per = k2[w].reshape(model.cfg.n_layers, D, n).sum(-1)
            self.assertTrue(bool((per == n - math.ceil(0.5 * n)).all()))
            self.assertTrue(bool((k2[w] <= k1[w]).all()), "stage 2 keeps a column stage 1 dropped")

    def test_aware_score_by_hand(self):
        model = synth()
        D = 2
        L = model.layers[0]
        s = pt.pruning_scores(model, D, pt.HEADS, "aware")
        c = 3  # owned by device 0: rows of wo on device 1 are 64..127
        self.assertAlmostEqual(float(s[0, c]), float(L.wo[64:, c].double().abs().sum()), places=9)
        s = pt.pruning_scores(model, D, pt.ATTN_IN, "aware")
        c = 100  # owned by device 1: rows 0..63 of wq, wk, wv are device 0's
        want = float(sum(W[:64, c].double().abs().sum() for W in (L.wq, L.wk, L.wv)) * abs(float(L.attention_norm[c])))
        self.assertAlmostEqual(float(s[0, c]), want, places=9)
        s = pt.pruning_scores(model, D, pt.HIDDEN, "magnitude")
        self.assertAlmostEqual(float(s[0, 7]), float(L.w2[:, 7].double().abs().sum()), places=9)

    def test_aware_at_one_device_is_unpruned(self):
        model = synth()
        x = inputs(4, model.cfg.lookback)
        keep = pt.prune_masks(model, 4, 0.5, "aware")
        with torch.no_grad():
            y = model(x)
            ya = model(x, pt.Somegather(model.cfg, 1, keep, "aware"))
            ym = model(x, pt.Somegather(model.cfg, 1, keep, "magnitude"))
        self.assertLess(float((ya - y).abs().max()), 1e-6)
        self.assertGreater(float((ym - y).abs().max()), 1e-3)


class TestFile(unittest.TestCase):
    def test_round_trip(self):
        import h5py
        model = synth(seed=8)
        sg = pt.Somegather(model.cfg, 4, pt.prune_masks(model, 4, 0.5, "magnitude"), "magnitude")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.h5")
            pt.save_model(path, model, sg, 0.5)
            m2, info = pt.load_model(path)
            with h5py.File(path) as f:
                self.assertEqual(f.attrs["format_version"].dtype, np.int32)
                self.assertEqual(f.attrs["norm_eps"].dtype, np.float32)
                self.assertEqual(f.attrs["family"], b"patchtst")
                self.assertEqual(f["layers/000/wo_t"].dtype, np.float32)
                self.assertTrue(np.array_equal(f["layers/002/wo_t"][:], model.layers[2].wo.detach().numpy().T))
                self.assertTrue(np.array_equal(f["layers/002/w2_t"][:], model.layers[2].w2.detach().numpy().T))
                self.assertEqual(f["somegather/keep_hidden"].shape, (6, 256))
                self.assertEqual(f["somegather/keep_hidden"].dtype, np.uint8)
                self.assertEqual(f["somegather"].attrs["prune_mode"], b"magnitude")
        self.assertEqual(m2.cfg.as_dict(), model.cfg.as_dict())
        for (k, a), (k2, b) in zip(model.state_dict().items(), m2.state_dict().items()):
            self.assertEqual(k, k2)
            self.assertTrue(torch.equal(a, b), k)
        self.assertEqual((info["ranks"], info["prune_mode"]), (4, "magnitude"))
        self.assertAlmostEqual(info["prune"], 0.5)
        for w in range(4):
            self.assertTrue(torch.equal(info["keep"][w], sg.keep[w]))
        x = inputs(3, model.cfg.lookback)
        with torch.no_grad():
            self.assertTrue(torch.equal(model(x, sg), m2(x, pt.Somegather(m2.cfg, 4, info["keep"], "magnitude"))))

    def test_cli_synth_eval(self):
        with tempfile.TemporaryDirectory() as d:
            csvp, mp, outp = (os.path.join(d, n) for n in ("s.csv", "m.h5", "f.csv"))
            pt.main(["series", "--out", csvp, "--rows", "700", "--n-channels", "3"])
            pt.main(["synth", "--out", mp, "--n-channels", "3", "--prune", "0.25", "--devices", "2"])
            pt.main(["eval", "--model", mp, "--series", csvp, "--split", csvp[:-4] + ".split.json",
                     "--window", "2", "--out", outp, "--loss", "0.1", "--loss-mode", "sender"])
            with open(outp) as fh:
                lines = fh.read().splitlines()
            self.assertEqual(lines[0], "window,row,step,c0,c1,c2")
            self.assertEqual(len(lines), 1 + 24)


# ----------------------------------------------------------------------------- bad input (the CLI's error rules)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "patchtst.py")

# Runs each CLI case as its own process: a server imports torch once (about 3 s here) and compiles the script,
# and forks a child per case, which runs it as `python3 patchtst.py ARGS` would (as __main__), with its own stdin
# (/dev/null), stdout and stderr files and working directory; an exception escaping the script prints its
# traceback and exits 1, as the interpreter would; a child still running after its timeout is killed (rc None).
SERVER = r"""
import json, os, sys, time, traceback
script = sys.argv[1]
sys.path.insert(0, os.path.dirname(script))
import patchtst  # noqa: F401  (torch, numpy, h5py)
with open(script) as fh:
    code_obj = compile(fh.read(), script, "exec")
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(req["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            sys.argv = [script] + req["argv"]
            try:
                exec(code_obj, {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    deadline = time.time() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.time() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            rc = None
            break
        time.sleep(0.005)
    print(json.dumps({"rc": rc}), flush=True)
"""


class Runner:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, SCRIPT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.tmp = tempfile.mkdtemp(prefix="patchtst-cli-")

    def run(self, argv, cwd, timeout=60):
        out, err = os.path.join(self.tmp, "out"), os.path.join(self.tmp, "err")
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "stdout": out, "stderr": err,
                                          "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        rc = json.loads(self.proc.stdout.readline())["rc"]
        with open(out) as o, open(err) as e:
            return rc, o.read(), e.read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


RUNNER = None


def runner():
    global RUNNER
    if RUNNER is None:
        RUNNER = Runner()
    return RUNNER


def tearDownModule():
    if RUNNER is not None:
        RUNNER.close()


def write(path, text, mode="w"):
    with open(path, mode) as fh:
        fh.write(text)
    return path


def series_text(rows=700, cols=("a", "b", "c"), first=None):
    head = ([first] if first else []) + list(cols)
    lines = [",".join(head)]
    for i in range(rows):
        vals = [f"{math.sin(i / 10 + j) * (j + 1) + 0.001 * i:.5f}" for j in range(len(cols))]
        lines.append(",".join(([f"t{i}"] if first else []) + vals))
    return "\n".join(lines) + "\n"


SPLIT = '{"train": [0, 400], "val": [400, 550], "test": [550, 700]}'


class CLICase(unittest.TestCase):
    """Fixtures in one folder: s.csv (700 rows x a, b, c), split.json, m.h5 (a small synthetic 3-channel model:
    dim 16, 4 heads, one layer; lookback 96, horizon 24)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="patchtst-test-")
        cls.csv = write(cls.path("s.csv"), series_text())
        cls.split = write(cls.path("split.json"), SPLIT)
        cls.model = cls.path("m.h5")
        pt.save_model(cls.model, synth(seed=4, dim=16, hidden_dim=32, n_layers=1, n_heads=4, head_dim=4))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    def snapshot(self):
        """Every file of the fixture folder and its bytes."""
        out = {}
        for name in sorted(os.listdir(self.dir)):
            p = self.path(name)
            out[name] = None
            if os.path.isfile(p) and os.path.getsize(p) < 1 << 24:
                with open(p, "rb") as fh:
                    out[name] = fh.read()
        return out

    def fails(self, argv, code=1, *fragments, timeout=60, progress=False):
        """argv fails with exactly one line `patchtst: error: ...` holding every fragment (after progress lines
        of training with progress), exit code code, and leaves the fixture folder as it was (no output, no
        temporary file, no input changed)."""
        before = self.snapshot()
        rc, out, err = runner().run(argv, self.dir, timeout)
        self.assertIsNotNone(rc, f"{argv}: still running after {timeout} s")
        lines = err.splitlines()
        if progress:
            self.assertTrue(all(line.startswith("train: ") for line in lines[:-1]), err)
            lines = lines[-1:]
        self.assertEqual(len(lines), 1, f"{argv}: stderr {err!r}")
        self.assertTrue(lines[0].startswith("patchtst: error: "), lines[0])
        self.assertEqual(rc, code, f"{argv}: {lines[0]}")
        for f in fragments:
            self.assertIn(f, lines[0], argv)
        self.assertEqual(self.snapshot(), before, f"{argv} changed the folder")
        return lines[0]

    def succeeds(self, argv):
        rc, out, err = runner().run(argv, self.dir)
        self.assertEqual(rc, 0, f"{argv}: {err}")
        return out, err

    def ev(self, *extra, series=None, split=None):
        return ["eval", "--model", self.model, "--series", series or self.csv, "--split", split or self.split,
                "--window", "0"] + list(extra)


def tiny_train(series, split, out, *extra):
    """A small, fast training run (a 2-layer, dim 8 model, 64 samples)."""
    return ["train", "--series", series, "--split", split, "--out", out, "--dim", "8", "--hidden-dim", "16",
            "--n-layers", "1", "--n-heads", "2", "--epochs", "1", "--max-samples", "64", "--batch-size", "32",
            "--eval-stride", "24"] + list(extra)


class TestTracebacks(CLICase):
    """Kind 1: what gave a Python traceback gives one error line."""

    def test_series_faults(self):
        cases = [("missing.csv", None, "no such file"),
                 ("empty.csv", "", "empty series file"),
                 ("header.csv", "a,b,c\n", "no data rows after the header"),
                 ("gap.csv", "a,b,c\n1,2,3\n1,,3\n", "line 3, column 'b': missing value"),
                 ("ragged.csv", "a,b,c\n1,2,3\n1,2\n", "line 3 has 2 fields, the header has 3")]
        for name, text, frag in cases:
            with self.subTest(name):
                p = self.path(name)
                if text is not None:
                    write(p, text)
                self.fails(self.ev(series=p), 1, p, frag)
                if text is not None:
                    os.unlink(p)
        self.fails(self.ev(series=self.dir), 1, "is a directory")

    def test_split_faults(self):
        for name, text, frag in [("nojson.json", "train: [0, 400]", "not valid JSON"),
                                 ("nokey.json", '{"train": [0, 400], "val": [400, 550]}', '"test" is missing')]:
            with self.subTest(name):
                p = write(self.path(name), text)
                self.fails(self.ev(split=p), 1, p, frag)
                os.unlink(p)

    def test_model_faults(self):
        import h5py
        lm = self.path("lm.h5")
        with h5py.File(lm, "w") as f:  # a language model: format_version 3 without family
            for k, v in (("format_version", 3), ("dim", 64), ("n_layers", 2), ("vocab_size", 512)):
                f.attrs[k] = np.int32(v)
        self.fails(["eval", "--model", lm, "--series", self.csv], 1, lm, "not a patchtst time-series model",
                   "family missing")
        with h5py.File(lm, "w") as f:
            f.attrs["format_version"] = np.int32(2)
        self.fails(["eval", "--model", lm, "--series", self.csv], 1, "format_version 2")
        os.unlink(lm)
        cut = self.path("cut.h5")
        with open(self.model, "rb") as src, open(cut, "wb") as dst:
            dst.write(src.read(os.path.getsize(self.model) // 2))
        self.fails(["eval", "--model", cut, "--series", self.csv], 1, cut, "truncated or corrupt")
        os.unlink(cut)

    def test_option_faults(self):
        for extra, frag in [(["--devices", "0"], "argument --devices: 0 must be >= 1"),
                            (["--devices", "3"], "--devices 3: the devices must divide n_heads 4"),
                            (["--threads", "0"], "argument --threads: 0 is outside [1, 1024]")]:
            with self.subTest(extra):
                self.fails(self.ev(*extra), 2, frag)
        train = tiny_train(self.csv, self.split, self.path("t.h5"))
        for extra, frag in [(["--devices", "0"], "0 must be >= 1"), (["--devices", "3"], "must divide n_heads 2"),
                            (["--batch-size", "0"], "argument --batch-size"), (["--threads", "0"], "--threads")]:
            with self.subTest(extra):
                self.fails(train + extra, 2, "patchtst: error: train: ", frag)
        self.fails(["eval", "--model"], 2, "expected one argument")


class TestNoHang(CLICase):
    """Kind 2: only regular files are read, and only so much of them."""

    def test_devices_and_fifos(self):
        self.fails(self.ev(series="/dev/zero"), 1, "/dev/zero", "not a regular file", timeout=30)
        self.fails(self.ev(split="/dev/zero"), 1, "/dev/zero", "not a regular file", timeout=30)
        fifo = self.path("fifo.csv")
        os.mkfifo(fifo)
        try:
            self.fails(self.ev(series=fifo), 1, "not a regular file", timeout=30)
        finally:
            os.unlink(fifo)

    def test_sizes(self):
        big = self.path("big.csv")
        with open(big, "wb") as fh:  # sparse: 1 GiB + 1 byte, no disk space
            fh.truncate((1 << 30) + 1)
        self.fails(self.ev(series=big), 1, "larger than 1 GiB", timeout=30)
        os.unlink(big)
        long = write(self.path("long.csv"), "a,b,c\n" + "1" * (1 << 20) + "1,2,3\n")
        self.fails(self.ev(series=long), 1, "line 2 is longer than 1 MiB", timeout=30)
        os.unlink(long)

    def test_real_process(self):
        """The script itself (not forked from a loaded interpreter): no hang, one line."""
        r = subprocess.run([sys.executable, SCRIPT] + self.ev(series="/dev/zero"), capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.splitlines(), ["patchtst: error: /dev/zero: the series file is not a regular "
                                                 "file (a FIFO, socket or device)"])


class TestOutputs(CLICase):
    """Kind 3: outputs never overwrite an input, are checked before any work, and appear only on success."""

    def test_inputs_refused(self):
        link = self.path("link.csv")
        os.symlink(self.csv, link)
        train = tiny_train(self.csv, self.split, self.path("t.h5"))
        cases = [(tiny_train(self.csv, self.split, self.csv), "same file as the input"),
                 (tiny_train(self.csv, self.split, link), "same file as the input"),
                 (train + ["--json", self.split], "same file as the input"),
                 (train + ["--json", self.path("t.h5")], "same file as the model file"),
                 (self.ev("--out", self.model), "same file as the input"),
                 (self.ev("--json", self.csv), "same file as the input"),
                 (self.ev("--out", link), "same file as the input"),
                 (self.ev("--out", self.dir), "is a directory"),
                 (self.ev("--json", self.dir + "/"), "names a directory"),
                 (self.ev("--out", self.path("no/f.csv")), "directory " + self.path("no") + " does not exist"),
                 (self.ev("--out", self.path("f.csv"), "--json", self.path("no/r.json")), "does not exist"),
                 (["synth", "--out", self.path("no/m.h5")], "does not exist"),
                 (["series", "--out", self.path("x.csv"), "--split", self.path("x.csv")], "same file as")]
        try:
            for argv, frag in cases:
                with self.subTest(argv):
                    self.fails(argv, 1, frag)
        finally:
            os.unlink(link)

    def test_failure_leaves_nothing(self):
        keep = write(self.path("keep.csv"), "an older file\n")
        two = write(self.path("two.csv"), "a,b\n" + "1,2\n" * 700)  # 2 channels; the model has 3
        self.fails(self.ev("--out", keep, "--json", self.path("r.json"), series=two), 1, "2 channel(s)")
        self.fails(tiny_train(self.csv, self.split, self.path("t.h5"), "--json", self.path("r.json"), "--lr", "1e30",
                              "--clip", "0"), 1, "not finite", "nothing written", progress=True)
        os.unlink(two)
        os.unlink(keep)

    def test_success_replaces(self):
        out, js = self.path("f.csv"), self.path("r.json")
        write(out, "old\n")
        self.succeeds(self.ev("--out", out, "--json", js))
        with open(out) as fh:
            self.assertEqual(fh.readline(), "window,row,step,a,b,c\n")
        with open(js) as fh:
            self.assertEqual(json.load(fh)["windows"], 1)
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.startswith(".")), [])
        os.unlink(out)
        os.unlink(js)


class TestSeriesRules(unittest.TestCase):
    """Kind 4: the engine's CSV and split rules (src/model/series.c, src/cli/cmd_forecast.c), in process."""

    def setUp(self):
        self.d = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.d.cleanup()

    def csv(self, text, name="s.csv"):
        return write(os.path.join(self.d.name, name), text, "wb" if isinstance(text, bytes) else "w")

    def bad(self, text, *fragments):
        p = self.csv(text)
        with self.assertRaises(pt.Error) as cm:
            pt.read_series(p)
        for f in (p,) + fragments:
            self.assertIn(f, str(cm.exception))
        return str(cm.exception)

    def test_values(self):
        for v in ("nan", "NaN", "inf", "-Infinity", "NA", "1_0", "1e", "0x", "1 2", "--1", "1e400", "1e-320"):
            with self.subTest(v):
                self.bad(f"a,b\n1,2\n3,{v}\n", "line 3, column 'b'", "is not a finite number")
        self.bad("a,b\n1,2\n3,\n", "line 3, column 'b': missing value")
        self.bad('a,b\n1,2\n3," "\n', "line 3, column 'b': missing value")
        self.bad("x,y\n1,2\n1e39,0\n", "line 3, column 'x'", "overflows float32")
        self.bad("x,y\n1,2\n-3.5e38,0\n", "line 3, column 'x'", "overflows float32")
        v, names = pt.read_series(self.csv('a,b\n 1.5 ,"2"\r\n0x1p3,-.5e1\n+3.,1e-300\n3.4e38,0\n\n \n'))
        self.assertEqual(names, ["a", "b"])
        self.assertEqual(v.tolist(), [[1.5, 2.0], [8.0, -5.0], [3.0, 1e-300], [3.4e38, 0.0]])

    def test_columns(self):
        v, names = pt.read_series(self.csv("Timestamp,a\n2020-01-01,1\nyesterday,2\n"))
        self.assertEqual((names, v.tolist()), (["a"], [[1.0], [2.0]]))
        v, names = pt.read_series(self.csv("date\n1\n2\n"))  # a lone column is a channel
        self.assertEqual(names, ["date"])
        self.bad("a,date\n1,2020-01-01\n", "line 2, column 'date'")  # only a FIRST time column is left out
        self.bad("station,a\nX,1\n", "line 2, column 'station'")  # no column is dropped for its values
        self.bad("a,b\n1,2,3\n", "line 2 has 3 fields, the header has 2")
        self.bad("a,b\n1,2\n\n3,4\n", "line 3 is blank but data rows follow (line 4)")
        self.bad(",".join(f"c{j}" for j in range(4097)) + "\n", "more than 4096 columns")
        v, names = pt.read_series(self.csv(",".join(f"c{j}" for j in range(4096)) + "\n" + ",".join(["1"] * 4096)))
        self.assertEqual(v.shape, (1, 4096))
        self.bad("\na\n1\n", "line 1: the header row is blank")
        self.bad(b"a\n1\x002\n", "line 2 holds a NUL byte")

    def test_strtod(self):
        self.assertEqual(pt.strtod(b"0x1p-1074"), 5e-324)  # exact: no ERANGE
        self.assertIsNone(pt.strtod(b"4.9406564584124654e-324"))  # inexact below the normal range: ERANGE
        self.assertIsNone(pt.strtod(b"0x1.fffffffffffffp-1023"))  # tiny before rounding up to the smallest normal
        self.assertEqual(pt.strtod(b"2.2250738585072014e-308"), 2.2250738585072014e-308)
        self.assertEqual(pt.strtod(b"\v-0"), 0.0)
        for t in (b"inf", b"nan(1)", b"1.8e308", b"0x1p1024", b"1_0", b"", b" "):
            self.assertIsNone(pt.strtod(t), t)

    def split_bad(self, text, *fragments, T=700, need_val=True):
        p = self.csv(text, "split.json")
        with self.assertRaises(pt.Error) as cm:
            pt.read_split(p, T, need_val)
        for f in (p,) + fragments:
            self.assertIn(f, str(cm.exception))

    def test_split(self):
        ok = self.csv('{"name": "x", "train": [0, 400], "val": [400.0, 550], "test": [550, 700]}', "ok.json")
        self.assertEqual(pt.read_split(ok, 700), {"train": (0, 400), "val": (400, 550), "test": (550, 700)})
        nv = self.csv('{"train": [0, 400], "test": [550, 700]}', "nv.json")
        self.assertEqual(pt.read_split(nv, 700, need_val=False), {"train": (0, 400), "test": (550, 700)})
        self.split_bad('{"train": [0, 400], "test": [550, 700]}', '"val" is missing')
        self.split_bad('{"train": [0, 400], "valid": [400, 550], "test": [550, 700]}', '"val" is missing')
        for v, frag in [('{"start": 0, "end": 400}', "must be [first row, end row]"),
                        ("[true, 400]", "must be [first row, end row]"), ("[0.5, 400]", "must be [first row"),
                        ("[0, 400, 500]", "must be [first row"), ('["0", 400]', "must be [first row"),
                        ("[-1, 400]", "is not a row range"), ("[400, 400]", "is not a row range"),
                        ("[0, 701]", "is not a row range inside the series' 700 data rows")]:
            with self.subTest(v):
                self.split_bad('{"train": %s, "val": [400, 550], "test": [550, 700]}' % v, '"train"', frag)
        self.split_bad('{"train": [0, 400], "val": [400, 550], "test": [550, 700]} x', "not valid JSON")
        self.split_bad('{"train": [0, NaN], "val": [400, 550], "test": [550, 700]}', "not valid JSON")
        self.split_bad('{"train": [0, 400], "train": [0, 300], "val": [400, 550], "test": [550, 700]}', "twice")
        self.split_bad("[[0, 400]]", "JSON object")
        self.split_bad("[" * 100000, "not valid JSON")
        self.split_bad("", "is empty")


class TestGarbage(CLICase):
    """Kind 4 through the CLI: bad values, short splits, option ranges, non-finite training."""

    def test_values_and_windows(self):
        p = write(self.path("inf.csv"), "a,b,c\n" + "1,2,3\n" * 5 + "1,inf,3\n")
        self.fails(self.ev(series=p), 1, p, "line 7, column 'b'", "not a finite number")
        os.unlink(p)
        short = write(self.path("short.json"), '{"train": [0, 400], "val": [400, 550], "test": [550, 600]}')
        self.fails(self.ev(split=short), 1, "the test rows [550, 600) (50 rows) hold no window of lookback 96 + "
                                            "horizon 24 = 120 rows")
        os.unlink(short)
        small = write(self.path("small.csv"), series_text(rows=200))
        self.fails(["eval", "--model", self.model, "--series", small], 1, "default 70/10/20 split",
                   "hold no window")
        self.fails(tiny_train(small, self.split, self.path("t.h5")), 1, '"train" = [0, 400] is not a row range')
        os.unlink(small)

    def test_option_ranges(self):
        train = tiny_train(self.csv, self.split, self.path("t.h5"))
        for extra in (["--prune", "1"], ["--prune", "-0.1"], ["--prune", "0.5", "--stages", "0"],
                      ["--dropout", "1"], ["--epochs", "0"], ["--stage-epochs", "0"], ["--max-samples", "-1"],
                      ["--stride", "0"], ["--eval-stride", "0"], ["--lr", "0"], ["--lr", "nan"], ["--lr", "1_0"],
                      ["--batch-size", "1.5"], ["--seed", "-1"], ["--clip", "inf"], ["--n-heads", "3"]):
            with self.subTest(extra):
                self.fails(train + extra, 2, "patchtst: error: train: ")
        for extra in (["--loss", "1.5"], ["--loss", "-0.1"], ["--loss-seed", "-1"], ["--stride", "0"],
                      ["--window", "-1"], ["--window", "99"], ["--threads", "2000"]):
            with self.subTest(extra):
                self.fails(self.ev(*extra), 2, "patchtst: error: eval: ")
        out = self.path("x.h5")
        for extra in (["--n-channels", "0"], ["--n-channels", "65537"], ["--seed", "-1"], ["--prune", "1"],
                      ["--devices", "5"]):
            with self.subTest(extra):
                self.fails(["synth", "--out", out] + extra, 2, "patchtst: error: synth: ")
        self.succeeds(["synth", "--out", out, "--n-channels", "65536", "--seed", str(2 ** 64 - 1)])
        os.unlink(out)
        self.succeeds(self.ev("--loss", "1", "--loss-seed", "0"))

    def test_train_writes_on_success_only(self):
        out, js = self.path("t.h5"), self.path("t.json")
        self.succeeds(tiny_train(self.csv, self.split, out, "--json", js, "--devices", "2"))
        m, _ = pt.load_model(out)
        self.assertEqual(m.cfg.name, "patchtst-s")
        with open(js) as fh:
            self.assertTrue(math.isfinite(json.load(fh)["mse"]["test"]))
        os.unlink(out)
        os.unlink(js)


if __name__ == "__main__":
    unittest.main()
