"""Writes the reference fixtures the C++ engine and tokenizer are tested against.

    tests/fixtures/tokenizer_cases.json          strings and their ids (no BOS), bundled tokenizer
    tests/fixtures/shakespeare-mla/fixture.safetensors
                                                 logits + greedy continuations of the bundled model
    tests/fixtures/tiny-v2/                      a random DeepSeek-V2-Lite-style checkpoint (sharded,
                                                 F16 + F32) and its fixture.safetensors
    tests/fixtures/shakespeare-mla/mtp.safetensors
                                                 the bundled model's MTP layer: target hidden
                                                 states, MTP logits/hidden, chained drafts
    tests/fixtures/shakespeare-mla/eagle3.safetensors
                                                 the bundled EAGLE-3 draft (models/shakespeare-mla-eagle3):
                                                 target aux hidden states, draft logits/hidden,
                                                 chained drafts
    tests/fixtures/quant/{fp8-block,int4-g32}.safetensors
                                                 logits + greedy continuations of the bundled model
                                                 after `mlaserve quantize` (the checkpoint is not
                                                 committed: the test re-runs quantize, which is
                                                 deterministic), computed on the files' weights as
                                                 dequantized by dequantize.py

Fixture tensors, for prompt i: p{i}.input_ids I64 [n], p{i}.logits F32 [n, vocab] (every
position), p{i}.greedy I64 [24] (argmax continuation, the full sequence re-run each step).
Computed in fp32 with the weights exactly as stored (rounded to bf16/f16 and read back).

Usage (from the repository root):
    /usr/bin/python3 tools/train/make_fixtures.py                  # all parts
    /usr/bin/python3 tools/train/make_fixtures.py --parts tokenizer
    /usr/bin/python3 tools/train/make_fixtures.py --parts mtp   # needs train_mtp.py's layer
    /usr/bin/python3 tools/train/make_fixtures.py --parts eagle3   # needs the bundled draft (train_eagle3.py)
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import dequantize  # noqa: E402
import eagle3  # noqa: E402
import modeling  # noqa: E402
import safetensors_io  # noqa: E402
import train_eagle3  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(REPO_ROOT, "models", "shakespeare-mla")
FIXTURE_DIR = os.path.join(REPO_ROOT, "tests", "fixtures")

NUM_GREEDY_TOKENS = 24
MIN_LOGIT_MARGIN = 1e-3  # top-1 minus top-2 logit at every greedy step
# Last chosen minus first rejected router (or group) score, every token and layer. fp32 engines
# agree to ~1e-6 on these scores; near-ties are common enough in long prompts that 1e-4 rejects
# nearly every 260-token window.
MIN_ROUTING_MARGIN = 1e-5


# ---- tokenizer cases ---------------------------------------------------------------------------

TOKENIZER_CASE_TEXTS = [
    "",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "ROMEO:\nBut, soft! what light through yonder window breaks?",
    "To be, or not to be, that is the question:",
    "KING RICHARD III:\nA horse! a horse! my kingdom for a horse!",
    "Now is the winter of our discontent\nMade glorious summer by this sun of York;",
    " ",
    "\n",
    "  leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "\n\n\nthree newlines before",
    "line one\r\nline two\r\n",
    "\ttab\tseparated\t",
    "tabs\t\t\n  \n mixed whitespace",
    "12345 67 8.9 1,000,000",
    "Act 3, Scene 2, line 1597",
    "1st 2nd 3rd 4th",
    "Hello!!! What?! ... --- ;; (parens) [brackets] {braces}",
    "I'll, you're, we've, he's, they'd, I'm, don't, can't",
    "O'ER THE HILL'S TOP, 'TIS",
    "'tis 'twas o'er ne'er",
    "email@example.com http://example.org/path?q=1&r=2",
    "café naïve résumé Ångström",
    "Zoë, façade, jalapeño, Straße",
    "Ελληνικά και русский язык",
    "日本語のテキスト",
    "中文 字符 测试",
    "한국어 문장",
    "emoji 😀🎭👑 end",
    "family 👨\u200d👩\u200d👧 zwj",
    "a\u0301 combining accent",
    "no\u00a0break\u00a0space",
    "\u3000ideographic space",
    "<|bos|>",
    "<|bos|><|bos|>",
    "<|user|>Hello<|end|><|assistant|>Hi there<|end|>",
    "<|system|>You are Hamlet.<|end|>\n<|user|> Speak!<|end|>",
    "text<|eos|>more text",
    "<|unknown|> is not special, nor is <|bos",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "thou thou thou thee thee thy thine",
]


def write_tokenizer_cases(tokenizer, heldout_text):
    texts = list(TOKENIZER_CASE_TEXTS)
    texts.append(heldout_text[:600])  # a longer stretch of held-out verse
    cases = []
    for text in texts:
        ids = tokenizer.encode(text)
        if tokenizer.decode(ids) != text:
            raise AssertionError(f"round trip failed for {text!r}")
        cases.append({"text": text, "ids": ids})
    path = os.path.join(FIXTURE_DIR, "tokenizer_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"tokenizer cases: {len(cases)} -> {path}")


# ---- model fixtures ----------------------------------------------------------------------------


class RoutingMarginProbe:
    """Records the smallest router margin seen by every MoE gate of `models` while active."""

    def __init__(self, *models):
        self.min_margin = math.inf
        self.handles = [
            moe.gate.register_forward_pre_hook(self._record) for model in models for moe in model.moe_layers()
        ]

    def _record(self, gate, inputs):
        self.min_margin = min(self.min_margin, gate.routing_margin(inputs[0]))

    def remove(self):
        for handle in self.handles:
            handle.remove()


@torch.no_grad()
def greedy_reference(model, input_ids, eos_id=None):
    """Returns (logits [n, vocab] of the prompt, greedy ids [24], smallest greedy logit margin,
    smallest routing margin). Each greedy step re-runs the full sequence."""
    probe = RoutingMarginProbe(model)
    prompt_logits = model(torch.tensor([input_ids]))[0]  # [n, vocab]
    ids = list(input_ids)
    greedy = []
    min_logit_margin = math.inf
    logits = prompt_logits
    for step in range(NUM_GREEDY_TOKENS):
        if step > 0:
            logits = model(torch.tensor([ids]))[0]
        top2 = logits[-1].topk(2).values
        min_logit_margin = min(min_logit_margin, (top2[0] - top2[1]).item())
        next_id = int(logits[-1].argmax())
        if next_id == eos_id:
            min_logit_margin = -math.inf  # a continuation that stops early is no use as a fixture
        greedy.append(next_id)
        ids.append(next_id)
    probe.remove()
    return prompt_logits, greedy, min_logit_margin, probe.min_margin


def fixture_is_robust(name, logit_margin, routing_margin):
    ok = logit_margin > MIN_LOGIT_MARGIN and routing_margin > MIN_ROUTING_MARGIN
    verdict = "ok" if ok else "rejected"
    print(f"  {name}: min greedy logit margin {logit_margin:.4g}, min routing margin {routing_margin:.4g} ({verdict})")
    return ok


def write_fixture(path, prompts, metadata):
    """prompts: list of (input_ids, logits [n, vocab], greedy ids)."""
    tensors = {}
    for i, (input_ids, logits, greedy) in enumerate(prompts):
        tensors[f"p{i}.input_ids"] = torch.tensor(input_ids, dtype=torch.int64)
        tensors[f"p{i}.logits"] = logits.float().contiguous()
        tensors[f"p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int64)
    safetensors_io.save_file(tensors, path, metadata)
    print(f"fixture: {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


# ---- (a) bundled model -------------------------------------------------------------------------


def heldout_prompt(tokenizer, heldout_text, first_line, min_tokens):
    """Whole held-out lines starting at `first_line`, just past `min_tokens` tokens."""
    lines = heldout_text.splitlines(keepends=True)
    text = ""
    for line in lines[first_line:]:
        text += line
        if len(tokenizer.encode(text)) >= min_tokens:
            break
    return text


def write_shakespeare_fixture(tokenizer, heldout_text):
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        config = json.load(f)
    model = modeling.load_model(config, safetensors_io.load_checkpoint(MODEL_DIR))
    bos_id = tokenizer.token_id("<|bos|>")
    eos_id = tokenizer.token_id("<|eos|>")

    # (kind, candidate texts); the first candidate with robust margins is used.
    short_candidates = ["ROMEO:\nO, she doth teach", "JULIET:\nWhat's in a name", "HAMLET:\nTo be, or not"]
    medium_candidates = [heldout_prompt(tokenizer, heldout_text, line, 55) for line in range(100, 400, 20)]
    long_candidates = [heldout_prompt(tokenizer, heldout_text, line, 260) for line in range(0, 3000, 150)]

    prompts, texts = [], []
    for kind, candidates in (("short", short_candidates), ("medium", medium_candidates), ("long", long_candidates)):
        for text in candidates:
            input_ids = [bos_id] + tokenizer.encode(text)
            logits, greedy, logit_margin, routing_margin = greedy_reference(model, input_ids, eos_id)
            if fixture_is_robust(f"{kind} prompt ({len(input_ids)} tokens)", logit_margin, routing_margin):
                prompts.append((input_ids, logits, greedy))
                texts.append(text)
                print(f"    -> {tokenizer.decode(greedy)!r}")
                break
        else:
            raise RuntimeError(f"no {kind} prompt with robust margins")

    os.makedirs(os.path.join(FIXTURE_DIR, "shakespeare-mla"), exist_ok=True)
    metadata = {
        "model": "shakespeare-mla",
        "prompts": json.dumps(texts, ensure_ascii=False),
        "num_prompts": str(len(prompts)),
        "greedy_tokens": str(NUM_GREEDY_TOKENS),
    }
    write_fixture(os.path.join(FIXTURE_DIR, "shakespeare-mla", "fixture.safetensors"), prompts, metadata)


# ---- (b) the bundled model's MTP layer ----------------------------------------------------------

NUM_MTP_CHAIN = 3  # chained drafts d_1..d_3


def logit_margin(logits):
    """Top-1 minus top-2 of a [vocab] logit row."""
    top2 = logits.topk(2).values
    return (top2[0] - top2[1]).item()


@torch.no_grad()
def mtp_reference(target, mtp, input_ids):
    """Returns ({name: tensor} for one prompt, smallest greedy logit margin, smallest routing
    margin). See modeling.MTPLayer for the math:
        hidden [n, H]           the target's final-normed hidden states h_0..h_{n-1}
        mtp_logits [n-1, vocab] MTP positions j = 0..n-2, pairs (h_j, t_{j+1})
        mtp_hidden [n-1, H]     g_j = shared_head.norm of the MTP block output
        next_token [1]          the target's greedy t_n
        mtp_chain [3]           d_1 from (h_{n-1}, t_n) at MTP position n-1; d_2 from (g_{n-1}, d_1)
                                at position n; d_3 from (g_n, d_2) at position n+1 (full re-run each
                                step, the MTP attending over all its earlier positions)"""
    probe = RoutingMarginProbe(target, mtp)
    ids = torch.tensor([input_ids])  # [1, n]
    hidden = target.final_hidden(ids)  # [1, n, H]
    target_logits = F.linear(hidden, target.output_weight())[0]  # [n, vocab]
    margins = [logit_margin(target_logits[-1])]
    next_token = int(target_logits[-1].argmax())
    mtp_hidden, mtp_logits = mtp(hidden[:, :-1], ids[:, 1:], target)  # [1, n-1, ...]

    chain_hidden = hidden  # MTP positions 0..n-1: (h_j, t_{j+1}), t_n = next_token
    chain_ids = torch.cat((ids[:, 1:], torch.tensor([[next_token]])), dim=1)
    chain = []
    for _ in range(NUM_MTP_CHAIN):
        g, logits = mtp(chain_hidden, chain_ids, target)
        margins.append(logit_margin(logits[0, -1]))
        draft = int(logits[0, -1].argmax())
        chain.append(draft)
        chain_hidden = torch.cat((chain_hidden, g[:, -1:]), dim=1)
        chain_ids = torch.cat((chain_ids, torch.tensor([[draft]])), dim=1)
    probe.remove()
    tensors = {
        "input_ids": torch.tensor(input_ids, dtype=torch.int64),
        "hidden": hidden[0].float().contiguous(),
        "mtp_logits": mtp_logits[0].float().contiguous(),
        "mtp_hidden": mtp_hidden[0].float().contiguous(),
        "next_token": torch.tensor([next_token], dtype=torch.int64),
        "mtp_chain": torch.tensor(chain, dtype=torch.int64),
    }
    return tensors, min(margins), probe.min_margin


def write_mtp_fixture(tokenizer, heldout_text):
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        config = json.load(f)
    tensors = safetensors_io.load_checkpoint(MODEL_DIR)
    target = modeling.load_model(config, tensors)
    mtp = modeling.load_mtp(config, tensors, target)
    bos_id = tokenizer.token_id("<|bos|>")

    short_candidates = ["ROMEO:\nO, she doth teach", "JULIET:\nWhat's in a name", "HAMLET:\nTo be, or not"]
    short_candidates += [heldout_prompt(tokenizer, heldout_text, line, 7) for line in range(100, 400, 20)]
    medium_candidates = [heldout_prompt(tokenizer, heldout_text, line, 39) for line in range(100, 400, 20)]
    fixture, texts = {}, []
    for kind, candidates in (("short", short_candidates), ("medium", medium_candidates)):
        for text in candidates:
            input_ids = [bos_id] + tokenizer.encode(text)
            prompt, logit_margin_, routing_margin = mtp_reference(target, mtp, input_ids)
            if fixture_is_robust(f"MTP {kind} prompt ({len(input_ids)} tokens)", logit_margin_, routing_margin):
                fixture.update({f"p{len(texts)}.{name}": tensor for name, tensor in prompt.items()})
                texts.append(text)
                chain = [int(prompt["next_token"][0])] + prompt["mtp_chain"].tolist()
                print(f"    -> next token + chain {tokenizer.decode(chain)!r}")
                break
        else:
            raise RuntimeError(f"no {kind} prompt with robust margins")

    metadata = {
        "model": "shakespeare-mla (MTP layer " + str(config["num_hidden_layers"]) + ")",
        "prompts": json.dumps(texts, ensure_ascii=False),
        "num_prompts": str(len(texts)),
        "chain_tokens": str(NUM_MTP_CHAIN),
    }
    os.makedirs(os.path.join(FIXTURE_DIR, "shakespeare-mla"), exist_ok=True)
    path = os.path.join(FIXTURE_DIR, "shakespeare-mla", "mtp.safetensors")
    safetensors_io.save_file(fixture, path, metadata)
    print(f"fixture: {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


# ---- (b2) the bundled EAGLE-3 draft ----------------------------------------------------------

EAGLE3_DIR = os.path.join(REPO_ROOT, "models", "shakespeare-mla-eagle3")


@torch.no_grad()
def eagle3_reference(target, draft, input_ids):
    """Returns ({name: tensor} for one prompt, smallest greedy logit margin, smallest routing
    margin). See eagle3.py for the math:
        aux_hidden [n, 3H]            the target's captured rows a_0..a_{n-1} (inputs of layers 1, 2, 3)
        draft_logits [n-1, draft_vocab]  rows p = 0..n-2, pairs (a_p, t_{p+1})
        draft_hidden [n-1, H]         o of those rows (pre-norm)
        next_token [1]                the target's greedy t_n
        draft_chain [3]               target ids: d_1 from row n-1 = (a_{n-1}, t_n); d_2 from the row
                                      (o_{n-1}, d_1) at position n; d_3 from (o_n, d_2) at n+1"""
    probe = RoutingMarginProbe(target)
    tokens = torch.tensor(input_ids)  # [n]
    aux, target_logits = train_eagle3.target_pass(target, tokens)  # [1, n, 3H], [n, vocab]
    probe.remove()
    margins = [logit_margin(target_logits[-1])]
    next_token = int(target_logits[-1].argmax())
    draft_hidden, draft_logits = draft(aux[:, :-1], tokens[None, 1:])  # [1, n-1, ...]

    cache = eagle3.DraftCache()
    o, logits = draft(aux, torch.cat((tokens[1:], torch.tensor([next_token])))[None], cache)  # rows 0..n-1
    o, logits = o[:, -1:], logits[:, -1:]
    chain = []
    for step in range(NUM_MTP_CHAIN):
        if step > 0:
            o, logits = draft.extend(cache, o, torch.tensor([[chain[-1]]]))
        margins.append(logit_margin(logits[0, -1]))
        chain.append(int(draft.to_target(logits[0, -1].argmax())))
    tensors = {
        "input_ids": tokens.to(torch.int32),
        "aux_hidden": aux[0].float().contiguous(),
        "draft_logits": draft_logits[0].float().contiguous(),
        "draft_hidden": draft_hidden[0].float().contiguous(),
        "next_token": torch.tensor([next_token], dtype=torch.int32),
        "draft_chain": torch.tensor(chain, dtype=torch.int32),
    }
    return tensors, min(margins), probe.min_margin


def write_eagle3_fixture(tokenizer, heldout_text):
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        config = json.load(f)
    target = modeling.load_model(config, safetensors_io.load_checkpoint(MODEL_DIR))
    draft = eagle3.load_draft(EAGLE3_DIR, target.model.embed_tokens.weight)
    bos_id = tokenizer.token_id("<|bos|>")

    first_candidates = [heldout_prompt(tokenizer, heldout_text, line, 23) for line in range(100, 400, 20)]
    second_candidates = [heldout_prompt(tokenizer, heldout_text, line, 31) for line in range(400, 700, 20)]
    fixture, texts = {}, []
    for kind, candidates in (("first", first_candidates), ("second", second_candidates)):
        for text in candidates:
            input_ids = [bos_id] + tokenizer.encode(text)
            if len(input_ids) > 40:
                continue
            prompt, logit_margin_, routing_margin = eagle3_reference(target, draft, input_ids)
            if fixture_is_robust(f"EAGLE-3 {kind} prompt ({len(input_ids)} tokens)", logit_margin_, routing_margin):
                fixture.update({f"p{len(texts)}.{name}": tensor for name, tensor in prompt.items()})
                texts.append(text)
                chain = [int(prompt["next_token"][0])] + prompt["draft_chain"].tolist()
                print(f"    -> next token + chain {tokenizer.decode(chain)!r}")
                break
        else:
            raise RuntimeError(f"no {kind} prompt with robust margins")

    metadata = {
        "model": "shakespeare-mla-eagle3 (target shakespeare-mla)",
        "prompts": json.dumps(texts, ensure_ascii=False),
        "num_prompts": str(len(texts)),
        "chain_tokens": str(NUM_MTP_CHAIN),
        "hidden_layers": ",".join(str(k) for k in eagle3.capture_layers(draft.config)),
    }
    os.makedirs(os.path.join(FIXTURE_DIR, "shakespeare-mla"), exist_ok=True)
    path = os.path.join(FIXTURE_DIR, "shakespeare-mla", "eagle3.safetensors")
    safetensors_io.save_file(fixture, path, metadata)
    stored, _ = safetensors_io.load_file(path)
    if stored.keys() != fixture.keys() or not all(
        stored[name].dtype == tensor.dtype and torch.equal(stored[name], tensor) for name, tensor in fixture.items()
    ):
        raise AssertionError(f"{path} does not read back as written")
    print(f"fixture: {path} ({os.path.getsize(path) / 1e6:.2f} MB), reads back exactly")


# ---- (c) tiny DeepSeek-V2-Lite-style checkpoint ------------------------------------------------

TINY_V2_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": None,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 2,
    "num_experts_per_tok": 3,
    "n_group": 4,
    "topk_group": 2,
    "topk_method": "group_limited_greedy",
    "scoring_func": "softmax",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.5,
    "aux_loss_alpha": 0.001,
    "seq_aux": True,
    "rope_theta": 10000.0,
    "rope_interleave": False,
    "rope_scaling": {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 128,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 0.707,
    },
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "float16",
}

TINY_V2_PROMPT_LENGTHS = [5, 40, 300]


def init_tiny_weights(model, generator):
    """Embeddings N(0, 1) (tied, so logits spread over several units); matrices
    N(0, 1/fan_in); norm weights 1 + 0.1 * N(0, 1)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            elif name == "model.embed_tokens.weight":
                param.copy_(torch.randn(param.shape, generator=generator))
            else:
                fan_in = param.shape[1]
                param.copy_(torch.randn(param.shape, generator=generator) / math.sqrt(fan_in))


