#!/usr/bin/python3
"""PatchTST for meshinfer: training, evaluation and synthetic models.

The model, its somegather semantics on D devices, the model file and the
message-loss rule are defined in docs/patchtst.md; this file follows it to the
letter, so that `meshinfer forecast` (C) and this script give the same
forecasts.

Subcommands (each has --help):
  train   train on a CSV series (message dropout, staged pruning), write MODEL.h5
  eval    load MODEL.h5 (the engine's file) and forecast the test split
  synth   a model with seeded random weights (synthetic=1) for engine tests
  series  a synthetic multivariate CSV and its split file, for development

Data conventions (also in the --help texts); the same rules as the engine's
(src/model/series.c mi_series_read, src/cli/cmd_forecast.c read_split):
  * CSV: a header row of column names; a FIRST column named time, date or
    timestamp (any case) is left out; every other column is one channel, and
    every value of it must be a number (as C's strtod reads a whole field:
    no empty fields, NA, nan, inf, 1_0; at most |v| = 3.4e38, float32's
    range). Fields are split at every comma; spaces, tabs and double quotes
    around a field are ignored. Every row has the header's number of fields;
    blank lines only at the end of the file; at most 4096 columns, lines of
    at most 1 MiB, files of at most 1 GiB. Errors name the file, the line
    (the header is line 1) and the column.
  * Split file (JSON, at most 1 MiB): an object with "train", "val" and
    "test" (eval: "val" optional), each [first, end): two non-negative
    integers, first < end <= the series' data rows (header excluded); other
    keys are ignored. Without --split: the first 70% train, the next 10%
    val, the last 20% test. Each range must hold at least one window.
  * Windows: lookback + horizon consecutive rows lying wholly inside one
    split's range, chronological, start rows a, a + stride, ...; every column
    of a window is a separate sample (channel independence).
  * MSE: of the forecasts (the model's output, in the series' units) against
    the truth, both standardised by the TRAIN split's per-column mean and
    population standard deviation; averaged over samples, horizon steps and
    channels. Training minimises the same quantity.

Inputs must be regular files (no directories, FIFOs or devices). Outputs are
checked before any work (not an input, not a directory, in an existing
folder), written under a temporary name in their folder and moved into place
only when everything succeeded. Errors: one line `patchtst: error: ...` on
stderr, exit status 2 for a bad option, 1 otherwise.
"""

import argparse
import array
import csv
import fractions
import json
import math
import os
import re
import stat
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as TF

XCH_NAMES = ("attn_in", "heads", "ffn_in", "hidden", "final")
ATTN_IN, HEADS, FFN_IN, HIDDEN, FINAL = range(5)
LOSS_MODES = ("link", "receiver", "sender")
PRUNE_MODES = ("aware", "magnitude")
FORMAT_VERSION = 3
REVIN_EPS = 1e-5
M64 = (1 << 64) - 1


# ----------------------------------------------------------------------------- errors, input and output files

class Error(Exception):
    """A bad input or a failure: main prints `patchtst: error: <message>` and exits with code (1)."""
    code = 1


class UsageError(Error):
    """A bad option or option value (exit 2)."""
    code = 2


MAX_INPUT_BYTES = 1 << 30  # series files
MAX_LINE_BYTES = 1 << 20   # a series line
MAX_SPLIT_BYTES = 1 << 20  # split files
MAX_COLS = 4096            # series columns (as the engine's MAX_COLS)
FLOAT32_MAX = float(np.finfo(np.float32).max)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _size(n):
    if n >= 1 << 30 and not n % (1 << 30):
        return f"{n >> 30} GiB"
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


def check_input(path, what):
    """os.stat of path, which must name a readable regular file (not a directory, FIFO or device)."""
    if path is None or path == "":
        raise UsageError(f"the {what} path is empty")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise Error(f"{path}: cannot open the {what}: no such file") from None
    except OSError as e:
        raise Error(f"{path}: cannot open the {what}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise Error(f"{path}: the {what} is a directory, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise Error(f"{path}: the {what} is not a regular file (a FIFO, socket or device)")
    return st


def open_input(path, what, max_bytes):
    """A binary file object of the regular file path, at most max_bytes long (never blocks on a FIFO)."""
    st = check_input(path, what)
    if st.st_size > max_bytes:
        raise Error(f"{path}: the {what} is larger than {_size(max_bytes)} ({st.st_size} bytes)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Error(f"{path}: cannot open the {what}: {e.strerror}") from None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat
        fh.close()
        raise Error(f"{path}: the {what} is not a regular file (a FIFO, socket or device)")
    return fh


def _is_hdf5(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == HDF5_SIGNATURE
    except OSError:
        return False


class Outputs:
    """The files one command writes. check() refuses a destination before any work is done (empty, a
    directory or device, a dangling symbolic link, an input of the command, another output, an HDF5 file
    when the output is not a model, a folder that does not exist or cannot be written); temp() names a
    temporary file in the destination's folder to write instead; commit() moves every temporary file into
    place once all are written. Leaving the with block without commit() removes them: a failure leaves
    nothing behind and never damages an existing file."""

    def __init__(self, inputs):
        self.inputs = [p for p in inputs if p]
        self.dest = []    # (path, real path, what)
        self.temps = []   # (temporary path, real path)
        self.umask = os.umask(0)
        os.umask(self.umask)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for tmp, _ in self.temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self.temps = []
        return False

    def check(self, path, what, model=False):
        if path is None or path == "":
            raise UsageError(f"the {what} path is empty")
        if path.endswith(os.sep):
            raise Error(f"{path}: the {what} names a directory; give a file name")
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode) and not os.path.exists(path):
                raise Error(f"{path}: the {what} is a symbolic link to nothing; give a file name")
        except FileNotFoundError:
            pass
        except OSError as e:
            raise Error(f"{path}: cannot write the {what}: {e.strerror}") from None
        real = os.path.realpath(path)
        for top in ("/proc", "/sys", "/dev"):
            if real == top or real.startswith(top + "/"):
                raise Error(f"{path}: the {what} would be written into {real}, which holds no ordinary files")
        try:
            st = os.stat(real)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise Error(f"{path}: cannot write the {what}: {e.strerror}") from None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise Error(f"{path}: the {what} is a directory; give a file name")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise Error(f"{path}: the {what} exists and is not a regular file (a device or FIFO); refusing to "
                        f"replace it")

        def same(p):
            if st is not None and os.path.exists(p):
                return os.path.samefile(real, p)
            return os.path.realpath(p) == real

        for inp in self.inputs:
            if same(inp):
                raise Error(f"{path}: the {what} is the same file as the input {inp}; refusing to overwrite it")
        for p, _, w in self.dest:
            if same(p):
                raise Error(f"{path}: the {what} is the same file as the {w} {p}; give two names")
        if st is not None and not model and _is_hdf5(real):
            raise Error(f"{path} is an HDF5 file (a model?); refusing to replace it with the {what}")
        folder = os.path.dirname(real)
        if not os.path.isdir(folder):
            raise Error(f"{path}: cannot write the {what}: directory {folder} does not exist")
        try:  # try it: access() says yes to root on a read-only mount
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".patchtst-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise Error(f"{path}: cannot write the {what}: cannot create files in {folder} ({e.strerror})") from None
        self.dest.append((path, real, what))
        return real

    def temp(self, path):
        """A new temporary file in path's folder (path: as given to check) to write path's contents to."""
        real = next(r for p, r, _ in self.dest if p == path)
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real), prefix="." + os.path.basename(real) + ".",
                                       suffix=".partial")
            os.close(fd)
            self.temps.append((tmp, real))
            try:
                mode = stat.S_IMODE(os.stat(real).st_mode)  # an existing file keeps its permissions
            except OSError:
                mode = 0o666 & ~self.umask
            os.chmod(tmp, mode)
        except OSError as e:
            raise Error(f"{path}: cannot write a temporary file next to it ({e.strerror})") from None
        return tmp

    def commit(self):
        """Move every temporary file into place."""
        while self.temps:
            tmp, real = self.temps[0]
            try:
                os.replace(tmp, real)
            except OSError as e:
                raise Error(f"{real}: cannot move {tmp} into place ({e.strerror})") from None
            self.temps.pop(0)


# strtod's whole-field forms (C locale) of a finite number: decimal and hexadecimal
_DEC = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(rb"([+-]?)0[xX](?:([0-9a-fA-F]+)\.?([0-9a-fA-F]*)|\.([0-9a-fA-F]+))(?:[pP]([+-]?[0-9]+))?")
_C_SPACE = b" \t\n\v\f\r"
_MIN_NORMAL = sys.float_info.min
_TINY = fractions.Fraction(2) ** -1022 - fractions.Fraction(2) ** -1076


