#!/usr/bin/env python3
"""Writes tests/data/kernels/*.bin: small cases of the official reference's pure-torch kernels
(deepseek_v41/kernel_cpu.py) for tests/kernels/linear_test.cc and tests/kernels/ops_test.cc.

  gemm.bin         fp8_gemm and fp4_gemm outputs, with the act_quant the reference's `linear()`
                   applies first (act_quant(x, 32, "ue8m0", float8_e8m0fnu); block 32 weights).
                   Odd M (1, 3, 7), N not a multiple of 32 for FP8, K a multiple of 32.
  sparse_attn.bin  sparse_attn outputs with -1 entries, a query with no valid index, more than
                   64 indices (so several online-softmax blocks), and a block of 64 that is all -1.

The default dtype is bf16 while the kernels run (the GEMMs return torch.get_default_dtype()).
Arrays use the DIT1 format of tools/golden/numerics_tables.py; per case `<case>/dims` holds the
integer sizes listed in the names below.

Usage: /root/gv/bin/python tools/golden/kernel_cases.py --reference /root/ref [--out DIR]
"""

import argparse
import pathlib
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from numerics_tables import bf16_bits, to_bf16_bits, write_tables  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

# (name, M, N, K); "wide" cases draw log-uniform magnitudes over the whole e4m3 range, so the fp32
# sum of a 32-wide block is rarely exact and its summation order matters.
FP8_CASES = [("fp8_m1", 1, 50, 96), ("fp8_m3", 3, 48, 192), ("fp8_m7", 7, 33, 160), ("fp8_m4", 4, 40, 224),
             ("fp8_wide_m7", 7, 33, 128)]
FP4_CASES = [("fp4_m1", 1, 48, 64), ("fp4_m3", 3, 37, 256), ("fp4_m7", 7, 64, 192), ("fp4_m5", 5, 16, 512),
             ("fp4_wide_m3", 3, 24, 128)]


def log_uniform(rng: np.random.Generator, shape, lo: float, hi: float) -> np.ndarray:
    return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(lo, hi, shape))


