"""DeepSeek-V4.1 for training: fp32 master weights, the released FP8/FP4 fake-quant in the forward.

Written from the spec (shared/docs/dsv41-architecture.md), not from the reference code: the
reference is inference-only, and its kernels are not differentiable. The forward is the
reference's full-sequence prefill (start_pos 0): the same ops, casts and quantizers in the same
order (§3, §7), computed in fp32 with bf16 roundings at the reference's cast points. Rounding and
quantizing ops pass gradients straight through (quant.ste).

What training adds, and inference never sees:
  * the indexer learns from a KL loss against its layer's attention over the compressed entries
    (DeepSeek-V3.2's lightning-indexer recipe), on detached inputs: top-k selection itself has no
    gradient, and the main model is not pulled towards the indexer;
  * the MoE selection bias is adjusted after each step towards balanced expert load (the
    auxiliary-loss-free `noaux_tc` rule); it is a buffer-like parameter, not trained by gradients.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from quant import fp4_qdq, fp4_weight_qdq, fp8_act_qdq, fp8_rows_qdq, fp8_weight_qdq, round_bf16


# -- linears (dtype on disk -> how the reference computes with it) ---------------------------------
class Linear(nn.Module):
    """kind: fp8 (e4m3 32x32 blocks, FP8 activation quant), fp4 (packed experts, FP8 activation
    quant), bf16 (bf16 GEMM), fp32 (bf16 on disk, fp32 math). Outputs bf16 unless fp32."""

    def __init__(self, in_features, out_features, kind, std=None):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * (std or in_features**-0.5))

    def quantized_weight(self):
        if self.kind == "fp8":
            return fp8_weight_qdq(self.weight)
        if self.kind == "fp4":
            return fp4_weight_qdq(self.weight)
        return round_bf16(self.weight)

    def forward(self, x, x_quantized=None):
        """x_quantized: fp8_act_qdq(x) when the caller already has it (it is per row, so one
        quantization serves every linear that reads the same x)."""
        w = self.quantized_weight()
        if self.kind in ("fp8", "fp4"):
            return round_bf16(F.linear(fp8_act_qdq(x) if x_quantized is None else x_quantized, w))
        if self.kind == "bf16":
            return round_bf16(F.linear(round_bf16(x), w))
        return F.linear(x, w)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return round_bf16(round_bf16(self.weight) * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)))


# -- rope ------------------------------------------------------------------------------------------
def rope_table(cfg, compressed, max_len):
    """(cos, sin) [max_len, rd/2]: base rope_theta for ratio-0 layers, compress_rope_theta with YaRN
    for compressed ones (§3.5)."""
    rd = cfg["rope_head_dim"]
    base = cfg["compress_rope_theta"] if compressed else cfg["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    original = cfg["original_seq_len"] if compressed else 0
    if original > 0:
        def corr(rotations):
            return rd * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(corr(cfg["beta_fast"])), 0), min(math.ceil(corr(cfg["beta_slow"])), rd - 1)
        ramp = ((torch.arange(rd // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        freqs = freqs / cfg["rope_factor"] * ramp + freqs * (1 - ramp)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)
    return torch.cos(angles), torch.sin(angles)


def rope_tail(x, table, positions, rd, inverse=False):
    """Rotate the trailing rd dims of x (adjacent pairs as complex numbers) by each row's position;
    x is [B, S, (H,) D] with positions [S] or [B, S]. Computed in fp32, rounded to bf16 as the
    reference writes it back into its bf16 tensor."""
    cos, sin = table[0][positions], table[1][positions]
    if x.dim() == 4:
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if inverse:
        sin = -sin
    head, tail = x[..., :-rd], x[..., -rd:]
    re, im = tail[..., 0::2], tail[..., 1::2]
    rotated = torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(-2)
    return torch.cat([head, round_bf16(rotated)], dim=-1)


# -- mHC -------------------------------------------------------------------------------------------
class HyperSite(nn.Module):
    """One mHC site: the pre / post / comb mixes computed from the stream (§3.4)."""

    def __init__(self, cfg):
        super().__init__()
        hc, d = cfg["hc_mult"], cfg["dim"]
        self.hc, self.iters, self.hc_eps, self.eps = hc, cfg["hc_sinkhorn_iters"], cfg["hc_eps"], cfg["norm_eps"]
        self.fn = nn.Parameter(torch.randn((2 + hc) * hc, hc * d) * 0.02 / math.sqrt(hc * d))
        base = torch.zeros((2 + hc) * hc)
        base[:hc] = math.log(1 / (hc - 1))  # pre = sigmoid(base) = 1/hc: the collapse starts as a mean
        base[2 * hc:] = (torch.eye(hc) * 4.0).flatten()  # comb starts near the identity
        self.base = nn.Parameter(base)
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        hc = self.hc
        flat = x.flatten(2)
        mixes = F.linear(flat, self.fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.eps)
        pre = torch.sigmoid(mixes[..., :hc] * self.scale[0] + self.base[:hc]) + self.hc_eps
        post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * self.scale[1] + self.base[hc:2 * hc])
        comb = (mixes[..., 2 * hc:] * self.scale[2] + self.base[2 * hc:]).unflatten(-1, (hc, hc))
        comb = torch.softmax(comb, dim=-1) + self.hc_eps
        comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + self.hc_eps)
            comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        return pre, post, comb


def hc_pre(x, pre):
    """sum_i pre[i] x[i], in fp32, cast to bf16."""
    return round_bf16(torch.einsum("bsi,bsid->bsd", pre, x))


def hc_post(y, residual, post, comb):
    """x'[j] = post[j] y + sum_i comb[i][j] residual[i] (comb applied transposed), cast to bf16."""
    return round_bf16(post.unsqueeze(-1) * y.unsqueeze(-2) + torch.einsum("bsij,bsid->bsjd", comb, residual))