def strtod(field):
    """The value C's strtod gives for the whole of field (bytes), or None where the engine refuses it: not a
    number in full, not finite, or out of range (strtod's ERANGE: overflow, or an inexact result below the
    smallest normal double)."""
    t = field.lstrip(_C_SPACE)
    m = _HEX.fullmatch(t)
    if m:
        try:
            v = float.fromhex(t.decode())
        except OverflowError:
            return None
        ip, fp = (m.group(2) or b""), (m.group(3) or m.group(4) or b"")
        nonzero = (ip + fp).strip(b"0") != b""

        def exact():
            e = int(m.group(5) or b"0") - 4 * len(fp)
            x = fractions.Fraction(int(ip + fp, 16)) * fractions.Fraction(2) ** e
            return -x if m.group(1) == b"-" else x
    elif _DEC.fullmatch(t):
        v = float(t)
        nonzero = re.split(rb"[eE]", t)[0].strip(b"+-0.") != b""

        def exact():
            return fractions.Fraction(t.decode())
    else:
        return None
    if not math.isfinite(v):
        return None
    if nonzero and abs(v) <= _MIN_NORMAL:  # tiny (below the smallest normal after rounding to 53 bits) and inexact
        if v == 0:
            return None
        x = abs(exact())
        if x < _TINY and x != fractions.Fraction(abs(v)):
            return None
    return v


# ----------------------------------------------------------------------------- shape

class Config:
    """The model's shape: the file's root attributes (docs/patchtst.md, Shape)."""

    def __init__(self, dim=128, hidden_dim=256, n_layers=6, n_heads=16, head_dim=8, norm_eps=1e-5,
                 patch_len=16, patch_stride=8, lookback=96, horizon=24, n_channels=1, synthetic=0,
                 name="patchtst"):
        self.dim, self.hidden_dim, self.n_layers = int(dim), int(hidden_dim), int(n_layers)
        self.n_heads, self.head_dim = int(n_heads), int(head_dim)
        self.norm_eps = float(np.float32(norm_eps))  # as the engine reads it (a float32 attribute)
        self.patch_len, self.patch_stride = int(patch_len), int(patch_stride)
        self.lookback, self.horizon = int(lookback), int(horizon)
        self.n_channels, self.synthetic, self.name = int(n_channels), int(synthetic), str(name)
        if self.n_heads * self.head_dim != self.dim:
            raise ValueError("n_heads * head_dim must equal dim")
        if self.lookback < self.patch_len or (self.lookback - self.patch_len) % self.patch_stride:
            raise ValueError("(lookback - patch_len) must be a non-negative multiple of patch_stride")

    @property
    def n_patches(self):
        return (self.lookback - self.patch_len) // self.patch_stride + 1

    def widths(self):
        """Column count of each exchange: attn_in, heads, ffn_in, hidden, final."""
        return (self.dim, self.dim, self.dim, self.hidden_dim, self.dim)

    def as_dict(self):
        return {k: getattr(self, k) for k in ("dim", "hidden_dim", "n_layers", "n_heads", "head_dim", "norm_eps",
                                              "patch_len", "patch_stride", "lookback", "horizon", "n_channels",
                                              "synthetic", "name")} | {"n_patches": self.n_patches}


# ----------------------------------------------------------------------------- message loss