def activations(rng: np.random.Generator, m: int, k: int, wide: bool = False, positive: bool = False) -> np.ndarray:
    """bf16 bits [m, k]: normal rows at different scales, outliers, a zero row when m > 2."""
    if wide and positive:  # 3/4 near the block max (codes ~400..448), 1/4 at the bottom of the subnormals
        x = np.where(rng.random((m, k)) < 0.75, rng.uniform(1.5, 1.75, (m, k)), np.exp2(rng.uniform(-17, -14, (m, k))))
        return to_bf16_bits(x.astype(np.float32))
    if wide:
        return to_bf16_bits(log_uniform(rng, (m, k), -24, 0).astype(np.float32))
    x = rng.standard_normal((m, k)) * (10.0 ** rng.uniform(-2, 2, size=(m, 1)))
    x[:, rng.integers(0, k, size=max(1, k // 40))] *= 30  # outlier channels: per-block scales differ
    if m > 2:
        x[1] = 0.0
    return to_bf16_bits(x.astype(np.float32))


def fp8_weight(rng: np.random.Generator, n: int, k: int, wide: bool = False):
    w = rng.standard_normal((n, k)) * 60.0
    w[:, :: 7] *= 3  # reach the top of the e4m3 range
    if wide:
        w = log_uniform(rng, (n, k), -9, 8.8)
    codes = torch.from_numpy(w.astype(np.float32)).clamp(-448, 448).to(torch.float8_e4m3fn)
    scales = rng.integers(112, 126, size=((n + 31) // 32, k // 32), dtype=np.uint8)
    return codes.view(torch.uint8).numpy().copy(), scales


def fp4_weight(rng: np.random.Generator, n: int, k: int, positive: bool = False):
    # positive codes only (with positive activations) make large same-sign block sums, the only way
    # an FP4 x FP8 block partial loses bits in fp32
    codes = rng.integers(0, 8 if positive else 16, size=(n, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = rng.integers(115, 128, size=(n, k // 32), dtype=np.uint8)
    return packed, scales


def report_inexact(name: str, a: torch.Tensor, b: torch.Tensor, block: int) -> None:
    """Prints how many 32-wide block partials are not exact in fp32 (where summation order can matter)."""
    a64, b64 = a.double(), b.double()
    inexact = total = 0
    for k in range(0, a.size(-1), block):
        exact = a64[:, k:k + block] @ b64[:, k:k + block].T
        fp32 = a.float()[:, k:k + block] @ b.float()[:, k:k + block].T
        inexact += int((exact != fp32.double()).sum())
        total += exact.numel()
    print(f"{name}: {inexact} of {total} block partials inexact in fp32")


def gemm_cases(kernel_cpu, rng: np.random.Generator) -> dict:
    arrays = {}
    e8m0 = torch.float8_e8m0fnu
    for name, m, n, k in FP8_CASES:
        x = activations(rng, m, k, "wide" in name)
        codes, scales = fp8_weight(rng, n, k, "wide" in name)
        xt = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
        a, a_s = kernel_cpu.act_quant(xt, 32, "ue8m0", e8m0)
        b = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn)
        b_s = torch.from_numpy(scales.copy()).view(e8m0)
        y = kernel_cpu.fp8_gemm(a, a_s, b, b_s, e8m0, block_size=32)
        report_inexact(name, a, b, 32)
        assert y.dtype == torch.bfloat16 and y.shape == (m, n)
        arrays.update({f"{name}/dims": np.array([m, n, k], dtype=np.int32), f"{name}/x": x,
                       f"{name}/w": codes, f"{name}/w_scales": scales, f"{name}/y": bf16_bits(y)})
    for name, m, n, k in FP4_CASES:
        x = activations(rng, m, k, "wide" in name, positive="wide" in name)
        packed, scales = fp4_weight(rng, n, k, positive="wide" in name)
        xt = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
        a, a_s = kernel_cpu.act_quant(xt, 32, "ue8m0", e8m0)
        b = torch.from_numpy(packed.copy()).view(torch.float4_e2m1fn_x2)
        b_s = torch.from_numpy(scales.copy()).view(e8m0)
        y = kernel_cpu.fp4_gemm(a, a_s, b, b_s, e8m0, act_block_size=32)
        report_inexact(name, a, kernel_cpu.unpack_fp4(b), 32)
        assert y.dtype == torch.bfloat16 and y.shape == (m, n)
        arrays.update({f"{name}/dims": np.array([m, n, k], dtype=np.int32), f"{name}/x": x,
                       f"{name}/w": packed, f"{name}/w_scales": scales, f"{name}/y": bf16_bits(y)})
    return arrays


# (name, queries m, heads h, dim d, kv rows n, topk)
ATTN_CASES = [("short", 3, 4, 64, 40, 24), ("long", 4, 4, 64, 150, 150), ("wide", 2, 2, 128, 72, 70)]


def attn_cases(kernel_cpu, rng: np.random.Generator) -> dict:
    arrays = {}
    for name, m, h, d, n, topk in ATTN_CASES:
        q = to_bf16_bits((rng.standard_normal((m, h, d)) * 2.0).astype(np.float32))
        kv = to_bf16_bits(rng.standard_normal((n, d)).astype(np.float32))
        sink = (rng.standard_normal(h) * 2).astype(np.float32)
        idx = np.stack([rng.permutation(n)[:topk] if topk <= n else rng.integers(0, n, topk) for _ in range(m)])
        idx = idx.astype(np.int32)
        idx[rng.random(idx.shape) < 0.15] = -1  # scattered -1 entries
        idx[m - 1] = -1  # a query with no valid index: zeros
        if topk > 128:
            idx[0, 64:128] = -1  # a whole online-softmax block of -1 between valid ones
        scale = np.float32(d ** -0.5)
        qt = torch.from_numpy(q.view(np.int16).copy()).view(torch.bfloat16).view(1, m, h, d)
        kvt = torch.from_numpy(kv.view(np.int16).copy()).view(torch.bfloat16).view(1, n, d)
        out = kernel_cpu.sparse_attn(qt, kvt, torch.from_numpy(sink.copy()), torch.from_numpy(idx.copy()).view(1, m, topk),
                                     float(scale))
        assert out.dtype == torch.bfloat16
        assert torch.all(out[0, m - 1] == 0)
        arrays.update({f"{name}/dims": np.array([m, h, d, n, topk], dtype=np.int32), f"{name}/q": q,
                       f"{name}/kv": kv, f"{name}/sink": sink.view(np.uint32), f"{name}/idx": idx,
                       f"{name}/scale": np.array([scale], dtype=np.float32).view(np.uint32),
                       f"{name}/out": bf16_bits(out.view(m, h, d))})
    return arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="directory holding the deepseek_v41 package")
    parser.add_argument("--out", default=str(REPO / "tests/data/kernels"))
    args = parser.parse_args()
    sys.path.insert(0, args.reference)
    from deepseek_v41 import kernel_cpu  # noqa: E402  (third-party reference, run only)

    torch.set_default_dtype(torch.bfloat16)
    out = pathlib.Path(args.out)
    rng = np.random.default_rng(41)
    write_tables(out / "gemm.bin", gemm_cases(kernel_cpu, rng))
    write_tables(out / "sparse_attn.bin", attn_cases(kernel_cpu, rng))


if __name__ == "__main__":
    main()