def tiny_v2_shard_of(name):
    """Shard 2 (F32) holds the norms, the routers and layer 2's attention; shard 1 (F16) holds
    the rest, so layers 1 and 2 span both files."""
    in_f32 = name.endswith("norm.weight") or name.endswith("mlp.gate.weight") or ".2.self_attn." in name
    return "model-00002-of-00002.safetensors" if in_f32 else "model-00001-of-00002.safetensors"


def save_tiny_v2_checkpoint(model, out_dir):
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    dtype_of_shard = {"model-00001-of-00002.safetensors": torch.float16, "model-00002-of-00002.safetensors": torch.float32}
    for name, tensor in model.state_dict().items():
        shard = tiny_v2_shard_of(name)
        shards[shard][name] = tensor.to(dtype_of_shard[shard]).contiguous()
    weight_map = {}
    total_size_bytes = 0
    for shard, tensors in shards.items():
        safetensors_io.save_file(tensors, os.path.join(out_dir, shard), {"format": "pt"})
        for name, tensor in tensors.items():
            weight_map[name] = shard
            total_size_bytes += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total_size_bytes}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(TINY_V2_CONFIG, f, indent=2)
        f.write("\n")


def write_tiny_v2(seed):
    out_dir = os.path.join(FIXTURE_DIR, "tiny-v2")
    os.makedirs(out_dir, exist_ok=True)
    for attempt_seed in range(seed, seed + 20):
        print(f"tiny-v2: seed {attempt_seed}")
        generator = torch.Generator().manual_seed(attempt_seed)
        model = modeling.DeepseekForCausalLM(modeling.ModelConfig.from_dict(TINY_V2_CONFIG))
        init_tiny_weights(model, generator)
        save_tiny_v2_checkpoint(model, out_dir)
        # Everything below uses the weights as stored, read back from the files.
        stored = modeling.load_model(TINY_V2_CONFIG, safetensors_io.load_checkpoint(out_dir))
        prompts = []
        for length in TINY_V2_PROMPT_LENGTHS:
            # Random ids, avoiding bos/eos so no engine treats them specially.
            input_ids = torch.randint(2, TINY_V2_CONFIG["vocab_size"], (length,), generator=generator).tolist()
            logits, greedy, logit_margin, routing_margin = greedy_reference(
                stored, input_ids, TINY_V2_CONFIG["eos_token_id"]
            )
            if not fixture_is_robust(f"prompt of {length} tokens", logit_margin, routing_margin):
                break
            prompts.append((input_ids, logits, greedy))
        if len(prompts) == len(TINY_V2_PROMPT_LENGTHS):
            metadata = {
                "model": "tiny-v2",
                "seed": str(attempt_seed),
                "num_prompts": str(len(prompts)),
                "greedy_tokens": str(NUM_GREEDY_TOKENS),
            }
            write_fixture(os.path.join(out_dir, "fixture.safetensors"), prompts, metadata)
            return
    raise RuntimeError("no seed gave robust tiny-v2 fixtures")