# -- attention -------------------------------------------------------------------------------------
class Shared:
    """What sources publish to the layers after them in one forward (the reference's shared_attn)."""

    def __init__(self):
        self.compress_kv = None  # [B, T, Dh] RoPE'd FP4-QDQ'd entries of the latest KV source
        self.index_k = None  # [B, T, Di] of the latest KV source
        self.selected = None  # [B, S, T] bool: the latest index source's top-k
        self.candidates = None  # [B, S, T] bool: the candidate source's blocks
        self.indexer_losses = []


class Compressor(nn.Module):
    def __init__(self, cfg, ratio):
        super().__init__()
        d, dh = cfg["dim"], cfg["head_dim"]
        self.ratio = ratio
        self.wkv = Linear(d, dh, "bf16" if ratio == 1 else "fp32")
        if ratio > 1:
            self.wgate = Linear(d, dh, "fp32")
        self.norm = RMSNorm(dh, cfg["norm_eps"])

    def forward(self, x):
        """Pre-RoPE latents of every complete group: [B, S // ratio, Dh]."""
        if self.ratio == 1:
            return self.norm(self.wkv(x))
        b, s, _ = x.shape
        t = s // self.ratio
        kv = self.wkv(x)[:, : t * self.ratio].unflatten(1, (t, self.ratio))
        score = self.wgate(x)[:, : t * self.ratio].unflatten(1, (t, self.ratio))
        return self.norm(round_bf16((kv * score.softmax(dim=2)).sum(2)))


