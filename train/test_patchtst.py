"""Tests of train/patchtst.py: python3 -m unittest (from train/ or with train on the path)."""

import math
import os
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


if __name__ == "__main__":
    unittest.main()