# ---- (d) quantized copies of the bundled model -------------------------------------------------

QUANT_SCHEMES = ["fp8-block", "int4-g32"]


def write_quant_fixtures(tokenizer, heldout_text, mlaserve_binary):
    import subprocess
    import tempfile

    bos_id = tokenizer.token_id("<|bos|>")
    eos_id = tokenizer.token_id("<|eos|>")
    short_candidates = ["ROMEO:\nO, she doth teach", "JULIET:\nWhat's in a name", "HAMLET:\nTo be, or not"]
    medium_candidates = [heldout_prompt(tokenizer, heldout_text, line, 55) for line in range(100, 400, 20)]
    os.makedirs(os.path.join(FIXTURE_DIR, "quant"), exist_ok=True)
    for scheme in QUANT_SCHEMES:
        with tempfile.TemporaryDirectory() as out_dir:
            subprocess.run(
                [mlaserve_binary, "quantize", "--model-path", MODEL_DIR, "--out", out_dir, "--weights", scheme], check=True
            )
            with open(os.path.join(out_dir, "config.json")) as f:
                config = json.load(f)
            tensors = dequantize.dequantize_checkpoint(safetensors_io.load_checkpoint(out_dir), config)
        model = modeling.load_model(config, tensors)
        prompts, texts = [], []
        for kind, candidates in (("short", short_candidates), ("medium", medium_candidates)):
            for text in candidates:
                input_ids = [bos_id] + tokenizer.encode(text)
                logits, greedy, logit_margin, routing_margin = greedy_reference(model, input_ids, eos_id)
                if fixture_is_robust(f"{scheme} {kind} prompt ({len(input_ids)} tokens)", logit_margin, routing_margin):
                    prompts.append((input_ids, logits, greedy))
                    texts.append(text)
                    break
            else:
                raise RuntimeError(f"no {kind} prompt with robust margins for {scheme}")
        metadata = {
            "model": "shakespeare-mla after mlaserve quantize --weights " + scheme,
            "prompts": json.dumps(texts, ensure_ascii=False),
            "num_prompts": str(len(prompts)),
            "greedy_tokens": str(NUM_GREEDY_TOKENS),
        }
        write_fixture(os.path.join(FIXTURE_DIR, "quant", scheme + ".safetensors"), prompts, metadata)


