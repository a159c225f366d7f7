"""A plain PyTorch reference of an EAGLE-3 draft model in SpecForge/SGLang's
`LlamaForCausalLMEagle3` layout: one Llama decoder layer over [embedding | hidden] (2H wide),
fed with the target's hidden states of three layers, with a reduced draft vocabulary.

Checkpoint tensors (bf16 unless said): `fc.weight` [H, 3 * target_hidden];
`midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight` [H];
`midlayer.self_attn.{q,k,v}_proj.weight` [heads * head_dim | kv_heads * head_dim, 2H];
`midlayer.self_attn.o_proj.weight` [H, heads * head_dim]; `midlayer.mlp.{gate,up,down}_proj.weight`;
`norm.weight` [H]; `lm_head.weight` [draft_vocab, H]; `d2t` I64 [draft_vocab] (target id = draft id +
d2t[draft id]); `t2d` BOOL [vocab] (true where a target token is in the draft vocabulary).
There is no `embed_tokens`: the draft embeds tokens with the TARGET's `model.embed_tokens`.

Row p of a sequence pairs the target's captured rows a_p = [x_p^(1) | x_p^(2) | x_p^(3)] (the
residual stream entering target layers 1, 2, 3 at position p: `mlaserve batch --hidden-layers 1,2,3`,
load_hidden_states.reference_rows) with the token t_{p+1}, and predicts t_{p+2}:
    h = fc(a_p)                       (a chained row takes h = the previous row's o instead)
    x = [input_layernorm(embed(t_{p+1})) | hidden_norm(h)]             # [2H], embedding first
    q, k, v = q_proj(x), k_proj(x), v_proj(x); rotate_half RoPE at the row's position on q, k;
    causal GQA attention over the draft's own rows, scale 1/sqrt(head_dim)
    r = h + o_proj(attn)
    o = r + mlp(post_attention_layernorm(r))                             # fed back when chaining
    logits = lm_head(norm(o))  [draft_vocab];  draft token = argmax + d2t[argmax]
Chained drafting appends rows (o of the previous row, the previous draft) at the next positions,
each attending to every earlier row of the cache.
"""

import json
import math
import os
import types

import torch
import torch.nn.functional as F
from torch import nn

from modeling import MLP, RMSNorm, apply_rope, rope_inv_freq
from safetensors_io import load_file, save_file


def config_json(target_config, draft_vocab_size, aux_layer_ids):
    """config.json of a draft for `target_config` (the target's config.json dict). aux_layer_ids
    are SGLang's `eagle_aux_hidden_state_layer_ids`: id k = the OUTPUT of target layer k
    (= mlaserve's capture index k + 1)."""
    hidden = target_config["hidden_size"]
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "target_hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 1,
        "vocab_size": target_config["vocab_size"],
        "draft_vocab_size": draft_vocab_size,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "max_position_embeddings": target_config["max_position_embeddings"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids), "use_aux_hidden_state": True},
    }


def capture_layers(config):
    """mlaserve's `--hidden-layers` indices (inputs of target layers) for the config's aux ids."""
    return [k + 1 for k in config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]


