#!/usr/bin/env python3
"""Writes tests/data/core/numerics/*.bin: bit-exact tables of the DeepSeek-V4.1 numeric formats and
QAT quantizers, computed by torch and by the official reference's pure-torch kernels
(deepseek_v41/kernel_cpu.py), for tests/core/numeric_test.cc.

  bf16.bin      fp32 -> bf16 rounding (torch .to(bfloat16)): ties to even, near ties, subnormals,
                specials, NaN, random bit patterns.
  e4m3.bin      all 256 e4m3fn codes decoded (torch float8_e4m3fn -> float32), and the fp32 -> e4m3
                satfinite cast x.clamp(-448, 448).to(float8_e4m3fn) on tricky inputs.
  ue8m0.bin     all 256 ue8m0 bytes decoded (torch float8_e8m0fnu -> float32).
  e2m1.bin      fp32 in [-6, 6] -> e2m1 code (kernel_cpu._e2m1_codes).
  qat.bin       bf16 blocks through act_quant(x, 32, "ue8m0", inplace=True),
                fp4_act_quant(x, 32, True) and fp4_act_quant(x, 16, True, scale_dtype=e4m3), stored as
                the reference's codes and fp32 scales (the dequantized output code * scale is exact in
                bf16 for all three, which this script asserts against the inplace outputs).
  dequant.bin   FP8 32x32-block and FP4 per-row-per-32 weight dequantization (torch fp32 products).

File format (shared with tools/golden/kernel_cases.py), little endian:
  "DIT1", u32 array count, then per array: u16 name length, name (ASCII), u8 dtype ('B' u8, 'H' u16,
  'I' u32, 'i' i32, 'f' f32), u8 ndim, u32 dims[ndim], raw data.
Floats are stored as their bit patterns ('I' for fp32, 'H' for bf16) so the C++ side compares bits.

Usage: /root/gv/bin/python tools/golden/numerics_tables.py --reference /root/ref [--out DIR]
"""

import argparse
import pathlib
import struct
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]

_DTYPES = {np.dtype(np.uint8): "B", np.dtype(np.uint16): "H", np.dtype(np.uint32): "I",
           np.dtype(np.int32): "i", np.dtype(np.float32): "f"}


def write_tables(path: pathlib.Path, arrays: dict) -> None:
    """Writes named numpy arrays in the DIT1 format described above."""
    out = bytearray(b"DIT1")
    out += struct.pack("<I", len(arrays))
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        code = _DTYPES[arr.dtype]
        enc = name.encode("ascii")
        out += struct.pack("<H", len(enc)) + enc
        out += struct.pack("<BB", ord(code), arr.ndim)
        out += struct.pack(f"<{arr.ndim}I", *arr.shape)
        out += arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    print(f"wrote {path} ({len(out)} bytes, {len(arrays)} arrays)")


def f32_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def bits_f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bf16_tensor(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(bits, dtype=np.uint16).view(np.int16).copy()).view(torch.bfloat16)


def bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def to_bf16_bits(values) -> np.ndarray:
    """fp32 values -> bf16 bit patterns, rounded by torch (RNE)."""
    return bf16_bits(torch.from_numpy(np.asarray(values, dtype=np.float32).copy()).to(torch.bfloat16))


def torch_bf16(fp32_bits: np.ndarray) -> np.ndarray:
    return bf16_bits(torch.from_numpy(bits_f32(fp32_bits).copy()).to(torch.bfloat16))


def torch_e4m3(fp32_bits: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(bits_f32(fp32_bits).copy())
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).numpy().copy()


def nextafter32(x, direction):
    return np.nextafter(np.float32(x), np.float32(direction), dtype=np.float32)


# ---- (1) bf16 rounding ---------------------------------------------------------------------------