# ---- main --------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--parts", default="tokenizer,tiny-v2,shakespeare,mtp,eagle3,quant",
        help="comma list of: tokenizer, tiny-v2, shakespeare, mtp, eagle3, quant"
    )
    parser.add_argument(
        "--mlaserve", default=os.path.join(REPO_ROOT, "build", "mlaserve"), help="the binary that runs quantize (quant)"
    )
    parser.add_argument("--seed", type=int, default=7, help="first seed tried for tiny-v2")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parts = set(args.parts.split(","))
    unknown = parts - {"tokenizer", "tiny-v2", "shakespeare", "mtp", "eagle3", "quant"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")

    os.makedirs(FIXTURE_DIR, exist_ok=True)
    tokenizer = bpe.ByteLevelBPE.load(os.path.join(MODEL_DIR, "tokenizer.json"))
    with open(os.path.join(MODEL_DIR, "heldout.txt"), encoding="utf-8") as f:
        heldout_text = f.read()

    if "tokenizer" in parts:
        write_tokenizer_cases(tokenizer, heldout_text)
    if "tiny-v2" in parts:
        write_tiny_v2(args.seed)
    if "shakespeare" in parts:
        write_shakespeare_fixture(tokenizer, heldout_text)
    if "mtp" in parts:
        write_mtp_fixture(tokenizer, heldout_text)
    if "eagle3" in parts:
        write_eagle3_fixture(tokenizer, heldout_text)
    if "quant" in parts:
        write_quant_fixtures(tokenizer, heldout_text, args.mlaserve)


if __name__ == "__main__":
    main()