class Indexer(nn.Module):
    def __init__(self, cfg, layer_id):
        super().__init__()
        hi, di = cfg["index_n_heads"], cfg["index_head_dim"]
        self.hi, self.di, self.rd = hi, di, cfg["rope_head_dim"]
        self.owns_k = layer_id in cfg["kv_source_layers"]
        self.is_candidate_source = layer_id == cfg["candidate_source_layer"]
        self.uses_candidates = 0 <= cfg["candidate_source_layer"] < layer_id
        self.topk, self.blocks, self.block = cfg["index_topk"], cfg["candidate_topk_blocks"], cfg["candidate_block_size"]
        self.wq_b = Linear(cfg["q_lora_rank"], hi * di, "fp8")
        self.weights_proj = Linear(cfg["dim"], hi, "bf16")
        if self.owns_k:
            self.wk = Linear(cfg["head_dim"], di, "bf16")
            self.k_norm = RMSNorm(di, cfg["norm_eps"])

    def keys(self, latent, table, ratio):
        k = self.k_norm(self.wk(latent.detach()))
        k = rope_tail(k, table, torch.arange(k.shape[1]) * ratio, self.rd)
        return fp4_qdq(k, 32)

    def scores(self, x, qr, index_k, table, visible):
        """Index scores [B, S, T] (fp32, -inf where not visible). Inputs are detached: the indexer
        trains on its own loss only."""
        b, s, _ = x.shape
        q = self.wq_b(qr.detach()).unflatten(-1, (self.hi, self.di))
        q = fp4_qdq(rope_tail(q, table, torch.arange(s), self.rd), 32)
        w = self.weights_proj(x.detach()) * (self.di**-0.5 * self.hi**-0.5)
        score = (torch.einsum("bshd,btd->bsht", q, index_k).relu() * w.unsqueeze(-1)).sum(2)
        return score.masked_fill(~visible, -torch.inf)

    def candidate_blocks(self, score, visible_count):
        """Level one of the two-level top-k (§3.5 select_candidate_blocks), as a [B, S, T] mask."""
        t = score.shape[-1]
        padded = F.pad(score, (0, -t % self.block), value=-torch.inf)
        blocks = padded.unflatten(-1, (-1, self.block)).amax(-1)
        last = (visible_count - 1).div(self.block, rounding_mode="floor")
        blocks = blocks.masked_fill(torch.arange(blocks.shape[-1]) == last.view(1, -1, 1), torch.inf)
        top = blocks.topk(min(self.blocks, blocks.shape[-1]), dim=-1)
        keep = torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, top.indices, top.values > -torch.inf)
        return keep.repeat_interleave(self.block, dim=-1)[..., :t]

    def select(self, score):
        k = min(self.topk, score.shape[-1])
        top = score.topk(k, dim=-1)
        return torch.zeros_like(score, dtype=torch.bool).scatter_(-1, top.indices, top.values > -torch.inf)