def bf16_tables(rng: np.random.Generator) -> dict:
    def finite_bf16(n):
        b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
        return b[(b & 0x7F80) != 0x7F80]

    cases = {}
    base = finite_bf16(400)
    # every tie: the low half is exactly 0x8000, with both parities of the kept bit, plus the
    # largest finite values (0x7F7F is odd: its tie rounds up to inf; 0x7F7E stays).
    ties = np.concatenate([base, np.array([0x0000, 0x0001, 0x7F7F, 0x7F7E, 0x3F80, 0x3F81, 0x8000, 0x8001,
                                           0xFF7F, 0xFF7E, 0xBF80, 0xBF81], dtype=np.uint32)])
    cases["ties"] = (ties << 16) | 0x8000
    cases["near_ties"] = np.concatenate([(base << 16) | 0x7FFF, (base << 16) | 0x8001,
                                         (base << 16) | 0x0001, (base << 16) | 0xFFFF])
    cases["exact"] = base << 16
    sub = rng.integers(1, 0x00800000, size=200, dtype=np.uint32)
    sub_special = np.array([0x00000001, 0x00007FFF, 0x00008000, 0x00008001, 0x00018000, 0x00017FFF, 0x00010000,
                            0x007F7FFF, 0x007F8000, 0x007FFFFF, 0x00400000, 0x00408000, 0x00418000], dtype=np.uint32)
    sub = np.concatenate([sub, sub_special])
    cases["subnormal"] = np.concatenate([sub, sub | 0x80000000])
    cases["zero_inf_max"] = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF,
                                      0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x00800000, 0x80800000, 0x3F800000,
                                      0xBF800000], dtype=np.uint32)
    cases["random"] = rng.integers(0, 1 << 32, size=700, dtype=np.uint64).astype(np.uint32)
    cases["random"] = cases["random"][(cases["random"] & 0x7F800000) != 0x7F800000]
    cases["nan"] = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFFFFFFF,
                             0x7F80FFFF, 0x7F810000], dtype=np.uint32)
    arrays = {}
    for name, bits in cases.items():
        bits = bits.astype(np.uint32)
        out = torch_bf16(bits)
        if name == "nan":
            assert np.all((out & 0x7F80) == 0x7F80) and np.all(out & 0x7F)
        arrays[f"bf16/{name}/in"] = bits
        arrays[f"bf16/{name}/out"] = out
    return arrays


# ---- (2) e4m3 ------------------------------------------------------------------------------------

def e4m3_tables(rng: np.random.Generator) -> dict:
    arrays = {}
    codes = np.arange(256, dtype=np.uint8)
    decoded = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).float().numpy()
    arrays["e4m3/decode/out"] = decoded.view(np.uint32).copy()

    finite = decoded[(codes & 0x7F) != 0x7F]
    pos = np.unique(finite[finite > 0]).astype(np.float64)  # 2^-9 ... 448, sorted
    mids = (pos[:-1] + pos[1:]) / 2  # exact in fp32 (e4m3 midpoints have 5 significant bits)
    sub_mask = mids < 2.0**-6
    # midpoints between 0 and the min subnormal, and between the subnormals and the first normal
    sub_mids = np.concatenate([[2.0**-10], mids[sub_mask]])
    norm_mids = mids[~sub_mask]

    def both_signs(v):
        v = np.asarray(v, dtype=np.float32)
        return np.concatenate([v, -v])

    def around(v):
        v = np.asarray(v, dtype=np.float32)
        return np.concatenate([nextafter32(v, np.inf), nextafter32(v, -np.inf)])

    cases = {
        "codes": finite,
        "normal_ties": both_signs(norm_mids),
        "subnormal_ties": both_signs(sub_mids),
        "near_normal_ties": both_signs(around(norm_mids)),
        "near_subnormal_ties": both_signs(around(sub_mids)),
        # min subnormal, half of it (a tie to 0), just around both, 1.5 and 7.5 times it
        "min_subnormal": both_signs([2.0**-9, 2.0**-10, nextafter32(2.0**-10, 1), nextafter32(2.0**-10, 0),
                                     nextafter32(2.0**-9, 0), nextafter32(2.0**-9, 1), 1.5 * 2.0**-9,
                                     7.5 * 2.0**-9, 2.0**-6, nextafter32(2.0**-6, 0), 2.0**-11, 2.0**-12]),
        # 448 is the largest finite value; 464 is the tie with the missing 480; beyond saturates
        "saturation": both_signs([448, nextafter32(448, np.inf), nextafter32(448, 0), 440, 464,
                                  nextafter32(464, 0), nextafter32(464, np.inf), 480, 500, 1e6, 3.4e38,
                                  np.finfo(np.float32).max, np.inf]),
        "zero_and_tiny": np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, -1e-45, -1e-38, -2.0**-11, -2.0**-126,
                                   -1e-10, 1e-10], dtype=np.float32),
        "random": np.concatenate([
            (rng.standard_normal(600) * np.exp2(rng.uniform(-14, 10, 600))).astype(np.float32),
            rng.uniform(-480, 480, 200).astype(np.float32)]),
        "nan": np.array([np.nan, -np.nan], dtype=np.float32),
    }
    cases["nan"] = bits_f32(np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], dtype=np.uint32))
    for name, vals in cases.items():
        bits = f32_bits(vals)
        out = torch_e4m3(bits)
        if name == "nan":
            assert np.all((out & 0x7F) == 0x7F)
        arrays[f"e4m3/cast/{name}/in"] = bits
        arrays[f"e4m3/cast/{name}/out"] = out
    return arrays