def mix(z):
    """splitmix64's output function after its increment, exact 64-bit unsigned arithmetic."""
    z = (z + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def loss_u(seed, n, layer, what, s, r, mode):
    """The uniform number u of docs/patchtst.md's message-loss rule (layer -1: final)."""
    h = mix((seed & M64) ^ 0x5eed)
    h = mix(h ^ (n & M64))
    h = mix(h ^ ((((layer + 1) << 8) | what) & M64))
    if mode in ("link", "sender"):
        h = mix(h ^ (((s << 1) | 1) & M64))
    if mode in ("link", "receiver"):
        h = mix(h ^ ((r << 1) & M64))
    return (h >> 11) * 2.0 ** -53


def message_lost(p, seed, n, layer, what, s, r, mode):
    """Is the message of sender s to receiver r at patch position n lost?"""
    if p <= 0 or s == r:
        return False
    return loss_u(seed, n, layer, what, s, r, mode) < p


class HashLoss:
    """The engine's deterministic message loss: lost(l, w) -> bool [1, N, D(sender), D(receiver)]."""

    def __init__(self, p, seed, mode, D, n_patches):
        if mode not in LOSS_MODES:
            raise ValueError(f"unknown loss mode {mode!r}")
        self.p, self.seed, self.mode, self.D, self.N = float(p), int(seed), mode, D, n_patches
        self.cache = {}

    def __call__(self, layer, what):
        key = (layer, what)
        if key not in self.cache:
            m = torch.zeros(1, self.N, self.D, self.D, dtype=torch.bool)
            for n in range(self.N):
                for s in range(self.D):
                    for r in range(self.D):
                        m[0, n, s, r] = message_lost(self.p, self.seed, n, layer, what, s, r, self.mode)
            self.cache[key] = m
        return self.cache[key]


class DropoutLoss:
    """Message dropout for training: fresh random masks on every call (every exchange of every step),
    per sample and per patch row (unit "row") or per sample for all rows of the window ("window")."""

    def __init__(self, p, mode, D, batch, n_patches, unit="row", generator=None):
        if mode not in LOSS_MODES:
            raise ValueError(f"unknown loss mode {mode!r}")
        self.p, self.mode, self.D, self.B, self.unit, self.g = float(p), mode, D, batch, unit, generator
        self.N = n_patches if unit == "row" else 1

    def __call__(self, layer, what):
        B, N, D = self.B, self.N, self.D
        if self.mode == "link":
            shape = (B, N, D, D)
        elif self.mode == "receiver":
            shape = (B, N, 1, D)
        else:
            shape = (B, N, D, 1)
        return (torch.rand(shape, generator=self.g) < self.p).expand(B, N, D, D)


# ----------------------------------------------------------------------------- somegather

def contiguous_owner(width, D):
    """Owner device of each of width columns split in D contiguous equal slices."""
    return torch.arange(width) // (width // D)


def horizon_owner(horizon, D):
    """Device computing each forecast row: rows [horizon*r/D, horizon*(r+1)/D) on device r (the engine's
    classifier split of the language model's somegather plan)."""
    own = torch.zeros(horizon, dtype=torch.long)
    for r in range(D):
        own[horizon * r // D: horizon * (r + 1) // D] = r
    return own


class Somegather:
    """D devices, the pruning masks (keep[w]: bool [n_layers, width], w = 0..3, True = the owner sends
    the column) and the pruning mode. Builds the per-receiver "held" masks of docs/patchtst.md."""

    def __init__(self, cfg, D, keep=None, mode="aware"):
        if D < 1 or cfg.n_heads % D or cfg.dim % D or cfg.hidden_dim % D:
            raise ValueError(f"{D} devices do not divide n_heads {cfg.n_heads}, dim {cfg.dim} and "
                             f"hidden_dim {cfg.hidden_dim} equally")
        if mode not in PRUNE_MODES:
            raise ValueError(f"unknown pruning mode {mode!r}")
        self.cfg, self.D, self.mode = cfg, D, mode
        widths = cfg.widths()
        self.keep = {}
        for w in range(4):
            k = None if keep is None else keep.get(w)
            self.keep[w] = (torch.ones(cfg.n_layers, widths[w], dtype=torch.bool) if k is None
                            else torch.as_tensor(k).to(torch.bool).clone())
            if tuple(self.keep[w].shape) != (cfg.n_layers, widths[w]):
                raise ValueError(f"keep_{XCH_NAMES[w]} has shape {tuple(self.keep[w].shape)}, "
                                 f"expected {(cfg.n_layers, widths[w])}")
        self.owner = [contiguous_owner(widths[w], D) for w in range(5)]
        self.head_owner = horizon_owner(cfg.horizon, D)
        self._parts = {}

    def pruned(self):
        return any(not bool(k.all()) for k in self.keep.values())

    def parts(self, layer, what, dtype):
        """own, other: [D, width] float; own[d, c] = d owns c and uses it; other[d, c] = another device owns c
        and sends it. Disjoint."""
        key = (layer, what, dtype)
        if key not in self._parts:
            own_c = self.owner[what]
            d = torch.arange(self.D)[:, None]
            mine = own_c[None, :] == d
            kept = (torch.ones(own_c.shape[0], dtype=torch.bool) if what == FINAL
                    else self.keep[what][layer])[None, :]
            own = mine & (kept if self.mode == "magnitude" else torch.ones_like(kept))
            other = ~mine & kept
            self._parts[key] = (own.to(dtype), other.to(dtype))
        return self._parts[key]

    def held(self, layer, what, lost, dtype, fast=True):
        """Held mask [D, B|1, N|1, width] (receiver first) of the exchange (layer, what) (layer -1 with
        what FINAL), given lost: bool [B|1, N|1, D(sender), D(receiver)] or None. With fast, None when
        every device holds every column (the plain model's computation applies)."""
        own, other = self.parts(layer, what, dtype)
        if lost is None:
            h = own + other
            if fast and bool((h == 1).all()):
                return None
            return h[:, None, None, :]
        D, width = self.D, own.shape[1]
        ok = (~lost).permute(3, 0, 1, 2).to(dtype)  # [receiver, B, N, sender]
        Dr, B, N, _ = ok.shape
        ok = ok[..., None].expand(Dr, B, N, D, width // D).reshape(Dr, B, N, width)  # sender = owner of the column
        return own[:, None, None, :] + other[:, None, None, :] * ok


def local_layernorm(X, held, g, b, eps):
    """Device-local LayerNorm (docs/patchtst.md): X [B, N, F], held [D, B|1, N|1, F] -> [D, B, N, F]; over
    the held columns only, 0 where not held. held None: the plain LayerNorm, [B, N, F]."""
    if held is None:
        return TF.layer_norm(X, (X.shape[-1],), g, b, eps)
    Xe = X.unsqueeze(0)
    n = held.sum(-1, keepdim=True).clamp_min(1)
    mu = (Xe * held).sum(-1, keepdim=True) / n
    dev = (Xe - mu) * held
    var = (dev * dev).sum(-1, keepdim=True) / n
    return dev * (torch.rsqrt(var + eps) * g) + held * b


def from_devices(Y):
    """[D, B, N, k] (device d's k output features) -> [B, N, D * k] (the global feature order)."""
    D, B, N, k = Y.shape
    return Y.permute(1, 2, 0, 3).reshape(B, N, D * k)


def own_rows(Xv, Ws, biases, D):
    """Rows (output features) of each W in Ws computed by their owners (contiguous slices), each device from
    its own view. Xv: [D, B, N, Fin] (device views) or [B, N, Fin] (one view for all). Returns one
    [B, N, Fout] per W (rows in the global order)."""
    if Xv.dim() == 3:
        return [Xv @ W.t() + bias for W, bias in zip(Ws, biases)]
    _, B, N, Fin = Xv.shape
    ks = [W.shape[0] // D for W in Ws]
    Wd = torch.cat([W.reshape(D, k, Fin) for W, k in zip(Ws, ks)], dim=1)  # [D, sum k, Fin]
    Y = torch.bmm(Xv.reshape(D, B * N, Fin), Wd.transpose(1, 2)).reshape(D, B, N, sum(ks))
    out, o = [], 0
    for k, bias in zip(ks, biases):
        out.append(from_devices(Y[..., o:o + k]) + bias)
        o += k
    return out


# ----------------------------------------------------------------------------- model

LAYER_TENSORS = ("attention_norm", "attention_norm_b", "wq", "wq_b", "wk", "wk_b", "wv", "wv_b", "wo", "wo_b",
                 "ffn_norm", "ffn_norm_b", "w1", "w1_b", "w2", "w2_b")


class Layer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        F, Hd = cfg.dim, cfg.hidden_dim
        shapes = {"attention_norm": (F,), "attention_norm_b": (F,), "wq": (F, F), "wq_b": (F,), "wk": (F, F),
                  "wk_b": (F,), "wv": (F, F), "wv_b": (F,), "wo": (F, F), "wo_b": (F,), "ffn_norm": (F,),
                  "ffn_norm_b": (F,), "w1": (Hd, F), "w1_b": (Hd,), "w2": (F, Hd), "w2_b": (F,)}
        for k in LAYER_TENSORS:
            setattr(self, k, torch.nn.Parameter(torch.zeros(shapes[k])))


class PatchTST(torch.nn.Module):
    """The forward pass of docs/patchtst.md, on one device or on D (a Somegather)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        F, P, N = cfg.dim, cfg.patch_len, cfg.n_patches
        self.patch_embed = torch.nn.Parameter(torch.zeros(F, P))
        self.patch_embed_b = torch.nn.Parameter(torch.zeros(F))
        self.pos_embed = torch.nn.Parameter(torch.zeros(N, F))
        self.layers = torch.nn.ModuleList([Layer(cfg) for _ in range(cfg.n_layers)])
        self.head = torch.nn.Parameter(torch.zeros(cfg.horizon, N * F))
        self.head_b = torch.nn.Parameter(torch.zeros(cfg.horizon))

    def init_weights(self, generator=None, synthetic=False):
        """Linear layers as torch.nn.Linear (uniform +-1/sqrt(fan_in)), norms 1 and 0, pos_embed
        uniform +-0.02 (PatchTST). synthetic: norm gains and biases random too, to exercise every term."""
        g = generator

        def uni(t, a):
            with torch.no_grad():
                t.copy_(torch.rand(t.shape, generator=g) * 2 * a - a)

        cfg = self.cfg
        uni(self.patch_embed, 1 / math.sqrt(cfg.patch_len))
        uni(self.patch_embed_b, 1 / math.sqrt(cfg.patch_len))
        uni(self.pos_embed, 0.02 if not synthetic else 0.5)
        for L in self.layers:
            for k in ("wq", "wk", "wv", "wo", "w1", "w2"):
                W = getattr(L, k)
                uni(W, 1 / math.sqrt(W.shape[1]))
                uni(getattr(L, k + "_b"), 1 / math.sqrt(W.shape[1]))
            for k in ("attention_norm", "ffn_norm"):
                with torch.no_grad():
                    if synthetic:
                        getattr(L, k).copy_(0.5 + torch.rand(cfg.dim, generator=g))
                        uni(getattr(L, k + "_b"), 0.2)
                    else:
                        getattr(L, k).fill_(1.0)
                        getattr(L, k + "_b").zero_()
        uni(self.head, 1 / math.sqrt(self.head.shape[1]))
        uni(self.head_b, 1 / math.sqrt(self.head.shape[1]))
        return self

    def forward(self, x, sg=None, lost=None, fast=True):
        """x: [B, lookback] raw values of one channel each -> forecasts [B, horizon] in the same units.
        sg: a Somegather (None: one device, nothing pruned); lost: callable (layer, what) -> bool
        [B|1, N|1, D, D] (sender, receiver) or None. fast: skip the device views when every device
        holds every column (identical results; tests pass fast=False to exercise the D-device path)."""
        cfg = self.cfg
        dt = x.dtype
        D = 1 if sg is None else sg.D
        B = x.shape[0]
        F, H, hd, N = cfg.dim, cfg.n_heads, cfg.head_dim, cfg.n_patches

        def held(layer, what):
            if sg is None:
                return None
            return sg.held(layer, what, None if lost is None else lost(layer, what), dt, fast)

        # 1. instance normalisation (RevIN without affine), population variance
        mu = x.mean(dim=1, keepdim=True)
        sigma = torch.sqrt(((x - mu) ** 2).mean(dim=1, keepdim=True) + REVIN_EPS)
        xn = (x - mu) / sigma
        # 2-3. patches and embedding
        patches = xn.unfold(1, cfg.patch_len, cfg.patch_stride)  # [B, N, P]
        X = patches @ self.patch_embed.t() + self.patch_embed_b + self.pos_embed
        scale = 1.0 / math.sqrt(hd)
        for l, L in enumerate(self.layers):
            # attn_in: device-local norm, each device its own heads' Q, K, V
            Xb = local_layernorm(X, held(l, ATTN_IN), L.attention_norm, L.attention_norm_b, cfg.norm_eps)
            Q, K, V = (t.reshape(B, N, H, hd).transpose(1, 2)
                       for t in own_rows(Xb, (L.wq, L.wk, L.wv), (L.wq_b, L.wk_b, L.wv_b), D))
            att = torch.softmax((Q @ K.transpose(-1, -2)) * scale, dim=-1)
            heads = (att @ V).transpose(1, 2).reshape(B, N, F)
            # heads: device d adds its residual columns from the head outputs it holds
            h = held(l, HEADS)
            X = X + own_rows(heads if h is None else heads * h, (L.wo,), (L.wo_b,), D)[0]
            # ffn_in: device-local norm, each device its own hidden units
            Xb = local_layernorm(X, held(l, FFN_IN), L.ffn_norm, L.ffn_norm_b, cfg.norm_eps)
            hid = TF.gelu(own_rows(Xb, (L.w1,), (L.w1_b,), D)[0])
            h = held(l, HIDDEN)
            X = X + own_rows(hid if h is None else hid * h, (L.w2,), (L.w2_b,), D)[0]
        # final exchange (never pruned), then the head: forecast row j on device head_owner[j]
        h = held(-1, FINAL)
        if h is None:
            y = X.reshape(B, N * F) @ self.head.t() + self.head_b
        else:
            yd = (X * h).reshape(D, B, N * F) @ self.head.t() + self.head_b  # [D, B, horizon]
            y = yd[sg.head_owner, :, torch.arange(cfg.horizon)].t()
        return y * sigma + mu


def n_parameters(model):
    return int(sum(p.numel() for p in model.parameters()))


# ----------------------------------------------------------------------------- pruning

def pruning_scores(model, D, what, mode):
    """Scores [n_layers, width] of exchange what's columns (docs/patchtst.md; src/planner/prune.c): the sum of
    |outgoing weights| the column feeds on the other devices (aware) or on all devices (magnitude), times
    |norm gain| for attn_in and ffn_in."""
    cfg = model.cfg
    out = []
    with torch.no_grad():
        for L in model.layers:
            if what == ATTN_IN:
                mats, g = (L.wq, L.wk, L.wv), L.attention_norm
            elif what == HEADS:
                mats, g = (L.wo,), None
            elif what == FFN_IN:
                mats, g = (L.w1,), L.ffn_norm
            else:
                mats, g = (L.w2,), None
            width = mats[0].shape[1]
            S = torch.zeros(D, width, dtype=torch.float64)
            for W in mats:  # rows grouped by their owner (contiguous slices)
                S += W.detach().double().abs().reshape(D, W.shape[0] // D, width).sum(1)
            if mode == "magnitude":
                s = S.sum(0)
            else:
                col_owner = contiguous_owner(width, D)
                s = S.sum(0) - S[col_owner, torch.arange(width)]
            if g is not None:
                s = s * g.detach().double().abs()
            out.append(s)
    return torch.stack(out)


def choose_keep(scores, D, ratio, prev_keep=None):
    """Keep mask [n_layers, width]: each sender drops ceil(ratio * own) of its own columns (as
    src/planner/prune.c), those already dropped first (stages are nested), then the lowest scores, ties
    the lower column first."""
    n_layers, width = scores.shape
    keep = torch.ones(n_layers, width, dtype=torch.bool)
    n = width // D
    drop = int(math.ceil(ratio * n - 1e-9))
    for l in range(n_layers):
        for r in range(D):
            cols = list(range(r * n, (r + 1) * n))
            prev = (lambda c: 0) if prev_keep is None else (lambda c: 0 if not bool(prev_keep[l, c]) else 1)
            cols.sort(key=lambda c: (prev(c), float(scores[l, c]), c))
            for c in cols[:drop]:
                keep[l, c] = False
    return keep


def prune_masks(model, D, ratio, mode, prev=None):
    return {w: choose_keep(pruning_scores(model, D, w, mode), D, ratio, None if prev is None else prev[w])
            for w in range(4)}


# ----------------------------------------------------------------------------- model file

def _str_attr(loc, name, value):
    """A fixed-length, NUL-terminated string attribute, as the engine writes and reads them."""
    import h5py
    b = value.encode()
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(b) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    sid = h5py.h5s.create(h5py.h5s.SCALAR)
    if name in loc.attrs:
        del loc.attrs[name]
    aid = h5py.h5a.create(loc.id, name.encode(), tid, sid)
    aid.write(np.array(b, dtype=f"S{len(b) + 1}"), mtype=tid)
    aid.close()


def save_model(path, model, sg=None, prune=0.0):
    """Write model (and sg's masks when pruned) in the layout of docs/patchtst.md, format_version 3."""
    import h5py
    cfg = model.cfg

    def t(x):
        return np.ascontiguousarray(x.detach().cpu().to(torch.float32).numpy())

    with h5py.File(path, "w") as f:
        for k, v in (("format_version", FORMAT_VERSION), ("dim", cfg.dim), ("hidden_dim", cfg.hidden_dim),
                     ("n_layers", cfg.n_layers), ("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_heads),
                     ("head_dim", cfg.head_dim), ("patch_len", cfg.patch_len),
                     ("patch_stride", cfg.patch_stride), ("lookback", cfg.lookback), ("horizon", cfg.horizon),
                     ("n_channels", cfg.n_channels), ("synthetic", cfg.synthetic)):
            f.attrs.create(k, np.int32(v), dtype=np.int32)
        f.attrs.create("norm_eps", np.float32(cfg.norm_eps), dtype=np.float32)
        _str_attr(f, "family", "patchtst")
        _str_attr(f, "name", cfg.name)
        f.create_dataset("patch_embed", data=t(model.patch_embed))
        f.create_dataset("patch_embed_b", data=t(model.patch_embed_b))
        f.create_dataset("pos_embed", data=t(model.pos_embed))
        lg = f.create_group("layers")
        for l, L in enumerate(model.layers):
            g = lg.create_group(f"{l:03d}")
            for k in LAYER_TENSORS:
                v = getattr(L, k)
                if k in ("wo", "w2"):
                    g.create_dataset(k + "_t", data=t(v.t()))
                else:
                    g.create_dataset(k, data=t(v))
        f.create_dataset("head", data=t(model.head))
        f.create_dataset("head_b", data=t(model.head_b))
        if sg is not None and sg.pruned():
            s = f.create_group("somegather")
            s.attrs.create("ranks", np.int32(sg.D), dtype=np.int32)
            s.attrs.create("prune", np.float32(prune), dtype=np.float32)
            _str_attr(s, "prune_mode", sg.mode)
            for w in range(4):
                s.create_dataset("keep_" + XCH_NAMES[w], data=sg.keep[w].numpy().astype(np.uint8))


# the engine's bounds on a patchtst model's attributes (src/model/config.c mi_config_validate)
MODEL_INT_ATTRS = (("dim", 1 << 16), ("hidden_dim", 1 << 18), ("n_layers", 1024), ("n_heads", 1024),
                   ("n_kv_heads", 128), ("head_dim", 4096), ("patch_len", 4096), ("patch_stride", 4096),
                   ("lookback", 1 << 20), ("horizon", 1 << 16), ("n_channels", 1 << 16))
MAX_PARAMETERS = 1 << 28  # 1 GiB of float32: a larger file is no model of this script's


def _attr(loc, name, path, where=""):
    """The single value of attribute name of loc (an error naming path when missing or not one value)."""
    if name not in loc.attrs:
        raise Error(f"{path}: attribute '{where}{name}' missing (not a patchtst model file, docs/patchtst.md)")
    try:
        v = loc.attrs[name]
    except (OSError, TypeError, ValueError, KeyError) as e:
        raise Error(f"{path}: cannot read attribute '{where}{name}' ({e})") from None
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise Error(f"{path}: attribute '{where}{name}' is not a single value (corrupt file)")
        v = v.reshape(())[()]
    return v


def _int_attr(loc, name, path, where=""):
    v = _attr(loc, name, path, where)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise Error(f"{path}: attribute '{where}{name}' is not an integer ({v!r})")
    return int(v)


def _float_attr(loc, name, path, where=""):
    v = _attr(loc, name, path, where)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise Error(f"{path}: attribute '{where}{name}' is not a number ({v!r})")
    return float(v)


def _string_attr(loc, name, path, where=""):
    v = _attr(loc, name, path, where)
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    raise Error(f"{path}: attribute '{where}{name}' is not a string ({v!r})")


def load_model(path, dtype=torch.float32):
    """(model, somegather info or None) from a model file; info: {"ranks", "prune", "prune_mode", "keep"}.
    Every attribute and tensor is checked (the engine's rules) before anything is allocated."""
    import h5py
    check_input(path, "model file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Error(f"{path}: cannot open the model file: not an HDF5 file, or truncated or corrupt "
                    f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    with f:
        version = _int_attr(f, "format_version", path)
        family = _string_attr(f, "family", path) if "family" in f.attrs else None
        if version != FORMAT_VERSION or family != "patchtst":
            raise Error(f"{path}: not a patchtst time-series model (format_version {version}, family "
                        f"{'missing' if family is None else repr(family)}; a language model?): this needs "
                        f"format_version {FORMAT_VERSION} with family \"patchtst\" (docs/patchtst.md)")
        a = {}
        for k, hi in MODEL_INT_ATTRS:
            a[k] = _int_attr(f, k, path)
            if not 1 <= a[k] <= hi:
                raise Error(f"{path}: attribute {k} = {a[k]} is outside [1, {hi}]")
        if a["n_kv_heads"] != a["n_heads"]:
            raise Error(f"{path}: n_kv_heads = {a['n_kv_heads']} must equal n_heads = {a['n_heads']}")
        del a["n_kv_heads"]
        a["synthetic"] = _int_attr(f, "synthetic", path)
        a["norm_eps"] = _float_attr(f, "norm_eps", path)
        if not 0 < a["norm_eps"] < 1:
            raise Error(f"{path}: norm_eps = {a['norm_eps']} must be in (0, 1)")
        a["name"] = _string_attr(f, "name", path) if "name" in f.attrs else "patchtst"
        try:
            cfg = Config(**a)
        except ValueError as e:
            raise Error(f"{path}: {e}") from None
        F, Hd, N, P = cfg.dim, cfg.hidden_dim, cfg.n_patches, cfg.patch_len
        layer_shapes = {"attention_norm": (F,), "attention_norm_b": (F,), "wq": (F, F), "wq_b": (F,),
                        "wk": (F, F), "wk_b": (F,), "wv": (F, F), "wv_b": (F,), "wo_t": (F, F), "wo_b": (F,),
                        "ffn_norm": (F,), "ffn_norm_b": (F,), "w1": (Hd, F), "w1_b": (Hd,), "w2_t": (Hd, F),
                        "w2_b": (F,)}
        shapes = {"patch_embed": (F, P), "patch_embed_b": (F,), "pos_embed": (N, F), "head": (cfg.horizon, N * F),
                  "head_b": (cfg.horizon,)}
        for l in range(cfg.n_layers):
            shapes.update({f"layers/{l:03d}/{k}": s for k, s in layer_shapes.items()})
        total = sum(math.prod(s) for s in shapes.values())
        if total > MAX_PARAMETERS:
            raise Error(f"{path}: the attributes make a model of {total} parameters, more than this script loads "
                        f"({MAX_PARAMETERS})")
        for name, shape in shapes.items():
            try:
                d = f.get(name)
            except (OSError, KeyError, ValueError, TypeError) as e:
                raise Error(f"{path}: cannot read tensor '{name}' ({e})") from None
            if not isinstance(d, h5py.Dataset):
                raise Error(f"{path}: tensor '{name}' missing")
            if tuple(d.shape) != shape:
                raise Error(f"{path}: '{name}' has shape {tuple(d.shape)}, expected {shape}")
            if d.dtype != np.float32:
                raise Error(f"{path}: tensor '{name}' is not float32 ({d.dtype})")
        model = PatchTST(cfg)

        def put(param, name, transpose=False):
            try:
                arr = np.asarray(f[name], dtype=np.float32)
            except (OSError, KeyError, ValueError, TypeError) as e:
                raise Error(f"{path}: cannot read tensor '{name}' (truncated or corrupt file: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
            if not np.isfinite(arr).all():
                raise Error(f"{path}: tensor '{name}' holds non-finite values (NaN or infinity)")
            v = torch.from_numpy(arr)
            if transpose:
                v = v.t()
            with torch.no_grad():
                param.copy_(v)

        put(model.patch_embed, "patch_embed")
        put(model.patch_embed_b, "patch_embed_b")
        put(model.pos_embed, "pos_embed")
        for l, L in enumerate(model.layers):
            for k in LAYER_TENSORS:
                if k in ("wo", "w2"):
                    put(getattr(L, k), f"layers/{l:03d}/{k}_t", transpose=True)
                else:
                    put(getattr(L, k), f"layers/{l:03d}/{k}")
        put(model.head, "head")
        put(model.head_b, "head_b")
        info = None
        if "somegather" in f:
            s = f["somegather"]
            if not isinstance(s, h5py.Group):
                raise Error(f"{path}: '/somegather' is not a group")
            info = {"ranks": _int_attr(s, "ranks", path, "somegather/"),
                    "prune": _float_attr(s, "prune", path, "somegather/"),
                    "prune_mode": _string_attr(s, "prune_mode", path, "somegather/"), "keep": {}}
            if not 1 <= info["ranks"] <= cfg.n_heads:
                raise Error(f"{path}: somegather/ranks = {info['ranks']} is outside [1, n_heads = {cfg.n_heads}]")
            if info["prune_mode"] not in PRUNE_MODES:
                raise Error(f"{path}: somegather/prune_mode is {info['prune_mode']!r}, not aware or magnitude")
            for w in range(4):
                name = "somegather/keep_" + XCH_NAMES[w]
                try:
                    d = f.get(name)
                except (OSError, KeyError, ValueError, TypeError) as e:
                    raise Error(f"{path}: cannot read mask '{name}' ({e})") from None
                want = (cfg.n_layers, cfg.widths()[w])
                if not isinstance(d, h5py.Dataset):
                    raise Error(f"{path}: mask '{name}' missing")
                if tuple(d.shape) != want or d.dtype.kind not in "biu":
                    raise Error(f"{path}: mask '{name}' has shape {tuple(d.shape)} and type {d.dtype}, expected "
                                f"{want} uint8")
                try:
                    info["keep"][w] = torch.from_numpy(np.asarray(d) != 0)
                except (OSError, ValueError, TypeError) as e:
                    raise Error(f"{path}: cannot read mask '{name}' (truncated or corrupt file: {e})") from None
    return model.to(dtype), info


# ----------------------------------------------------------------------------- data

def _trim(field):
    """The engine's trim(): spaces, tabs and double quotes off both ends."""
    return field.strip(b' \t"')


def _show(b, n=32):
    """A field as a quoted, escaped string (its first n bytes)."""
    return repr(b[:n].decode("utf-8", "backslashreplace") + ("..." if len(b) > n else ""))


def read_series(path):
    """(values float64 [T, C], column names) of a series CSV, by the engine's rules (src/model/series.c
    mi_series_read): a header row of names; a first column named time, date or timestamp (any case) is left
    out; every other column is a channel whose every value is a number as strtod reads a whole field (finite,
    within float32's range); every row has the header's field count; blank lines only at the end."""
    with open_input(path, "series file", MAX_INPUT_BYTES) as fh:
        total_bytes = 0
        header = None
        vals = array.array("d")
        rows, blank = 0, None
        lineno = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 2)
            if not line:
                break
            lineno += 1
            total_bytes += len(line)
            if lineno == 1 and line.startswith(HDF5_SIGNATURE[:4]):
                raise Error(f"{path}: an HDF5 file (a model?), not a CSV series")
            if total_bytes > MAX_INPUT_BYTES:
                raise Error(f"{path}: the series file is larger than {_size(MAX_INPUT_BYTES)}")
            content = line.rstrip(b"\r\n")
            if len(content) > MAX_LINE_BYTES:
                raise Error(f"{path}: line {lineno} is longer than {_size(MAX_LINE_BYTES)}")
            if b"\0" in content:
                raise Error(f"{path}: line {lineno} holds a NUL byte (not a text file?)")
            if header is None:
                if not line.strip(b" \t\r\n"):
                    raise Error(f"{path}: line 1: the header row is blank (it names the columns)")
                fields = content.split(b",")
                if len(fields) > MAX_COLS:
                    raise Error(f"{path}: line 1: more than {MAX_COLS} columns ({len(fields)})")
                total = len(fields)
                skip = int(total > 1 and _trim(fields[0]).lower() in (b"time", b"date", b"timestamp"))
                header = [_trim(f).decode("utf-8", "replace") for f in fields]
                names = header[skip:]
                continue
            if not line.strip(b" \t\r\n"):
                if blank is None:
                    blank = lineno
                continue
            if blank is not None:
                raise Error(f"{path}: line {blank} is blank but data rows follow (line {lineno}); blank lines "
                            f"may only end the file")
            fields = content.split(b",")
            if len(fields) != total:
                raise Error(f"{path}: line {lineno} has {len(fields)} fields, the header has {total}")
            for j in range(skip, total):
                t = _trim(fields[j])
                where = f"{path}: line {lineno}, column '{header[j]}'"
                if not t:
                    raise Error(f"{where}: missing value (an empty field; fill or drop missing values first)")
                v = strtod(t)
                if v is None:
                    raise Error(f"{where}: {_show(t)} is not a finite number (fill or drop missing values "
                                f"first)")
                if abs(v) > FLOAT32_MAX:
                    raise Error(f"{where}: {_show(t)} overflows float32 (|v| > 3.4e38)")
                vals.append(v)
            rows += 1
    if header is None:
        raise Error(f"{path}: empty series file (needs a header row of column names)")
    if rows == 0:
        raise Error(f"{path}: no data rows after the header")
    return np.frombuffer(vals, dtype=np.float64).reshape(rows, len(names)).copy(), names


def _json_key_once(pairs):
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise _DuplicateKey(k)
    return dict(pairs)


class _DuplicateKey(Exception):
    pass


def _json_constant(name):
    raise _NotJSON(f"{name} is not a JSON value")


class _NotJSON(Exception):
    pass


def read_split(path, T, need_val=True):
    """{"train": (a, b), "val": (a, b), "test": (a, b)} from a split file (or the 70/10/20 default): a JSON
    object with "train", "val" (not needed when need_val is False) and "test", each [first, end) of two
    non-negative integers with first < end <= T; other keys are ignored (the engine's read_split)."""
    if path is None:
        a, b = int(T * 0.7), int(T * 0.8)
        return {"train": (0, a), "val": (a, b), "test": (b, T)}
    with open_input(path, "split file", MAX_SPLIT_BYTES) as fh:
        raw = fh.read(MAX_SPLIT_BYTES + 1)
    if len(raw) > MAX_SPLIT_BYTES:
        raise Error(f"{path}: the split file is larger than {_size(MAX_SPLIT_BYTES)}")
    if not raw.strip():
        raise Error(f"{path}: the split file is empty (expects {{\"train\": [first, end], ...}})")
    try:
        js = json.loads(raw.decode("utf-8"), parse_constant=_json_constant, object_pairs_hook=_json_key_once)
    except UnicodeDecodeError as e:
        raise Error(f"{path}: not valid JSON (not UTF-8 text at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise Error(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except _NotJSON as e:
        raise Error(f"{path}: not valid JSON ({e})") from None
    except _DuplicateKey as e:
        raise Error(f"{path}: the key '{e}' appears twice") from None
    except RecursionError:
        raise Error(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise Error(f"{path}: not valid JSON ({e})") from None
    if not isinstance(js, dict):
        raise Error(f"{path}: the split file must hold a JSON object {{\"train\": [first, end], \"val\": [...], "
                    f"\"test\": [...]}}, not a {type(js).__name__}")
    out = {}
    for key in ("train", "val", "test"):
        if key not in js:
            if key == "val" and not need_val:
                continue
            raise Error(f"{path}: the key \"{key}\" is missing (a row range [first, end])")
        v = js[key]
        ok = isinstance(v, list) and len(v) == 2 and all(
            not isinstance(x, bool) and (isinstance(x, int) or (isinstance(x, float) and x.is_integer()))
            for x in v)
        if not ok:
            raise Error(f"{path}: \"{key}\" must be [first row, end row] (two non-negative integers), not "
                        f"{json.dumps(v)[:60]}")
        lo, hi = int(v[0]), int(v[1])
        if not 0 <= lo < hi <= T:
            raise Error(f"{path}: \"{key}\" = [{lo}, {hi}] is not a row range inside the series' {T} data rows "
                        f"(0 <= first < end <= {T})")
        out[key] = (lo, hi)
    return out


def window_starts(rng, cfg, stride=1):
    a, b = rng
    return np.arange(a, b - cfg.lookback - cfg.horizon + 1, max(1, stride), dtype=np.int64)


class Data:
    def __init__(self, series, split, cfg, need_val=True):
        self.values, self.names = read_series(series)
        T, C = self.values.shape
        self.split = read_split(split, T, need_val)
        self.source = split if split is not None else f"{series} (the default 70/10/20 split of its {T} rows)"
        tr = self.values[self.split["train"][0]:self.split["train"][1]]
        if len(tr) < 2:
            raise Error(f"{self.source}: the train split has fewer than 2 rows")
        self.mean = tr.mean(0)
        self.std = tr.std(0)
        self.std[self.std == 0] = 1.0
        self.cfg = cfg
        self.C = C

    def windows(self, key, stride):
        """window_starts of split key; an error when it holds none."""
        w = window_starts(self.split[key], self.cfg, stride)
        if len(w) == 0:
            a, b = self.split[key]
            need = self.cfg.lookback + self.cfg.horizon
            raise Error(f"{self.source}: the {key} rows [{a}, {b}) ({b - a} rows) hold no window of lookback "
                        f"{self.cfg.lookback} + horizon {self.cfg.horizon} = {need} rows")
        return w

    def batch(self, starts, chans, dtype=torch.float32):
        """(lookback x [B, L], truth [B, horizon], std [B]) for samples (start, channel)."""
        cfg = self.cfg
        idx = starts[:, None] + np.arange(cfg.lookback + cfg.horizon)[None, :]
        w = self.values[idx, chans[:, None]]
        return (torch.from_numpy(w[:, :cfg.lookback]).to(dtype), torch.from_numpy(w[:, cfg.lookback:]).to(dtype),
                torch.from_numpy(self.std[chans]).to(dtype))


def samples(starts, C):
    """All (start, channel) pairs, window-major."""
    return np.repeat(starts, C), np.tile(np.arange(C), len(starts))


def std_mse_sum(pred, truth, std):
    return float((((pred - truth) / std[:, None]) ** 2).sum())


def evaluate(model, data, starts, sg=None, lost=None, batch=1024, dtype=torch.float32, collect=False):
    """Standardised MSE over every channel of the windows at starts (and the forecasts [W, horizon, C]
    with collect)."""
    model.eval()
    st, ch = samples(starts, data.C)
    tot, cnt = 0.0, 0
    preds = []
    with torch.no_grad():
        for i in range(0, len(st), batch):
            x, y, s = data.batch(st[i:i + batch], ch[i:i + batch], dtype)
            p = model(x, sg, lost)
            tot += std_mse_sum(p, y, s)
            cnt += y.numel()
            if collect:
                preds.append(p.to(torch.float64).numpy())
    mse = tot / max(cnt, 1)
    if collect:
        P = np.concatenate(preds) if preds else np.zeros((0, model.cfg.horizon))
        return mse, P.reshape(len(starts), data.C, model.cfg.horizon).transpose(0, 2, 1)
    return mse


# ----------------------------------------------------------------------------- subcommands

def log(msg):
    print(msg, file=sys.stderr, flush=True)


def check_devices(cfg, D, what="--devices", exc=UsageError):
    """D devices must divide the heads, dim and hidden_dim equally (Somegather)."""
    if D < 1 or cfg.n_heads % D or cfg.dim % D or cfg.hidden_dim % D:
        ok = [d for d in range(1, cfg.n_heads + 1) if not (cfg.n_heads % d or cfg.dim % d or cfg.hidden_dim % d)]
        raise exc(f"{what} {D}: the devices must divide n_heads {cfg.n_heads}, dim {cfg.dim} and hidden_dim "
                  f"{cfg.hidden_dim} equally ({', '.join(map(str, ok))})")


def check_finite(model, what):
    for k, v in model.state_dict().items():
        if not bool(torch.isfinite(v).all()):
            raise Error(f"{what}: the weights became non-finite ({k}); nothing written (try a lower --lr or --clip)")


def cmd_train(a):
    if a.prune > 0 and a.stages < 1:
        raise UsageError(f"train: --stages {a.stages}: pruning (--prune {a.prune}) needs at least 1 stage")
    if a.dim % a.n_heads:
        raise UsageError(f"train: --dim {a.dim} is not a multiple of --n-heads {a.n_heads}")
    try:
        cfg = Config(n_channels=1, name=a.name, dim=a.dim, hidden_dim=a.hidden_dim, n_layers=a.n_layers,
                     n_heads=a.n_heads, head_dim=a.dim // a.n_heads)
    except ValueError as e:
        raise UsageError(f"train: {e}") from None
    check_devices(cfg, a.devices)
    check_input(a.series, "series file")
    if a.split is not None:
        check_input(a.split, "split file")
    with Outputs([a.series, a.split]) as outs:
        outs.check(a.out, "model file", model=True)
        if a.json is not None:
            outs.check(a.json, "result file")
        return train(a, cfg, outs)


def train(a, cfg, outs):
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.set_num_threads(a.threads)
    t_start = time.time()
    data = Data(a.series, a.split, cfg)
    cfg.n_channels = data.C
    if a.name is None:
        cfg.name = "patchtst-" + os.path.splitext(os.path.basename(a.series))[0]
    gen = torch.Generator().manual_seed(a.seed)
    model = PatchTST(cfg).init_weights(gen)
    sg = Somegather(cfg, a.devices, mode=a.prune_mode)
    tr = data.windows("train", a.stride)
    va = data.windows("val", a.eval_stride)
    te = data.windows("test", a.eval_stride)
    st_all, ch_all = samples(tr, data.C)
    log(f"train: {a.series}: {len(data.values)} rows x {data.C} channels; windows train {len(tr)} (stride "
        f"{a.stride}), val {len(va)}, test {len(te)}; {len(st_all)} train samples; {n_parameters(model)} "
        f"parameters; D={a.devices}, dropout {a.dropout} {a.loss_mode} per {a.dropout_unit}, prune {a.prune} "
        f"{a.prune_mode} in {a.stages if a.prune > 0 else 0} stages")
    rng = np.random.default_rng(a.seed)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    phases = [("dense", 0, a.epochs)]
    if a.prune > 0:
        phases += [(f"stage{k}", k, a.stage_epochs if a.stage_epochs is not None else a.epochs)
                   for k in range(1, a.stages + 1)]
    history = []
    ep_global = 0
    for phase, k, n_ep in phases:
        if k > 0:
            ratio = a.prune * k / a.stages
            sg = Somegather(cfg, a.devices, prune_masks(model, a.devices, ratio, a.prune_mode, sg.keep),
                            a.prune_mode)
            log(f"train: {phase}: pruning {ratio:.3f} of each sender's columns ({a.prune_mode}); "
                f"val MSE right after pruning {evaluate(model, data, va, sg):.5f}")
        best, best_state = None, None
        bad = 0
        for ep in range(n_ep):
            t0 = time.time()
            model.train()
            perm = rng.permutation(len(st_all))
            if a.max_samples and a.max_samples < len(perm):
                perm = perm[:a.max_samples]
            tot, cnt = 0.0, 0
            for i in range(0, len(perm), a.batch_size):
                sel = perm[i:i + a.batch_size]
                x, y, s = data.batch(st_all[sel], ch_all[sel])
                lost = (DropoutLoss(a.dropout, a.loss_mode, a.devices, len(sel), cfg.n_patches, a.dropout_unit, gen)
                        if a.dropout > 0 and a.devices > 1 else None)
                p = model(x, sg, lost)
                loss = (((p - y) / s[:, None]) ** 2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if a.clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
                opt.step()
                lv = float(loss)
                if not math.isfinite(lv):
                    raise Error(f"train: epoch {ep_global + 1} ({phase} {ep + 1}/{n_ep}), step {i // a.batch_size + 1}"
                                f": the loss is not finite ({lv}); nothing written (try a lower --lr or --clip)")
                tot += lv * y.numel()
                cnt += y.numel()
            train_loss = tot / max(cnt, 1)
            t_train = time.time() - t0
            val = evaluate(model, data, va, sg)
            if not math.isfinite(val):
                raise Error(f"train: epoch {ep_global + 1} ({phase}): the val MSE is not finite ({val}); nothing "
                            f"written (try a lower --lr or --clip)")
            secs = time.time() - t0
            ep_global += 1
            history.append({"epoch": ep_global, "phase": phase, "train_loss": train_loss, "val_mse": val,
                            "seconds": secs, "train_seconds": t_train, "samples": int(len(perm))})
            log(f"train: epoch {ep_global} ({phase} {ep + 1}/{n_ep}): loss {train_loss:.5f}, val MSE {val:.5f}, "
                f"{secs:.1f} s ({t_train:.1f} s training, {len(perm) / max(t_train, 1e-9):.0f} samples/s)")
            if best is None or val < best:
                best, bad = val, 0
                best_state = {k2: v.detach().clone() for k2, v in model.state_dict().items()}
            else:
                bad += 1
                if a.patience and bad >= a.patience:
                    log(f"train: {phase}: no val improvement in {bad} epochs, next phase")
                    break
        if best_state is not None:
            model.load_state_dict(best_state)
    t_end_train = time.time()
    res_mse = {"train": evaluate(model, data, window_starts(data.split["train"], cfg, a.eval_stride), sg),
               "val": evaluate(model, data, va, sg), "test": evaluate(model, data, te, sg)}
    if a.devices > 1 and a.dropout > 0:
        res_mse["test_under_loss"] = evaluate(model, data, te, sg,
                                              HashLoss(a.dropout, a.seed, a.loss_mode, a.devices, cfg.n_patches))
    check_finite(model, "train")
    for k, v in res_mse.items():
        if not math.isfinite(v):
            raise Error(f"train: the {k} MSE of the trained model is not finite ({v}); nothing written")
    save_model(outs.temp(a.out), model, sg, a.prune)
    result = {"config": {k: v for k, v in vars(a).items() if k != "fn"} | {"model": cfg.as_dict()},
              "data": {"series": a.series, "split": data.split, "channels": data.names, "rows": len(data.values)},
              "epochs": history, "seconds": time.time() - t_start, "train_seconds": t_end_train - t_start,
              "mse": res_mse, "mse_note": "standardised by the train split's per-column mean and population std; "
                                          "test_under_loss: the engine's hash loss at p = dropout, seed = --seed",
              "parameters": n_parameters(model),
              "kept": {XCH_NAMES[w]: int(sg.keep[w].sum()) for w in range(4)}, "model": a.out}
    if a.json is not None:
        with open(outs.temp(a.json), "w") as fh:
            json.dump(result, fh, indent=1)
    outs.commit()
    log(f"train: wrote {a.out}{' and ' + a.json if a.json is not None else ''}; MSE (standardised by the train "
        f"split) train {res_mse['train']:.5f}, val {res_mse['val']:.5f}, test {res_mse['test']:.5f}; "
        f"{time.time() - t_start:.0f} s")
    return 0


def somegather_for(model, info, D, dtype):
    if info is None:
        return Somegather(model.cfg, D)
    return Somegather(model.cfg, D, info["keep"], info["prune_mode"])


def cmd_eval(a):
    check_input(a.model, "model file")
    check_input(a.series, "series file")
    if a.split is not None:
        check_input(a.split, "split file")
    with Outputs([a.model, a.series, a.split]) as outs:
        if a.out is not None:
            outs.check(a.out, "forecast file")
        if a.json is not None:
            outs.check(a.json, "result file")
        return evaluate_cmd(a, outs)


def evaluate_cmd(a, outs):
    torch.set_num_threads(a.threads)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model, info = load_model(a.model, dtype)
    cfg = model.cfg
    if a.devices is not None:
        check_devices(cfg, a.devices)
    elif info:
        check_devices(cfg, info["ranks"], f"{a.model}: somegather/ranks", Error)
    data = Data(a.series, a.split, cfg, need_val=False)
    if data.C != cfg.n_channels:
        raise Error(f"eval: {a.series} has {data.C} channel(s) ({', '.join(data.names)[:80]}), but the model was "
                    f"trained on {cfg.n_channels}")
    D = a.devices if a.devices is not None else (info["ranks"] if info else 1)
    sg = somegather_for(model, info, D, dtype)
    lost = HashLoss(a.loss, a.loss_seed, a.loss_mode, D, cfg.n_patches) if a.loss > 0 else None
    te = data.windows("test", a.stride)
    if a.window is not None:
        if not 0 <= a.window < len(te):
            raise UsageError(f"eval: --window {a.window} is outside the {len(te)} test windows (0..{len(te) - 1})")
        te, first = te[a.window:a.window + 1], a.window
    else:
        first = 0
    t0 = time.time()
    mse, P = evaluate(model, data, te, sg, lost, dtype=dtype, collect=True)
    secs = time.time() - t0
    if not (math.isfinite(mse) and np.isfinite(P).all()):
        raise Error(f"eval: the forecasts are not finite (values too large for {a.dtype} arithmetic?); nothing "
                    f"written")
    if a.out is not None:
        with open(outs.temp(a.out), "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["window", "row", "step"] + data.names)
            for i, s in enumerate(te):
                for j in range(cfg.horizon):
                    w.writerow([first + i, int(s) + cfg.lookback + j, j] + [repr(float(v)) for v in P[i, j]])
    res = {"model": a.model, "series": a.series, "devices": D, "dtype": a.dtype, "windows": int(len(te)),
           "first_window": first, "test_range": data.split["test"], "mse": mse,
           "mse_note": "standardised by the train split's per-column mean and population std",
           "loss": a.loss, "loss_mode": a.loss_mode, "loss_seed": a.loss_seed,
           "pruned": None if info is None else {k: info[k] for k in ("ranks", "prune", "prune_mode")},
           "seconds": secs}
    if a.json is not None:
        with open(outs.temp(a.json), "w") as fh:
            json.dump(res, fh, indent=1)
    outs.commit()
    print(f"eval: {len(te)} test window(s), D={D}, loss {a.loss} {a.loss_mode}: MSE {mse:.6f}")
    return 0


def cmd_synth(a):
    cfg = Config(n_channels=a.n_channels, synthetic=1, name="patchtst-synthetic")
    check_devices(cfg, a.devices)
    with Outputs([]) as outs:
        outs.check(a.out, "model file", model=True)
        model = PatchTST(cfg).init_weights(torch.Generator().manual_seed(a.seed), synthetic=True)
        sg = None
        if a.prune > 0:
            sg = Somegather(cfg, a.devices, prune_masks(model, a.devices, a.prune, a.prune_mode), a.prune_mode)
        save_model(outs.temp(a.out), model, sg, a.prune)
        outs.commit()
    print(f"synth: wrote {a.out} ({n_parameters(model)} parameters, seed {a.seed}, {a.n_channels} channels"
          + (f", pruned {a.prune} {a.prune_mode} for {a.devices} devices" if sg else "") + ")")
    return 0


def cmd_series(a):
    """A synthetic series: daily and weekly cycles, slow trend, AR(1) noise, mixed across channels."""
    if a.rows * a.n_channels > 50_000_000:
        raise UsageError(f"series: --rows {a.rows} x --n-channels {a.n_channels} is more than 50000000 values")
    split = a.split if a.split is not None else os.path.splitext(a.out)[0] + ".split.json"
    with Outputs([]) as outs:
        outs.check(a.out, "series file")
        outs.check(split, "split file")
        write_series(a, outs, split)
        outs.commit()
    print(f"series: wrote {a.out} ({a.rows} rows x {a.n_channels} channels) and {split}")
    return 0


def write_series(a, outs, split):
    rng = np.random.default_rng(a.seed)
    T, C = a.rows, a.n_channels
    t = np.arange(T)
    base = np.stack([np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6.3)) * rng.uniform(0.5, 2)
                     + np.sin(2 * np.pi * t / 168 + rng.uniform(0, 6.3)) * rng.uniform(0.2, 1)
                     + t / T * rng.normal(0, 1) for _ in range(C)], 1)
    noise = np.zeros((T, C))
    e = rng.normal(0, 0.3, (T, C))
    for i in range(1, T):
        noise[i] = 0.8 * noise[i - 1] + e[i]
    mixm = np.eye(C) + 0.3 * rng.normal(0, 1, (C, C)) / np.sqrt(C)
    vals = (base + noise) @ mixm * rng.uniform(1, 10, C) + rng.uniform(-5, 20, C)
    with open(outs.temp(a.out), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date"] + [f"c{j}" for j in range(C)])
        for i in range(T):
            w.writerow([f"h{i}"] + [f"{v:.4f}" for v in vals[i]])
    a1, a2 = int(T * 0.6), int(T * 0.8)
    with open(outs.temp(split), "w") as fh:
        json.dump({"train": [0, a1], "val": [a1, a2], "test": [a2, T]}, fh)


class ArgParser(argparse.ArgumentParser):
    """argparse, with a usage error reported as one line `patchtst: error: [SUBCOMMAND: ]MESSAGE` (exit 2)."""

    def error(self, message):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"patchtst: error: {sub}{message}\n")


def _range_text(lo, hi, lo_open, hi_open):
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def integer(lo=None, hi=None):
    """An argparse type: a decimal integer (digits only) in [lo, hi]."""
    def parse(text):
        if not re.fullmatch(r"[+-]?[0-9]{1,30}", text):
            raise argparse.ArgumentTypeError(f"'{text[:40]}' is not an integer")
        v = int(text)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is outside {_range_text(lo, hi, False, False)}"
                                             if hi is not None else f"{v} must be >= {lo}")
        return v
    return parse


def number(lo, hi=None, lo_open=False, hi_open=False):
    """An argparse type: a finite decimal number (as strtod reads one) in the given range."""
    def parse(text):
        v = strtod(text.encode()) if _DEC.fullmatch(text.encode("utf-8", "replace")) else None
        if v is None:
            raise argparse.ArgumentTypeError(f"'{text[:40]}' is not a finite number")
        if v < lo or (lo_open and v == lo) or (hi is not None and (v > hi or (hi_open and v == hi))):
            r = _range_text(lo, hi, lo_open, hi_open)
            raise argparse.ArgumentTypeError(f"{text} must be {r}" if hi is None else f"{text} is outside {r}")
        return v
    return parse


def model_name(text):
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError("a model name must be non-empty text")
    return text


def parser():
    p = ArgParser(prog="patchtst", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{train,eval,synth,series}")
    csv_help = ("CSV series: a header row of names; a first column named time, date or timestamp is left out; "
                "every other column is a channel, every value a finite number; every row has the header's "
                "field count (at most 1 GiB, 4096 columns)")
    split_help = ("split JSON {\"train\": [first, end], \"val\": [...], \"test\": [...]}: data-row ranges, two "
                  "non-negative integers each, first < end <= rows (default 70/10/20)")

    t = sub.add_parser("train", help="train a model on a CSV series and write the HDF5 model file",
                       description="Train PatchTST (docs/patchtst.md) with D-device somegather semantics, "
                                   "message dropout and staged pruning; write MODEL.h5. MSEs are on the series "
                                   "standardised by the train split's per-column mean and population std. The "
                                   "outputs are written only when training succeeded (never over an input).")
    t.add_argument("--series", required=True, help=csv_help)
    t.add_argument("--split", help=split_help)
    t.add_argument("--out", required=True, help="the model file to write (HDF5)")
    t.add_argument("--devices", type=integer(1), default=1,
                   help="D devices trained for; must divide n_heads 16 (1, 2, 4, 8 or 16; default 1)")
    t.add_argument("--prune", type=number(0, 1, hi_open=True), default=0.0,
                   help="final pruning ratio R per sender and exchange, in [0, 1) (0)")
    t.add_argument("--prune-mode", choices=PRUNE_MODES, default="aware",
                   help="aware: rank by the weights on other devices, owner keeps its columns; magnitude: rank by "
                        "all weights, owner drops them too (default aware)")
    t.add_argument("--stages", type=integer(), default=2,
                   help="pruning stages K >= 1: stage k prunes R*k/K (default 2)")
    t.add_argument("--stage-epochs", type=integer(1), help="retraining epochs per stage, >= 1 (default --epochs)")
    t.add_argument("--dropout", type=number(0, 1, hi_open=True), default=0.0,
                   help="message dropout probability P in training, in [0, 1) (0)")
    t.add_argument("--loss-mode", choices=LOSS_MODES, default="link", help="message dropout mode (link)")
    t.add_argument("--dropout-unit", choices=("row", "window"), default="row",
                   help="fresh drop decision per patch row (default; as the engine's per-position loss) or one "
                        "per sample for all rows")
    t.add_argument("--epochs", type=integer(1), default=10, help="epochs before pruning, >= 1 (default 10)")
    t.add_argument("--seed", type=integer(0, 2 ** 32 - 1), default=1,
                   help="seed of weights, order and dropout, in [0, 2^32) (default 1)")
    t.add_argument("--json", help="write the result (config, epochs, seconds, MSEs, parameters) here")
    t.add_argument("--lr", type=number(0, lo_open=True), default=5e-4, help="Adam learning rate, > 0 (5e-4)")
    t.add_argument("--batch-size", type=integer(1), default=128, help="samples per step, >= 1 (128)")
    t.add_argument("--clip", type=number(0), default=1.0, help="gradient norm clip, 0 none (1.0)")
    t.add_argument("--stride", type=integer(1), default=1, help="start-row stride of the train windows, >= 1 (1)")
    t.add_argument("--eval-stride", type=integer(1), default=1,
                   help="start-row stride of val/test windows, >= 1 (1)")
    t.add_argument("--max-samples", type=integer(0), default=0,
                   help="train samples per epoch, a fresh random subset (0: all)")
    t.add_argument("--patience", type=integer(0), default=0,
                   help="stop a phase after this many epochs without val improvement (0: never); the phase's best "
                        "is kept")
    t.add_argument("--name", type=model_name, help="the model's name attribute (default patchtst-<csv name>)")
    t.add_argument("--threads", type=integer(1, 1024), default=1,
                   help="torch threads, >= 1 (1: on a shared 2-core machine 2 threads ran 10x slower)")
    t.add_argument("--dim", type=integer(1, 1 << 16), default=128, help=argparse.SUPPRESS)
    t.add_argument("--hidden-dim", type=integer(1, 1 << 18), default=256, help=argparse.SUPPRESS)
    t.add_argument("--n-layers", type=integer(1, 1024), default=6, help=argparse.SUPPRESS)
    t.add_argument("--n-heads", type=integer(1, 128), default=16, help=argparse.SUPPRESS)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("eval", help="forecast the test split with a model file (the engine's semantics)",
                       description="Load MODEL.h5 and forecast the test windows on D devices with the model's "
                                   "/somegather masks and the engine's hash message loss. Prints the MSE on the "
                                   "series standardised by the train split's per-column mean and population std.")
    e.add_argument("--model", required=True, help="model file (HDF5, format_version 3, family patchtst)")
    e.add_argument("--series", required=True, help=csv_help + "; as many channels as the model's n_channels")
    e.add_argument("--split", help=split_help.replace("\"val\": [...], ", "\"val\" (optional), "))
    e.add_argument("--devices", type=integer(1),
                   help="D, dividing the model's n_heads (default: /somegather's ranks, else 1)")
    e.add_argument("--loss", type=number(0, 1), default=0.0, help="message loss probability, in [0, 1] (0)")
    e.add_argument("--loss-mode", choices=LOSS_MODES, default="link", help="link, receiver or sender (link)")
    e.add_argument("--loss-seed", type=integer(0, 2 ** 64 - 1), default=1,
                   help="loss seed, as meshinfer's --loss-seed, >= 0 (1)")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--window", type=integer(0), help="only test window I (0-based)")
    g.add_argument("--all", action="store_true", help="every test window (the default)")
    e.add_argument("--stride", type=integer(1), default=1, help="start-row stride of the test windows, >= 1 (1)")
    e.add_argument("--out", help="forecasts CSV: window,row,step,<channels>, one line per horizon step")
    e.add_argument("--json", help="write the result here")
    e.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="arithmetic (float32)")
    e.add_argument("--threads", type=integer(1, 1024), default=1,
                   help="torch threads, >= 1 (1: on a shared 2-core machine 2 threads ran 10x slower)")
    e.set_defaults(fn=cmd_eval)

    s = sub.add_parser("synth", help="a model with seeded random weights (synthetic=1) for engine tests",
                       description="Write a patchtst model of the default shape with seeded random weights "
                                   "(random norm gains and biases too), name patchtst-synthetic, synthetic=1.")
    s.add_argument("--out", required=True, help="the model file to write")
    s.add_argument("--seed", type=integer(0, 2 ** 64 - 1), default=1, help="weight seed, >= 0 (1)")
    s.add_argument("--n-channels", type=integer(1, 65536), default=7,
                   help="n_channels attribute, in [1, 65536] (7)")
    s.add_argument("--prune", type=number(0, 1, hi_open=True), default=0.0,
                   help="also write /somegather masks ranked from the weights, ratio in [0, 1) (0)")
    s.add_argument("--prune-mode", choices=PRUNE_MODES, default="aware", help="(aware)")
    s.add_argument("--devices", type=integer(1), default=4,
                   help="D the masks are ranked for, dividing n_heads 16 (4)")
    s.set_defaults(fn=cmd_synth)

    d = sub.add_parser("series", help="a synthetic CSV series and split file for development",
                       description="Write a synthetic multivariate hourly-like series (daily and weekly cycles, "
                                   "trend, AR(1) noise, mixed channels) and a 60/20/20 split file.")
    d.add_argument("--out", required=True, help="CSV to write")
    d.add_argument("--split", help="split JSON to write (default <out>.split.json)")
    d.add_argument("--rows", type=integer(3, 10 ** 7), default=8000, help="rows, in [3, 10^7] (8000)")
    d.add_argument("--n-channels", type=integer(1, MAX_COLS - 1), default=7,
                   help=f"channels, in [1, {MAX_COLS - 1}] (7)")
    d.add_argument("--seed", type=integer(0, 2 ** 64 - 1), default=1, help="seed, >= 0 (1)")
    d.set_defaults(fn=cmd_series)
    return p


def tune_malloc():
    """glibc: keep freed memory instead of returning it to the system after every tensor (fresh mmaps cost
    page faults on every step; about 1.7x faster training here). No effect elsewhere."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        for param, value in ((-1, 1 << 30), (-2, 64 << 20), (-3, 32 << 20)):  # M_TRIM_THRESHOLD, M_TOP_PAD,
            libc.mallopt(param, value)                                         # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def fail(message, code):
    print("patchtst: error: " + " ".join(str(message).split("\n")), file=sys.stderr, flush=True)
    return code


def main(argv=None):
    """Run one subcommand; a bad input or a failure prints one line `patchtst: error: ...` and returns 1 (2 for a
    bad option; argparse's own usage errors exit 2 through ArgParser.error)."""
    a = parser().parse_args(argv)
    tune_malloc()
    try:
        return a.fn(a)
    except UsageError as e:
        return fail(e if str(e).startswith(a.cmd + ":") else f"{a.cmd}: {e}", e.code)
    except Error as e:
        return fail(e, e.code)
    except KeyboardInterrupt:
        return fail("interrupted; nothing written", 130)
    except MemoryError:
        return fail("out of memory; nothing written", 1)
    except OSError as e:  # an I/O failure nothing above anticipated (a full disk, an HDF5 library error)
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        what = e.strerror or (str(e).splitlines() or [type(e).__name__])[0]
        return fail(f"{where}{what}", 1)


if __name__ == "__main__":
    sys.exit(main())
