"""The released V4.1 quantizers as fake-quant with straight-through gradients.

The forward sees exactly the values the exported checkpoint and the inference kernels produce
(spec §2.2 for weights, §7.1 for activations and caches); the backward passes gradients straight
through every rounding. `export.py` stores the same codes and scales these functions compute, so
the exported FP8/FP4 model is the model that was trained.
"""

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0
_E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
# Midpoints between consecutive e2m1 magnitudes; at an exact midpoint round-to-nearest-even goes
# up only where the upper code is even (0.75 -> 1, 1.75 -> 2, 3.5 -> 4).
_E2M1_MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
_E2M1_TIE_GOES_UP = torch.tensor([False, True, False, True, False, True, False, False])


class Precision:
    """Whether the fake-quantizers and bf16 roundings run (the QAT model) or pass values through
    unchanged (the fp32 master model), for evaluating what the export costs."""

    quantize = True

    def __init__(self, quantize):
        self.value, self.saved = quantize, None

    def __enter__(self):
        self.saved, Precision.quantize = Precision.quantize, self.value

    def __exit__(self, *exc):
        Precision.quantize = self.saved


def straight_through(fn):
    """fn as a fake-quantizer: its values forward, gradients passed straight through."""

    def apply(x, *args, **kwargs):
        if not Precision.quantize:
            return x
        # fn runs on a detached input, so it records no graph; the one add carries the gradient.
        with torch.no_grad():
            delta = fn(x.detach(), *args, **kwargs) - x.detach()
        return x + delta

    apply.__doc__ = fn.__doc__
    return apply


def _round_bf16(x):
    return x.to(torch.bfloat16).float()


round_bf16 = straight_through(_round_bf16)


def pow2_scale(amax, qmax):
    """2^ceil(log2(amax * fp32(1/qmax))): the power-of-two (ue8m0) scale of the kernels."""
    t = amax * torch.tensor(1.0 / qmax, dtype=torch.float32)
    mantissa, exponent = torch.frexp(t)  # t = mantissa * 2^exponent, mantissa in [0.5, 1)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.ldexp(torch.ones_like(t), exponent)


def e4m3(x):
    """fp32 -> nearest float8 e4m3 value (round to nearest even, saturating at +-448), as fp32."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()


def e2m1_codes(v):
    """fp32 in [-6, 6] -> 4-bit e2m1 codes (bit 3 = sign), round to nearest even."""
    mag = v.abs()
    code = torch.bucketize(mag, _E2M1_MIDPOINTS)  # midpoints strictly below mag
    at_tie = (code < 7) & (mag == _E2M1_MIDPOINTS[code.clamp(max=6)])
    code = code + (at_tie & _E2M1_TIE_GOES_UP[code]).to(code.dtype)
    return code.to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_round(v):
    """fp32 in [-6, 6] -> nearest e2m1 value, round to nearest even (sign of zero kept). The grid
    has step 0.5 below 2, 1 below 4 and 2 above, and an even code is an even multiple of the
    step, so rounding |v| / step half-to-even is e2m1's rule; equal to e2m1_values(e2m1_codes(v))."""
    mag = v.abs()
    step = torch.where(mag < 2, 0.5, torch.where(mag < 4, 1.0, 2.0))
    return torch.copysign(torch.round(mag / step) * step, v)


def e2m1_values(codes):
    mag = _E2M1_VALUES[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def _blocks(x, block):
    return x.unflatten(-1, (-1, block))


def _fp8_act_qdq(x, block=32):
    """act_quant(x, block, ue8m0) in QDQ mode on a bf16 activation."""
    xb = x.to(torch.bfloat16).float()
    g = _blocks(xb, block)
    s = pow2_scale(g.abs().amax(-1, keepdim=True).clamp_min(1e-4), FP8_MAX)
    return (e4m3(g / s) * s).flatten(-2)


def _fp4_qdq(x, block, e4m3_scale=False):
    """fp4_act_quant in QDQ mode: ue8m0 scales (indexer q/k, block 32) or e4m3 scales (compressed
    KV, block 16)."""
    xb = x.to(torch.bfloat16).float()
    g = _blocks(xb, block)
    amax = g.abs().amax(-1, keepdim=True)
    if e4m3_scale:
        s = e4m3(amax.clamp_min(6 * 2**-9) / FP4_MAX)
    else:
        s = pow2_scale(amax.clamp_min(6 * 2**-126), FP4_MAX)
    q = e2m1_round((g / s).clamp(-FP4_MAX, FP4_MAX)) * s
    return q.flatten(-2)


# -- weights ---------------------------------------------------------------------------------------
def fp8_weight(w):
    """(codes fp32 [out, in], scales fp32 [ceil(out/32), ceil(in/32)]): e4m3 codes with one ue8m0
    scale per 32x32 block, the released FP8 layout."""
    rows, cols = w.shape
    br, bc = -(-rows // 32), -(-cols // 32)
    padded = torch.zeros(br * 32, bc * 32, dtype=torch.float32)
    padded[:rows, :cols] = w.detach().float()
    amax = padded.view(br, 32, bc, 32).abs().amax(dim=(1, 3))
    scale = pow2_scale(amax.clamp_min(2**-100), FP8_MAX)
    full = scale.repeat_interleave(32, 0).repeat_interleave(32, 1)[:rows, :cols]
    return e4m3(w.detach().float() / full), scale


def _fp8_weight_qdq(w):
    codes, scale = fp8_weight(w)
    return codes * scale.repeat_interleave(32, 0).repeat_interleave(32, 1)[: w.shape[0], : w.shape[1]]


def fp4_weight(w):
    """(codes uint8 [out, in], scales fp32 [out, in/32]): e2m1 codes with one ue8m0 scale per row
    per 32 input elements, the released FP4 expert layout (from the bf16 weight)."""
    g = _blocks(w.detach().to(torch.bfloat16).float(), 32)
    scale = pow2_scale(g.abs().amax(-1, keepdim=True).clamp_min(6 * 2**-126), FP4_MAX)
    codes = e2m1_codes((g / scale).clamp(-FP4_MAX, FP4_MAX))
    return codes.flatten(-2), scale.squeeze(-1)


def fp4_weight_qdq(w):
    return fp4_qdq(w, 32)  # the same quantizer as fp4_weight, from the bf16 weight


def fp8_rows(table):
    """(codes, scales [rows, cols/32]): the Engram table layout, one ue8m0 scale per row per 32."""
    g = _blocks(table.detach().float(), 32)
    scale = pow2_scale(g.abs().amax(-1, keepdim=True).clamp_min(2**-100), FP8_MAX)
    return e4m3(g / scale).flatten(-2), scale.squeeze(-1)


def _fp8_rows_qdq(table):
    codes, scale = fp8_rows(table)
    return (_blocks(codes, 32) * scale.unsqueeze(-1)).flatten(-2)


fp8_act_qdq = straight_through(_fp8_act_qdq)
fp4_qdq = straight_through(_fp4_qdq)
fp8_weight_qdq = straight_through(_fp8_weight_qdq)
fp8_rows_qdq = straight_through(_fp8_rows_qdq)