# ---- (3) ue8m0, (4) e2m1 -------------------------------------------------------------------------

def ue8m0_tables() -> dict:
    codes = torch.arange(256, dtype=torch.uint8)
    return {"ue8m0/decode/out": codes.view(torch.float8_e8m0fnu).float().numpy().view(np.uint32).copy()}


def e2m1_tables(kernel_cpu, rng: np.random.Generator) -> dict:
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
    cases = {
        "ties": np.concatenate([ties, -ties]),
        "near_ties": np.concatenate([nextafter32(ties, 0), nextafter32(ties, 6), -nextafter32(ties, 0),
                                     -nextafter32(ties, 6)]),
        "codes": np.concatenate([grid, -grid, nextafter32(6, 0)[None], -nextafter32(6, 0)[None]]),
        "zero_and_tiny": np.array([0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, -2.0**-126, 0.2, -0.2], dtype=np.float32),
        "random": rng.uniform(-6, 6, 500).astype(np.float32),
    }
    arrays = {}
    for name, vals in cases.items():
        vals = np.asarray(vals, dtype=np.float32)
        out = kernel_cpu._e2m1_codes(torch.from_numpy(vals.copy())).numpy().astype(np.uint8)
        arrays[f"e2m1/{name}/in"] = f32_bits(vals)
        arrays[f"e2m1/{name}/out"] = out
    return arrays


# ---- (5) QAT quantizers --------------------------------------------------------------------------

BLOCK = 32