def rope_cos_sin(config, positions):
    """cos, sin [rows, head_dim/2] (fp32) at the given positions [rows] (Llama RoPE, no scaling)."""
    rope = types.SimpleNamespace(qk_rope_head_dim=config["head_dim"], rope_theta=config["rope_theta"], rope_scaling=None)
    inv_freq, _ = rope_inv_freq(rope)  # [head_dim/2]
    angles = torch.outer(positions.float(), inv_freq)
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = config["hidden_size"]
        self.heads, self.kv_heads, self.head_dim = (
            config["num_attention_heads"],
            config["num_key_value_heads"],
            config["head_dim"],
        )
        self.q_proj = nn.Linear(2 * hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)

    def qkv(self, x, cos, sin):
        """x: [batch, rows, 2H]; cos, sin: [rows, head_dim/2]. Returns q [batch, rows, heads, d],
        k, v [batch, rows, kv_heads, d], q and k rotated."""
        batch, rows, _ = x.shape
        q = self.q_proj(x).view(batch, rows, self.heads, self.head_dim)
        k = self.k_proj(x).view(batch, rows, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(batch, rows, self.kv_heads, self.head_dim)
        return apply_rope(q, cos, sin, interleave=False), apply_rope(k, cos, sin, interleave=False), v

    def expand_kv(self, t):
        """[batch, rows, kv_heads, d] -> [batch, rows, heads, d]: query head i uses kv head
        i // (heads / kv_heads)."""
        batch, rows, kv_heads, d = t.shape
        group = self.heads // kv_heads
        return t[:, :, :, None].expand(batch, rows, kv_heads, group, d).reshape(batch, rows, self.heads, d)


class Midlayer(nn.Module):
    """SGLang's `midlayer.`: hidden_norm, input_layernorm, self_attn, post_attention_layernorm, mlp."""

    def __init__(self, config):
        super().__init__()
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        self.hidden_norm = RMSNorm(hidden, eps)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = MLP(hidden, config["intermediate_size"])

    def block_input(self, embedded, h):
        """[input_layernorm(embed) | hidden_norm(h)]: [batch, rows, 2H]."""
        return torch.cat((self.input_layernorm(embedded), self.hidden_norm(h)), dim=-1)

    def finish(self, h, attn):
        """attn [batch, rows, heads * d] -> o [batch, rows, H] (pre-norm)."""
        r = h + self.self_attn.o_proj(attn)
        return r + self.mlp(self.post_attention_layernorm(r))


def attend(q, keys, values, mask, scale):
    """q [b, rows, heads, d]; keys, values [b, ctx, heads, d]; mask [rows, ctx] True = visible.
    Returns [b, rows, heads * d]."""
    scores = torch.einsum("brhd,bchd->bhrc", q, keys) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.einsum("bhrc,bchd->brhd", scores.softmax(-1), values)
    return out.flatten(2)


class DraftCache:
    """The draft's own rows so far: keys (rotated) and values [batch, rows, kv_heads, d], rows at
    positions 0..len-1."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[1]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat((self.k, k), dim=1)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=1)

    def truncate(self, rows):
        self.k, self.v = self.k[:, :rows], self.v[:, :rows]


class Eagle3Draft(nn.Module):
    def __init__(self, config, target_embed):
        """target_embed: the target's `model.embed_tokens.weight` [vocab, H] (not a parameter of
        the draft, not saved)."""
        super().__init__()
        self.config = config
        hidden = config["hidden_size"]
        num_aux = len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        self.fc = nn.Linear(num_aux * config["target_hidden_size"], hidden, bias=False)
        self.midlayer = Midlayer(config)
        self.norm = RMSNorm(hidden, config["rms_norm_eps"])
        self.lm_head = nn.Linear(hidden, config["draft_vocab_size"], bias=False)
        self.register_buffer("d2t", torch.zeros(config["draft_vocab_size"], dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config["vocab_size"], dtype=torch.bool))
        self.register_buffer("target_embed", target_embed.detach().float(), persistent=False)
        self.scale = 1.0 / math.sqrt(config["head_dim"])

    def set_vocab(self, draft_to_target):
        """draft_to_target: ascending target ids [draft_vocab] of the draft vocabulary."""
        ids = torch.as_tensor(draft_to_target, dtype=torch.long)
        self.d2t.copy_(ids - torch.arange(ids.numel()))
        self.t2d.zero_()
        self.t2d[ids] = True

    def draft_ids(self):
        """[draft_vocab] target ids."""
        return torch.arange(self.d2t.numel()) + self.d2t

    def to_target(self, draft_token):
        return draft_token + self.d2t[draft_token]

    def logits(self, o):
        return self.lm_head(self.norm(o))

    def embed(self, ids):
        return F.embedding(ids, self.target_embed)

    def extend(self, cache, h, ids):
        """Appends rows at positions len(cache).. to the cache: h [b, rows, H] (fc(a_p), or the
        previous row's o when chaining), ids [b, rows] (t_{p+1} / the previous draft). Each row
        attends to every earlier row and itself. Returns (o [b, rows, H], logits [b, rows, draft_vocab])."""
        start, rows = len(cache), ids.shape[1]
        cos, sin = rope_cos_sin(self.config, torch.arange(start, start + rows))
        attn = self.midlayer.self_attn
        q, k, v = attn.qkv(self.midlayer.block_input(self.embed(ids), h), cos, sin)
        cache.append(k, v)
        mask = torch.ones(rows, start + rows, dtype=torch.bool).tril(start)  # row i sees 0..start+i
        out = attend(q, attn.expand_kv(cache.k), attn.expand_kv(cache.v), mask, self.scale)
        o = self.midlayer.finish(h, out)
        return o, self.logits(o)

    def forward(self, aux, ids, cache=None):
        """The whole sequence: aux [b, n, 3 * target_hidden] (rows a_0..a_{n-1}), ids [b, n]
        (t_1..t_n). Returns (o, logits) of rows 0..n-1; the rows go into `cache` if given."""
        return self.extend(DraftCache() if cache is None else cache, self.fc(aux), ids)

    @torch.no_grad()
    def chain(self, cache, o_last, logits_last, steps):
        """Greedy chained drafting after rows 0..m-1 are in the cache: o_last [b, 1, H] and
        logits_last [b, 1, draft_vocab] of row m-1. Returns the drafts [b, steps] (target ids)
        and leaves `steps - 1` chained rows in the cache (truncate to drop them)."""
        drafts = [self.to_target(logits_last[:, -1].argmax(-1))]
        o = o_last
        for _ in range(steps - 1):
            o, logits = self.extend(cache, o, drafts[-1][:, None])
            drafts.append(self.to_target(logits[:, -1].argmax(-1)))
        return torch.stack(drafts, dim=1)

    def ttt_forward(self, aux, ids, steps):
        """EAGLE-3 training-time test over a batch: aux [b, n, 3 * target_hidden], ids [b, n + steps - 1]
        (t_1..t_{n+steps-1}, teacher forced). Step j (1-based) row at index p sits at position
        p + j - 1, embeds t_{p+j}, takes h = step j-1's o at index p (fc(a_p) for j = 1), and
        attends to the step-1 rows at positions <= p plus the rows of steps 2..j at index p (what
        a chain at inference sees). Returns the logits of each step, [b, n, draft_vocab] each
        (step j predicts t_{p+j+1})."""
        n = aux.shape[1]
        attn = self.midlayer.self_attn
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        h = self.fc(aux)
        keys, values, all_logits = [], [], []
        for j in range(steps):
            cos, sin = rope_cos_sin(self.config, torch.arange(j, j + n))
            q, k, v = attn.qkv(self.midlayer.block_input(self.embed(ids[:, j : j + n]), h), cos, sin)
            k, v = attn.expand_kv(k), attn.expand_kv(v)  # [b, n, heads, d]
            keys.append(k)
            values.append(v)
            scores = torch.einsum("brhd,bchd->bhrc", q, keys[0]) * self.scale  # [b, heads, n, n]
            scores = [scores.masked_fill(~causal, float("-inf"))]
            scores += [torch.einsum("brhd,brhd->bhr", q, key)[..., None] * self.scale for key in keys[1:]]
            probs = torch.cat(scores, dim=-1).softmax(-1)  # [b, heads, n, n + j]
            out = torch.einsum("bhrc,bchd->brhd", probs[..., :n], values[0])
            for i, value in enumerate(values[1:]):
                out = out + probs[..., n + i].transpose(1, 2)[..., None] * value
            h = self.midlayer.finish(h, out.flatten(2))
            all_logits.append(self.logits(h))
        return all_logits

    def checkpoint_tensors(self):
        tensors = {}
        for name, tensor in self.state_dict().items():
            if name in ("d2t", "t2d"):
                tensors[name] = tensor.clone()
            else:
                tensors[name] = tensor.to(torch.bfloat16).contiguous()
        return tensors


def save_draft(draft, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    save_file(draft.checkpoint_tensors(), os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(draft.config, f, indent=2)
        f.write("\n")


def load_draft(draft_dir, target_embed):
    """The draft with fp32 weights (the stored bf16 values upcast)."""
    with open(os.path.join(draft_dir, "config.json")) as f:
        config = json.load(f)
    tensors, _ = load_file(os.path.join(draft_dir, "model.safetensors"))
    draft = Eagle3Draft(config, target_embed)
    state = {name: t if name in ("d2t", "t2d") else t.float() for name, t in tensors.items()}
    draft.load_state_dict(state, strict=True)
    return draft.eval()