class Attention(nn.Module):
    def __init__(self, cfg, layer_id, tables):
        super().__init__()
        d, h, dh = cfg["dim"], cfg["n_heads"], cfg["head_dim"]
        self.h, self.dh, self.rd, self.window = h, dh, cfg["rope_head_dim"], cfg["window_size"]
        self.groups, self.o_rank = cfg["o_groups"], cfg["o_lora_rank"]
        self.ratio = cfg["compress_ratios"][layer_id]
        self.is_kv_source = layer_id in cfg["kv_source_layers"]
        self.is_index_source = layer_id in cfg["index_source_layers"]
        self.table = tables[self.ratio > 0]
        self.wq_a = Linear(d, cfg["q_lora_rank"], "fp8")
        self.q_norm = RMSNorm(cfg["q_lora_rank"], cfg["norm_eps"])
        self.wq_b = Linear(cfg["q_lora_rank"], h * dh, "fp8")
        self.wkv = Linear(d, dh, "fp8")
        self.kv_norm = RMSNorm(dh, cfg["norm_eps"])
        # FP8 on disk, dequantized to bf16 by convert.py: a bf16 x bf16 einsum, no act quant.
        self.wo_a = nn.Parameter(torch.randn(self.groups * self.o_rank, h * dh // self.groups) * (h * dh // self.groups) ** -0.5)
        self.wo_b = Linear(self.groups * self.o_rank, d, "fp8", std=(self.groups * self.o_rank) ** -0.5 / math.sqrt(2 * cfg["n_layers"]))
        self.attn_sink = nn.Parameter(torch.zeros(h))
        self.compressor = Compressor(cfg, self.ratio) if self.is_kv_source else None
        self.indexer = Indexer(cfg, layer_id) if self.is_index_source else None

    def forward(self, x, shared):
        b, s, _ = x.shape
        pos = torch.arange(s)
        xq = fp8_act_qdq(x)
        qr = self.q_norm(self.wq_a(x, xq))
        q = rope_tail(self.wq_b(qr).unflatten(-1, (self.h, self.dh)), self.table, pos, self.rd)
        kv = fp8_act_qdq(rope_tail(self.kv_norm(self.wkv(x, xq)), self.table, pos, self.rd), 32)

        scale = self.dh**-0.5
        logits = [torch.einsum("bshd,btd->bhst", q, kv) * scale]
        offset = pos.view(-1, 1) - pos.view(1, -1)
        masks = [((offset >= 0) & (offset < self.window)).expand(b, 1, s, s)]
        values = [kv]
        compressed_logits = None
        if self.ratio:
            r = self.ratio
            visible = torch.arange(s // r).view(1, -1) < ((pos + 1) // r).view(-1, 1)  # [S, T]
            if self.is_kv_source:
                latent = self.compressor(x)
                if self.indexer is not None:
                    shared.index_k = self.indexer.keys(latent, self.table, r)
                entries = rope_tail(latent, self.table, torch.arange(latent.shape[1]) * r, self.rd)
                shared.compress_kv = fp4_qdq(entries, 16, e4m3_scale=True)
            ckv = shared.compress_kv
            if self.is_index_source:
                score = self.indexer.scores(x, qr, shared.index_k, self.table, visible.expand(b, s, -1))
                visible_count = (pos + 1) // r
                if self.indexer.is_candidate_source:
                    shared.candidates = self.indexer.candidate_blocks(score.detach(), visible_count)
                    chosen = score
                elif self.indexer.uses_candidates:
                    chosen = score.masked_fill(~shared.candidates, -torch.inf)
                else:
                    chosen = score
                shared.selected = self.indexer.select(chosen.detach())
            compressed_logits = torch.einsum("bshd,btd->bhst", q, ckv) * scale
            logits.append(compressed_logits)
            masks.append(shared.selected.unsqueeze(1))
            values.append(ckv)
            if self.is_index_source:
                self.indexer_loss(score, compressed_logits.detach(), visible, shared)

        all_logits = torch.cat(logits, dim=-1).masked_fill(~torch.cat(masks, dim=-1), -torch.inf)
        sink = self.attn_sink.view(1, -1, 1, 1).expand(b, -1, s, 1)
        probs = torch.softmax(torch.cat([all_logits, sink], dim=-1), dim=-1)[..., :-1]
        o = torch.einsum("bhst,btd->bshd", probs, torch.cat(values, dim=1))
        o = rope_tail(round_bf16(o), self.table, pos, self.rd, inverse=True)
        wo_a = fp8_weight_qdq(self.wo_a).view(self.groups, self.o_rank, -1)
        o = round_bf16(torch.einsum("bsgd,grd->bsgr", o.reshape(b, s, self.groups, -1), wo_a))
        return self.wo_b(o.flatten(2))

    def indexer_loss(self, score, compressed_logits, visible, shared):
        """KL(attention over the visible compressed entries, summed over heads || softmax(score))."""
        has_any = visible.any(-1)  # queries that see at least one entry
        if not has_any.any():
            return
        target = torch.softmax(compressed_logits.masked_fill(~visible, -torch.inf), dim=-1)  # [B,H,S,T]
        target = target.nan_to_num(0.0).mean(1)[:, has_any]
        logp = torch.log_softmax(score[:, has_any], dim=-1)
        kl = (target * (torch.log(target.clamp_min(1e-12)) - logp.masked_fill(target == 0, 0.0))).sum(-1)
        shared.indexer_losses.append(kl.mean())


# -- MoE -------------------------------------------------------------------------------------------
class Expert(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        d, inter = cfg["dim"], cfg["moe_inter_dim"]
        self.limit = cfg["swiglu_limit"]
        self.w1 = Linear(d, inter, kind)
        self.w3 = Linear(d, inter, kind)
        self.w2 = Linear(inter, d, kind, std=inter**-0.5 / math.sqrt(2 * cfg["n_layers"]))

    def forward(self, x, weight=None, x_quantized=None):
        gate, up = self.w1(x, x_quantized), self.w3(x, x_quantized)
        if self.limit > 0:
            up, gate = up.clamp(-self.limit, self.limit), gate.clamp(max=self.limit)
        h = F.silu(gate) * up
        if weight is not None:
            h = weight * h
        return self.w2(round_bf16(h))


class MoE(nn.Module):
    def __init__(self, cfg, n_experts, top_k):
        super().__init__()
        self.top_k, self.route_scale = top_k, cfg["route_scale"]
        if cfg["score_func"] != "sqrtsoftplus":
            raise SystemExit(f"score_func {cfg['score_func']!r} is not implemented here")
        self.gate = nn.Parameter(torch.randn(n_experts, cfg["dim"]) * cfg["dim"] ** -0.5)
        self.register_buffer("bias", torch.zeros(n_experts))
        self.experts = nn.ModuleList(Expert(cfg, "fp4") for _ in range(n_experts))
        self.shared = Expert(cfg, "fp8")
        self.load = None  # tokens per expert in the last forward, for the bias update

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores = F.softplus(F.linear(x, round_bf16(self.gate))).sqrt()
        idx = (scores + self.bias).topk(self.top_k, dim=-1).indices
        w = scores.gather(1, idx)
        if self.top_k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * self.route_scale
        y = torch.zeros_like(x)
        xq = fp8_act_qdq(x)
        self.load = torch.bincount(idx.flatten(), minlength=len(self.experts)).float()
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(idx == e)
            if tok.numel():
                y = y.index_add(0, tok, expert(x[tok], w[tok, slot, None], xq[tok]))
        y = y + self.shared(x, x_quantized=xq)
        return round_bf16(y).view(shape)

    @torch.no_grad()
    def update_bias(self, rate):
        if self.load is not None:
            self.bias += rate * torch.sign(self.load.mean() - self.load)


# -- Engram ----------------------------------------------------------------------------------------
def next_prime(n, used):
    from sympy import isprime

    n += 1
    while not isprime(n) or n in used:
        n += 1
    return n


def engram_primes(cfg):
    """[layer][ngram][head] bucket moduli: fresh primes above engram_vocab_size - 1 (§3.3)."""
    used, out = set(), []
    for _ in cfg["engram_layer_ids"]:
        per_layer = []
        for _ in range(cfg["engram_max_ngram_size"] - 1):
            current, heads = cfg["engram_vocab_size"] - 1, []
            for _ in range(cfg["engram_n_heads"]):
                current = next_prime(current, used)
                used.add(current)
                heads.append(current)
            per_layer.append(heads)
        out.append(per_layer)
    return out


def compressed_token_map(tokenizer):
    """(token id -> compressed id, count): tokens that normalize alike share an id (§3.3)."""
    from tokenizers import Regex, normalizers

    sentinel = "\ue000"
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), sentinel),
        normalizers.Strip(), normalizers.Replace(sentinel, " "),
    ])
    keys, lookup = {}, []
    for i in range(tokenizer.get_vocab_size(with_added_tokens=True)):
        text = tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tokenizer.id_to_token(i)
        else:
            key = norm.normalize_str(text) or text
        lookup.append(keys.setdefault(key, len(keys)))
    return lookup, len(keys)