def qat_blocks(rng: np.random.Generator) -> dict:
    """Categories of [n, 32] bf16 bit blocks."""
    cats = {}

    def bf(vals):
        return to_bf16_bits(np.asarray(vals, dtype=np.float32).reshape(-1, BLOCK))

    # all-zero blocks: +0, -0, mixed signs of zero
    z = np.zeros((4, BLOCK), dtype=np.uint16)
    z[1] = 0x8000
    z[2, ::2] = 0x8000
    z[3, rng.permutation(BLOCK)[:5]] = 0x8000
    cats["all_zero"] = z

    # blocks of bf16 subnormals (exponent field 0), with and without zeros / sign mix; the
    # smallest possible block (only the min subnormal 2^-133)
    sub = rng.integers(1, 0x80, size=(24, BLOCK), dtype=np.uint16)
    sub[8:16] |= (rng.integers(0, 2, size=(8, BLOCK), dtype=np.uint16) << 15)
    sub[16:20, ::3] = 0
    sub[20] = 0x0001
    sub[21] = 0x8001
    sub[22, :] = 0
    sub[22, 7] = 0x0001
    sub[23] = 0x007F
    cats["bf16_subnormal"] = sub

    # blocks whose amax is exactly 448 * 2^k or 6 * 2^k (and the bf16 neighbours just above and
    # below); the rest of the block random below the amax. Also amax at the 1e-4 clamp.
    rows = []
    for k in range(-130, 120, 5):
        for base in (448.0, 6.0):
            amax = np.float32(base * 2.0**k)
            if not np.isfinite(amax) or amax < 2.0**-133:
                continue
            a_bits = int(to_bf16_bits([amax])[0])
            for delta in (0, 1, -1):
                if a_bits + delta <= 0:
                    continue
                top = np.uint16(a_bits + delta)
                vals = rng.uniform(-1, 1, BLOCK).astype(np.float32) * bits_f32([np.uint32(top) << 16])[0]
                b = to_bf16_bits(vals)
                i = rng.integers(BLOCK)
                b[i] = top | (0x8000 if rng.integers(2) else 0)
                b[(i + 16) % BLOCK] = top  # both halves of 16 reach the amax too
                rows.append(b)
    for amax in (1e-4, 9.99e-5, 1.0001e-4, 448e-4, 6e-4):
        top = to_bf16_bits([amax])[0]
        b = to_bf16_bits(rng.uniform(-amax, amax, BLOCK))
        b[3] = top
        b[19] = top | 0x8000
        rows.append(b)
    cats["amax_pow2_times_max"] = np.stack(rows)

    # ties: elements that land exactly halfway between two codes after scaling.
    rows = []
    e4m3_pos = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy().astype(np.float64)
    e4m3_mids = (e4m3_pos[:-1] + e4m3_pos[1:]) / 2
    e2m1_mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    for k in range(-20, 21, 4):
        s = 2.0**k
        # FP8: amax 300 * s keeps the scale at s; the rest are e4m3 midpoints times s
        for chunk in range(4):
            mids = rng.choice(e4m3_mids[e4m3_mids < 300], BLOCK)
            vals = mids * s * rng.choice([-1, 1], BLOCK)
            vals[chunk] = 300 * s
            vals[16 + chunk] = -300 * s
            rows.append(bf(vals)[0])
        # FP4 (power-of-two scale): amax 5 * s keeps the scale at s
        vals = np.resize(np.concatenate([e2m1_mids, -e2m1_mids]), BLOCK) * s
        rows.append(bf(vals)[0])
    for c in (1.25, 0.875, 0.0625, 2.0**-7, 3.0, 0.3125):
        # FP4 with e4m3 scales: amax = 6 * c makes the scale exactly c (c is an e4m3 value)
        half = np.resize(np.concatenate([[6.0], e2m1_mids, -e2m1_mids]), 16) * c
        rows.append(bf(np.concatenate([half, -half]))[0])
    cats["ties"] = np.stack(rows)

    # saturation: e4m3 scales that round down (so |x| / s > 6 and the clamp to 6 acts), amax/6 above
    # 448 (the e4m3 scale saturates), and values at the top of the bf16 range.
    rows = []
    for c in (1.0625, 1.1875, 2.125, 0.53125, 3.25, 14.5):
        vals = rng.uniform(-6 * c, 6 * c, BLOCK)
        vals[0] = 6 * c * 1.0
        vals[16] = -6 * c
        rows.append(bf(vals)[0])
    for amax in (2688.0, 2700.0, 1e5, 3.0e38):
        vals = rng.uniform(-amax, amax, BLOCK)
        vals[5] = amax
        vals[21] = -amax
        rows.append(bf(vals)[0])
    bmax = np.full(BLOCK, 0x7F7F, dtype=np.uint16)
    bmax[::2] = 0xFF7F
    rows.append(bmax)
    big = to_bf16_bits(rng.uniform(-3.3e38, 3.3e38, BLOCK))
    rows.append(big)
    cats["saturation"] = np.stack(rows)

    # mixed signs with -0 / +0 entries and entries so small relative to the amax that they
    # quantize to a signed zero
    rows = []
    for i in range(32):
        scale = 10.0 ** rng.uniform(-20, 20)
        vals = rng.standard_normal(BLOCK) * scale
        vals[rng.permutation(BLOCK)[:6]] *= 1e-6
        b = bf(vals)[0]
        b[rng.permutation(BLOCK)[:3]] = 0x8000
        b[rng.permutation(BLOCK)[:2]] = 0x0000
        rows.append(b)
    cats["mixed_signs_negzero"] = np.stack(rows)

    # random normal data at many scales, 1e-30 ... 1e30 (per block), and heavy-tailed blocks
    n = 300
    block_scale = 10.0 ** rng.uniform(-30, 30, size=(n, 1))
    vals = rng.standard_normal((n, BLOCK)) * block_scale
    vals[n // 2:] *= np.exp(rng.standard_normal((n - n // 2, BLOCK)) * 2)
    cats["random_normal_scales"] = bf(np.clip(vals, -3.3e38, 3.3e38))
    return cats


def qat_tables(kernel_cpu, rng: np.random.Generator) -> dict:
    arrays = {}
    total = 0
    for name, bits in qat_blocks(rng).items():
        total += bits.shape[0]
        x = bf16_tensor(bits)
        # FP8, power-of-two scales
        q, s = kernel_cpu.act_quant(x.clone(), BLOCK, "ue8m0")
        xi = x.clone()
        kernel_cpu.act_quant(xi, BLOCK, "ue8m0", torch.float8_e8m0fnu, inplace=True)
        recon = q.float() * s.float()
        assert torch.equal(recon.to(torch.bfloat16).float(), recon), name  # q*s is exact in bf16
        assert np.array_equal(bf16_bits(recon.to(torch.bfloat16)), bf16_bits(xi)), name
        arrays[f"qat/{name}/x"] = bits
        arrays[f"qat/{name}/fp8_codes"] = q.view(torch.uint8).numpy().copy()
        arrays[f"qat/{name}/fp8_scales"] = s.float().numpy().view(np.uint32).copy()
        # FP4, ue8m0 scales, block 32
        q4, s4 = kernel_cpu.fp4_act_quant(x.clone(), BLOCK, False)
        xi = x.clone()
        kernel_cpu.fp4_act_quant(xi, BLOCK, True)
        s4f = s4.float()
        recon = (kernel_cpu.unpack_fp4(q4) * s4f.repeat_interleave(BLOCK, dim=-1))
        assert torch.equal(recon.to(torch.bfloat16).float(), recon), name
        assert np.array_equal(bf16_bits(recon.to(torch.bfloat16)), bf16_bits(xi)), name
        arrays[f"qat/{name}/fp4_codes"] = q4.view(torch.uint8).numpy().copy()
        arrays[f"qat/{name}/fp4_scales"] = s4f.numpy().view(np.uint32).copy()
        # FP4, e4m3 scales, block 16
        q4e, s4e = kernel_cpu.fp4_act_quant(x.clone(), 16, False, scale_dtype=torch.float8_e4m3fn)
        xi = x.clone()
        kernel_cpu.fp4_act_quant(xi, 16, True, scale_dtype=torch.float8_e4m3fn)
        s4ef = s4e.float()
        recon = (kernel_cpu.unpack_fp4(q4e) * s4ef.repeat_interleave(16, dim=-1))
        assert torch.equal(recon.to(torch.bfloat16).float(), recon), name
        assert np.array_equal(bf16_bits(recon.to(torch.bfloat16)), bf16_bits(xi)), name
        arrays[f"qat/{name}/fp4e4m3_codes"] = q4e.view(torch.uint8).numpy().copy()
        arrays[f"qat/{name}/fp4e4m3_scales"] = s4ef.numpy().view(np.uint32).copy()
    print(f"qat: {total} blocks of {BLOCK}")
    return arrays


# ---- (6) weight dequantization -------------------------------------------------------------------

def dequant_tables(kernel_cpu, rng: np.random.Generator) -> dict:
    arrays = {}
    # FP8: a 40 x 64 matrix whose every full 32x32 block holds all 256 codes (4 times), and a ragged
    # 35 x 45 one with random codes; scales include 0 (2^-127: subnormal products), 1, 254
    # (products overflow to inf) and 255 (NaN).
    fp8 = {
        "all_codes": (np.tile(np.arange(1024, dtype=np.uint32).reshape(32, 32) % 256, (2, 2))[:40].astype(np.uint8),
                      np.array([[127, 0], [254, 120]], dtype=np.uint8)),
        "ragged": (rng.integers(0, 256, size=(35, 45), dtype=np.uint8),
                   np.array([[1, 140], [255, 133]], dtype=np.uint8)),
    }
    for name, (codes, scales) in fp8.items():
        n, k = codes.shape
        w = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).float()
        s = torch.from_numpy(scales.copy()).view(torch.float8_e8m0fnu).float()
        s_full = s.repeat_interleave(32, dim=0)[:n].repeat_interleave(32, dim=1)[:, :k]
        arrays[f"dequant/fp8/{name}/codes"] = codes
        arrays[f"dequant/fp8/{name}/scales"] = scales
        arrays[f"dequant/fp8/{name}/out"] = (w * s_full).numpy().view(np.uint32).copy()
    # FP4: every nibble (incl. 8 = -0) under scales 0, 1, 127, 254, 255 and random ones
    rows, k = 8, 96
    codes = np.resize(np.arange(16, dtype=np.uint8), (rows, k))
    codes[4:] = rng.integers(0, 16, size=(rows - 4, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = rng.integers(100, 150, size=(rows, k // 32), dtype=np.uint8)
    scales[0] = [0, 1, 127]
    scales[1] = [254, 253, 255]
    w = kernel_cpu.unpack_fp4(torch.from_numpy(packed.copy()).view(torch.float4_e2m1fn_x2))
    s = torch.from_numpy(scales.copy()).view(torch.float8_e8m0fnu).float().repeat_interleave(32, dim=1)
    arrays["dequant/fp4/mixed/packed"] = packed
    arrays["dequant/fp4/mixed/scales"] = scales
    arrays["dequant/fp4/mixed/out"] = (w * s).numpy().view(np.uint32).copy()
    return arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="directory holding the deepseek_v41 package")
    parser.add_argument("--out", default=str(REPO / "tests/data/core/numerics"))
    args = parser.parse_args()
    sys.path.insert(0, args.reference)
    from deepseek_v41 import kernel_cpu  # noqa: E402  (third-party reference, run only)

    torch.set_flush_denormal(False)
    out = pathlib.Path(args.out)
    rng = np.random.default_rng(20260401)
    write_tables(out / "bf16.bin", bf16_tables(rng))
    write_tables(out / "e4m3.bin", e4m3_tables(rng))
    write_tables(out / "ue8m0.bin", ue8m0_tables())
    write_tables(out / "e2m1.bin", e2m1_tables(kernel_cpu, rng))
    write_tables(out / "qat.bin", qat_tables(kernel_cpu, rng))
    write_tables(out / "dequant.bin", dequant_tables(kernel_cpu, rng))


if __name__ == "__main__":
    main()
