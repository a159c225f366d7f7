"""A plain PyTorch reference of the DeepSeek-V2/V3 architecture (MLA attention + MoE), with
Hugging Face weight names, so a checkpoint's tensors load with `load_state_dict` unchanged.

Attention is the non-absorbed form over the whole sequence (no KV cache): every call recomputes
all positions from 0. It is the yardstick the C++ engine's fixtures are computed with, and the
model the bundled checkpoint is trained with.
"""

import dataclasses
import math
import re

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class ModelConfig:
    """The config.json fields the forward pass depends on (HF names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    moe_intermediate_size: int = 0
    n_routed_experts: int | None = None
    n_shared_experts: int | None = None
    num_experts_per_tok: int = 1
    n_group: int = 1
    topk_group: int = 1
    topk_method: str = "greedy"
    scoring_func: str = "softmax"
    norm_topk_prob: bool = False
    routed_scaling_factor: float = 1.0
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    rope_interleave: bool = True
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    model_type: str = "deepseek_v3"
    num_nextn_predict_layers: int = 0

    @classmethod
    def from_dict(cls, config):
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in config.items() if key in names})

    @property
    def is_v3_routing(self):
        """DeepSeek-V3 (and Kimi-K2) always apply routed_scaling_factor; V2 only when not
        normalizing the top-k weights."""
        return self.model_type != "deepseek_v2"

    def is_moe_layer(self, layer_idx):
        return bool(self.n_routed_experts) and layer_idx >= self.first_k_dense_replace and (
            layer_idx % self.moe_layer_freq == 0
        )


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # x: [..., dim]
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


# ---- rotary embedding with DeepSeek's yarn -----------------------------------------------------


def yarn_get_mscale(scale, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(num_rotations, dim, base, original_max_positions):
    """The rotary dim index whose wavelength fits `num_rotations` times in the original context."""
    return (dim * math.log(original_max_positions / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def rope_inv_freq(config):
    """Returns (inv_freq [rope_dim/2] in radians per position, cos/sin magnitude multiplier)."""
    dim = config.qk_rope_head_dim
    base = config.rope_theta
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim  # [dim/2]
    freq_extrapolation = 1.0 / (base**exponents)
    scaling = config.rope_scaling
    if not scaling:
        return freq_extrapolation, 1.0
    kind = scaling.get("type", scaling.get("rope_type"))
    if kind != "yarn":
        raise NotImplementedError(f"rope_scaling type {kind!r}")

    factor = scaling["factor"]
    original_max_positions = scaling["original_max_position_embeddings"]
    beta_fast = scaling.get("beta_fast", 32)
    beta_slow = scaling.get("beta_slow", 1)
    mscale = scaling.get("mscale", 1)
    mscale_all_dim = scaling.get("mscale_all_dim", 0)

    freq_interpolation = 1.0 / (factor * base**exponents)
    low = math.floor(_yarn_correction_dim(beta_fast, dim, base, original_max_positions))
    high = math.ceil(_yarn_correction_dim(beta_slow, dim, base, original_max_positions))
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # [dim/2]
    extrapolation_weight = 1.0 - ramp  # 1 for high-frequency dims (kept), 0 for low (interpolated)
    inv_freq = freq_interpolation * (1 - extrapolation_weight) + freq_extrapolation * extrapolation_weight
    magnitude = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    return inv_freq, magnitude


def softmax_scale(config):
    scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    scaling = config.rope_scaling
    if scaling and scaling.get("mscale_all_dim"):
        scale *= yarn_get_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    return scale


def rope_cos_sin(config, seq_len):
    """cos, sin: [seq, rope_dim/2] for positions 0..seq_len-1 (fp32)."""
    inv_freq, magnitude = rope_inv_freq(config)
    positions = torch.arange(seq_len, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)  # [seq, rope_dim/2]
    return angles.cos() * magnitude, angles.sin() * magnitude


def apply_rope(x, cos, sin, interleave):
    """Rotates x: [batch, seq, heads, rope_dim] by cos/sin: [seq, rope_dim/2].

    interleave=True: pair i is dims (2i, 2i+1) (the stored layout with rope_interleave; equals
    DeepSeek's de-interleave + rotate_half up to a permutation that q and k share, so scores match).
    interleave=False: pair i is dims (i, i + rope_dim/2) (rotate_half).
    """
    cos = cos[None, :, None, :]  # [1, seq, 1, rope_dim/2]
    sin = sin[None, :, None, :]
    if interleave:
        x_even, x_odd = x[..., 0::2], x[..., 1::2]  # [batch, seq, heads, rope_dim/2] each
        rotated_even = x_even * cos - x_odd * sin
        rotated_odd = x_odd * cos + x_even * sin
        return torch.stack((rotated_even, rotated_odd), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    x_first, x_second = x[..., :half], x[..., half:]
    return torch.cat((x_first * cos - x_second * sin, x_second * cos + x_first * sin), dim=-1)


# ---- attention ---------------------------------------------------------------------------------


class MLAttention(nn.Module):
    """Multi-head latent attention, non-absorbed: kv_b_proj expands the latent to per-head keys
    and values, then ordinary causal multi-head attention runs over the whole sequence."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.nope_dim = config.qk_nope_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        q_head_dim = self.nope_dim + self.rope_dim
        hidden = config.hidden_size
        if config.q_lora_rank is None:
            self.q_proj = nn.Linear(hidden, self.num_heads * q_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, self.num_heads * q_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, config.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(config.kv_lora_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(config.kv_lora_rank, self.num_heads * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, hidden, bias=False)
        self.scale = softmax_scale(config)

    def forward(self, x, cos, sin):  # x: [batch, seq, hidden]
        batch, seq, _ = x.shape
        cfg = self.config
        if cfg.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(batch, seq, self.num_heads, self.nope_dim + self.rope_dim)  # [b, s, heads, nope+rope]
        q_nope, q_pe = q.split([self.nope_dim, self.rope_dim], dim=-1)

        kv_a = self.kv_a_proj_with_mqa(x)  # [b, s, kv_lora + rope]
        c_kv, k_pe = kv_a.split([cfg.kv_lora_rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c_kv))  # [b, s, heads * (nope + v)]
        kv = kv.view(batch, seq, self.num_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)  # [b, s, heads, nope], [b, s, heads, v]

        q_pe = apply_rope(q_pe, cos, sin, cfg.rope_interleave)  # [b, s, heads, rope]
        k_pe = apply_rope(k_pe.unsqueeze(2), cos, sin, cfg.rope_interleave)  # [b, s, 1, rope]: one key for all heads

        q = torch.cat((q_nope, q_pe), dim=-1).transpose(1, 2)  # [b, heads, s, nope+rope]
        k = torch.cat((k_nope, k_pe.expand(-1, -1, self.num_heads, -1)), dim=-1).transpose(1, 2)
        v = v.transpose(1, 2)  # [b, heads, s, v]

        scores = torch.matmul(q * self.scale, k.transpose(-1, -2)).float()  # [b, heads, s, s]
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = scores.softmax(dim=-1).to(v.dtype)
        out = torch.matmul(probs, v)  # [b, heads, s, v]
        out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.v_dim)
        return self.o_proj(out)


# ---- feed-forward ------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEGate(nn.Module):
    """Router. Returns (expert ids [tokens, k], weights [tokens, k] fp32)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.empty(config.n_routed_experts, config.hidden_size))
        if config.topk_method == "noaux_tc":
            # Not trained by gradients: nudged after each step by aux-loss-free balancing.
            self.register_buffer("e_score_correction_bias", torch.zeros(config.n_routed_experts))

    def _scores(self, x):
        """Returns (scores [tokens, experts] used as weights, choice scores [tokens, experts] with
        experts outside the kept groups at -inf, group scores [tokens, groups] or None)."""
        cfg = self.config
        num_tokens = x.shape[0]
        logits = F.linear(x.float(), self.weight.float())  # [tokens, experts], fp32 as in the reference
        if cfg.scoring_func == "softmax":
            scores = logits.softmax(dim=-1)
        elif cfg.scoring_func == "sigmoid":
            scores = logits.sigmoid()
        else:
            raise NotImplementedError(f"scoring_func {cfg.scoring_func!r}")

        if cfg.topk_method == "noaux_tc":
            choice_scores = scores + self.e_score_correction_bias.float()  # only for choosing
        elif cfg.topk_method in ("greedy", "group_limited_greedy"):
            choice_scores = scores
        else:
            raise NotImplementedError(f"topk_method {cfg.topk_method!r}")

        group_scores = None
        if cfg.topk_method != "greedy" and cfg.n_group > 1:
            by_group = choice_scores.view(num_tokens, cfg.n_group, -1)  # [tokens, groups, experts/group]
            if cfg.topk_method == "noaux_tc":
                group_scores = by_group.topk(2, dim=-1).values.sum(dim=-1)  # [tokens, groups]
            else:
                group_scores = by_group.max(dim=-1).values
            kept_groups = group_scores.topk(cfg.topk_group, dim=-1).indices  # [tokens, topk_group]
            group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept_groups, True)
            expert_mask = group_mask.repeat_interleave(cfg.n_routed_experts // cfg.n_group, dim=1)
            choice_scores = choice_scores.masked_fill(~expert_mask, float("-inf"))
        return scores, choice_scores, group_scores

    def forward(self, x):  # x: [tokens, hidden]
        cfg = self.config
        scores, choice_scores, _ = self._scores(x)
        expert_ids = choice_scores.topk(cfg.num_experts_per_tok, dim=-1).indices  # [tokens, k]
        weights = scores.gather(1, expert_ids)  # [tokens, k]: unbiased scores

        normalize = cfg.num_experts_per_tok > 1 and cfg.norm_topk_prob
        if normalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if cfg.is_v3_routing or not normalize:
            weights = weights * cfg.routed_scaling_factor
        return expert_ids, weights

    @torch.no_grad()
    def routing_margin(self, x):
        """Smallest gap, over tokens, between the last chosen and the first rejected group score
        and expert choice score. A tiny gap means another engine's rounding could route
        differently; fixtures avoid those inputs."""
        cfg = self.config
        _, choice_scores, group_scores = self._scores(x)
        margin = float("inf")
        num_choices = [(choice_scores, cfg.num_experts_per_tok)]
        if group_scores is not None:
            num_choices.append((group_scores, cfg.topk_group))
        for values, k in num_choices:
            if k < values.shape[-1]:
                top = values.topk(k + 1, dim=-1).values  # [tokens, k+1]
                gap = top[:, k - 1] - top[:, k]  # inf when the (k+1)-th is masked
                margin = min(margin, gap.min().item())
        return margin


class MoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.gate = MoEGate(config)
        self.experts = nn.ModuleList(
            MLP(config.hidden_size, config.moe_intermediate_size) for _ in range(config.n_routed_experts)
        )
        if config.n_shared_experts:
            self.shared_experts = MLP(config.hidden_size, config.n_shared_experts * config.moe_intermediate_size)
        # Tokens routed to each expert in the last forward ([experts]); read by load balancing.
        self.last_tokens_per_expert = None

    def forward(self, x):  # x: [batch, seq, hidden]
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])  # [tokens, hidden]
        expert_ids, weights = self.gate(tokens)  # [tokens, k] each
        self.last_tokens_per_expert = torch.bincount(
            expert_ids.flatten(), minlength=self.config.n_routed_experts
        ).detach()

        out = torch.zeros_like(tokens)
        for expert_idx, expert in enumerate(self.experts):
            token_idx, slot = torch.nonzero(expert_ids == expert_idx, as_tuple=True)
            if token_idx.numel() == 0:
                continue
            expert_out = expert(tokens[token_idx])  # [routed tokens, hidden]
            out.index_add_(0, token_idx, expert_out * weights[token_idx, slot, None].to(tokens.dtype))
        if self.config.n_shared_experts:
            out = out + self.shared_experts(tokens)
        return out.view(shape)


# ---- model -------------------------------------------------------------------------------------


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = MLAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_moe_layer(layer_idx):
            self.mlp = MoE(config)
        else:
            self.mlp = MLP(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """HF's `model.` prefix: embeddings, decoder layers, final norm."""

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class DeepseekForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def output_weight(self):
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens.weight
        return self.lm_head.weight

    def final_hidden(self, input_ids):
        """input_ids: [batch, seq] (positions 0..seq-1). Returns the final-normed hidden states
        [batch, seq, hidden]: model.norm of the last layer's output, what lm_head multiplies
        (and what an MTP layer takes as its hidden input)."""
        seq = input_ids.shape[1]
        cos, sin = rope_cos_sin(self.config, seq)  # [seq, rope/2] each
        x = self.model.embed_tokens(input_ids)  # [batch, seq, hidden]
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def forward(self, input_ids):
        """input_ids: [batch, seq] (positions 0..seq-1). Returns logits [batch, seq, vocab]."""
        return F.linear(self.final_hidden(input_ids), self.output_weight())

    def moe_layers(self):
        return [layer.mlp for layer in self.model.layers if isinstance(layer.mlp, MoE)]


# ---- multi-token prediction (DeepSeek-V3 MTP / NEXTN) ------------------------------------------


class SharedHead(nn.Module):
    """V3's `shared_head.`: the MTP's own final norm. (`shared_head.head` is a copy of lm_head in
    V3 checkpoints; the math uses the main model's lm_head, so it is not a parameter here.)"""

    def __init__(self, config):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class MTPLayer(DecoderLayer):
    """One DeepSeek-V3 multi-token-prediction layer, HF index L = num_hidden_layers + k. Its
    tensors live under `model.layers.{L}.`: enorm, hnorm, eh_proj, a full decoder block with the
    usual names (MoE or dense by config.is_moe_layer(L)), and shared_head.norm.

    MTP position j takes the pair (h_j, t_{j+1}), h_j the target's final-normed hidden state at
    position j, and predicts t_{j+2}:
        x_j = eh_proj(concat(enorm(embed(t_{j+1})), hnorm(h_j)))    # embedding half first
        y   = DecoderBlock(x), causal over MTP positions, rope position j
        g_j = shared_head.norm(y_j);  logits_j = g_j @ lm_head^T
    Position 0 is not masked. Chained drafting feeds (g_j, d) back in as the next pair.
    """

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.config = config
        self.layer_idx = layer_idx
        hidden = config.hidden_size
        self.enorm = RMSNorm(hidden, config.rms_norm_eps)
        self.hnorm = RMSNorm(hidden, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.shared_head = SharedHead(config)

    def forward(self, hidden, next_ids, target):
        """hidden: [batch, m, hidden] (h_j, or g_j when chaining); next_ids: [batch, m] (t_{j+1});
        target: the DeepseekForCausalLM whose embedding and lm_head are shared. MTP positions
        are 0..m-1 (rope positions too). Returns (g [batch, m, hidden], logits [batch, m, vocab])."""
        m = next_ids.shape[1]
        embedded = target.model.embed_tokens(next_ids)  # [batch, m, hidden]
        x = self.eh_proj(torch.cat((self.enorm(embedded), self.hnorm(hidden)), dim=-1))
        cos, sin = rope_cos_sin(self.config, m)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        y = DecoderLayer.forward(self, x, cos, sin)
        g = self.shared_head.norm(y)
        return g, F.linear(g, target.output_weight())

    def moe_layers(self):
        return [self.mlp] if isinstance(self.mlp, MoE) else []


def mtp_prefix(config, k=0):
    return f"model.layers.{config.num_hidden_layers + k}."


def is_mtp_tensor(config, name):
    """True for the tensors of MTP layers (`model.layers.{L}.` with L >= num_hidden_layers)."""
    match = re.match(r"model\.layers\.(\d+)\.", name)
    return match is not None and int(match.group(1)) >= config.num_hidden_layers


def mtp_checkpoint_names(mtp, target):
    """{HF name: tensor} of one MTP layer, with V3's copies of the embedding and lm_head."""
    prefix = mtp_prefix(target.config, mtp.layer_idx - target.config.num_hidden_layers)
    tensors = {prefix + name: tensor for name, tensor in mtp.state_dict().items()}
    tensors[prefix + "embed_tokens.weight"] = target.model.embed_tokens.weight.detach()
    tensors[prefix + "shared_head.head.weight"] = target.output_weight().detach()
    return tensors


def init_weights(model, std, norm_jitter=0.0, generator=None):
    """Normal(0, std) for every matrix; norms 1 (+ norm_jitter * normal); correction biases 0."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                param.fill_(1.0)
                if norm_jitter:
                    param.add_(norm_jitter * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(std * torch.randn(param.shape, generator=generator))


def load_model(config_dict, tensors):
    """Builds the fp32 model and loads HF-named tensors (any float dtype, converted to fp32).
    MTP layers' tensors (see load_mtp) are ignored."""
    config = ModelConfig.from_dict(config_dict)
    model = DeepseekForCausalLM(config)
    state = {name: tensor.float() for name, tensor in tensors.items() if not is_mtp_tensor(config, name)}
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_mtp(config_dict, tensors, target, k=0):
    """Builds the fp32 MTP layer k and loads its tensors; checks that its embed_tokens and
    shared_head.head copies equal the target's embedding and lm_head."""
    config = ModelConfig.from_dict(config_dict)
    prefix = mtp_prefix(config, k)
    mtp = MTPLayer(config, config.num_hidden_layers + k)
    copies = {"embed_tokens.weight": target.model.embed_tokens.weight, "shared_head.head.weight": target.output_weight()}
    state = {}
    for name, tensor in tensors.items():
        if not name.startswith(prefix):
            continue
        local = name[len(prefix) :]
        if local in copies:
            if not torch.equal(tensor.float(), copies[local]):
                raise ValueError(f"{name} is not a copy of the target's tensor")
        else:
            state[local] = tensor.float()
    mtp.load_state_dict(state, strict=True)
    return mtp.eval()