class EngramHasher:
    """Token ids [B, S] -> hash row ids [B, S, n_layers, (max_ngram-1)*heads] (§3.3, step 5)."""

    def __init__(self, cfg, tokenizer):
        self.token_map, count = compressed_token_map(tokenizer)
        if count != cfg["engram_compressed_vocab_size"]:
            raise SystemExit(f"engram_compressed_vocab_size is {cfg['engram_compressed_vocab_size']}, the tokenizer gives {count}")
        self.token_map = torch.tensor(self.token_map, dtype=torch.int64)
        self.pad = int(self.token_map[cfg["engram_pad_id"]])
        self.n = cfg["engram_max_ngram_size"]
        primes = engram_primes(cfg)
        self.primes = torch.tensor(primes, dtype=torch.int64)  # [L, n-1, heads]
        flat = [[p for per in layer for p in per] for layer in primes]
        self.offsets = torch.tensor([np.cumsum([0] + f[:-1]).tolist() for f in flat], dtype=torch.int64)
        bound = max(1, (np.iinfo(np.int64).max // count) // 2)
        mults = [np.random.default_rng(10007 * layer).integers(0, bound, size=self.n, dtype=np.int64) * 2 + 1
                 for layer in cfg["engram_layer_ids"]]
        self.mults = torch.tensor(np.stack(mults), dtype=torch.int64)  # [L, n]
        self.rows = [sum(sum(per) for per in layer) for layer in primes]

    def __call__(self, ids):
        cids = self.token_map[ids.long()]
        b, s = cids.shape
        toks = []
        for shift in range(self.n):
            shifted = F.pad(cids, (shift, 0), value=self.pad)[:, :s]
            toks.append(shifted)
        toks = torch.stack(toks, -1)  # [B, S, n]
        prod = toks.unsqueeze(2) * self.mults  # [B, S, L, n]
        roll, out = prod[..., 0], []
        for i in range(1, self.n):
            roll = torch.bitwise_xor(roll, prod[..., i])
            out.append(roll.unsqueeze(-1) % self.primes[:, i - 1])
        return torch.cat(out, -1) + self.offsets


class Engram(nn.Module):
    def __init__(self, cfg, rows):
        super().__init__()
        hc, d = cfg["hc_mult"], cfg["dim"]
        cols = (cfg["engram_max_ngram_size"] - 1) * cfg["engram_n_heads"]
        self.hc, self.d, self.eps = hc, d, cfg["norm_eps"]
        self.embed = nn.Parameter(torch.randn(rows, cfg["engram_head_dim"]))
        self.wkv = Linear(cols * cfg["engram_head_dim"], d * (hc + 1), "fp8", std=(cols * cfg["engram_head_dim"]) ** -0.5 * 0.5)
        self.q_weight = nn.Parameter(torch.ones(hc, d))
        self.k_weight = nn.Parameter(torch.ones(hc, d))

    def forward(self, x, hash_ids):
        rows = round_bf16(F.embedding(hash_ids, fp8_rows_qdq(self.embed)))
        kv = self.wkv(rows.flatten(-2))
        key, value = kv.split([self.hc * self.d, self.d], dim=-1)
        key = key.unflatten(-1, (self.hc, self.d))
        w = round_bf16(self.q_weight) * round_bf16(self.k_weight)
        rstd = torch.rsqrt(x.square().mean(-1) + self.eps) * torch.rsqrt(key.square().mean(-1) + self.eps)
        dot = (x * w * key).sum(-1) * rstd * self.d**-0.5
        gate = torch.sigmoid(torch.sign(dot) * dot.abs().clamp_min(1e-6).sqrt())
        return round_bf16(x + gate.unsqueeze(-1) * value.unsqueeze(-2))


# -- the backbone ----------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, cfg, layer_id, tables, engram_rows=None, n_experts=None, top_k=None, attention=Attention):
        super().__init__()
        self.attn = attention(cfg, layer_id, tables)
        self.ffn = MoE(cfg, n_experts or cfg["n_routed_experts"], top_k or cfg["n_activated_experts"])
        self.attn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.ffn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.hc_attn = HyperSite(cfg)
        self.hc_ffn = HyperSite(cfg)
        self.engram = Engram(cfg, engram_rows) if engram_rows else None

    def forward(self, x, pre_mix, context):
        """The spec's Block.forward: each site's pre collapses the NEXT site's input (§3.4).
        `context` is what the attention reads besides x (Shared for the backbone)."""
        a_pre, a_post, a_comb = self.hc_attn(x)
        y = self.attn(self.attn_norm(hc_pre(x, pre_mix)), context)
        mid = hc_post(y, x, a_post, a_comb)
        f_pre, f_post, f_comb = self.hc_ffn(mid)
        z = self.ffn(self.ffn_norm(hc_pre(mid, a_pre)))
        return hc_post(z, mid, f_post, f_comb), f_pre


class Transformer(nn.Module):
    def __init__(self, cfg, hasher=None, max_len=4096):
        super().__init__()
        self.cfg = cfg
        d, v = cfg["dim"], cfg["vocab_size"]
        tables = {False: rope_table(cfg, False, max_len), True: rope_table(cfg, True, max_len)}
        self.hasher = hasher
        rows = dict(zip(cfg["engram_layer_ids"], hasher.rows)) if hasher else {}
        self.embed = nn.Parameter(torch.randn(v, d))
        self.layers = nn.ModuleList(Block(cfg, i, tables, rows.get(i)) for i in range(cfg["n_layers"]))
        self.norm = RMSNorm(d, cfg["norm_eps"])
        self.head = nn.Parameter(torch.randn(v, d) * d**-0.5)

    def forward(self, ids, return_taps=False):
        """fp32 logits [B, S, V] of every position (and the DSpark taps: the attention-block inputs
        of the target layers, averaged over the hc copies), plus the indexer losses."""
        cfg = self.cfg
        hashes = self.hasher(ids) if self.hasher else None
        h = round_bf16(F.embedding(ids.long(), self.embed))
        h = h.unsqueeze(2).expand(-1, -1, cfg["hc_mult"], -1)
        pre_mix = torch.zeros(h.shape[:3])
        pre_mix[..., 0] = 1.0
        shared, taps, engram_index = Shared(), [], 0
        for i, layer in enumerate(self.layers):
            if layer.engram is not None:
                h = layer.engram(h, hashes[:, :, engram_index])
                engram_index += 1
            if i in cfg.get("dspark_target_layer_ids", ()):
                taps.append(round_bf16(h.mean(2)))
            h, pre_mix = layer(h, pre_mix, shared)
        h = hc_pre(h, pre_mix)
        logits = F.linear(self.norm(h), round_bf16(self.head))
        return logits, (torch.cat(taps, -1) if return_taps else None), shared.indexer_losses

    def moe_layers(self):
        return [layer.ffn for layer in self.layers]
