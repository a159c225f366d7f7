"""Trains the bundled model models/shakespeare-mla: a byte-level BPE tokenizer, then a tiny
DeepSeek-V3-style MLA + MoE model on tinyshakespeare, and writes an HF-style model directory.

Usage (from the repository root):
    /usr/bin/python3 tools/train/train.py                   # tokenizer + model (~20 min, 2 cores)
    /usr/bin/python3 tools/train/train.py --tokenizer-only  # tokenizer files only (seconds)

The last 10% of the corpus (cut at a line boundary) is held out: never used for the tokenizer or
the model, written verbatim to heldout.txt, and used for the held-out loss.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import modeling  # noqa: E402
import safetensors_io  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_CORPUS = os.path.join(REPO_ROOT, "..", "shared", "data", "tinyshakespeare.txt")
DEFAULT_OUT = os.path.join(REPO_ROOT, "models", "shakespeare-mla")

VOCAB_SIZE = 2048
HELDOUT_FRACTION = 0.1


def model_config_json(bos_token_id, eos_token_id):
    """config.json of the bundled model, in Hugging Face DeepSeek-V3 form."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 256,
        "intermediate_size": 768,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 4,
        # One MTP layer (model.layers.4.*), added and trained by train_mtp.py; train.py writes
        # only the main model.
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "routed_scaling_factor": 2.5,
        "n_group": 4,
        "topk_group": 2,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": 128,
        "kv_lora_rank": 128,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32,
        "v_head_dim": 64,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_interleave": True,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def split_corpus(text):
    """(train, heldout): heldout is the last ~10%, starting at the beginning of a line."""
    cut = text.rfind("\n", 0, int(len(text) * (1 - HELDOUT_FRACTION))) + 1
    return text[:cut], text[cut:]


def split_for_model(corpus_path, model_dir):
    """(train text, held-out text, tokenizer) of a trained model directory: the corpus split as
    train.py made it, checked against the model's heldout.txt, and the model's tokenizer."""
    with open(corpus_path, encoding="utf-8") as f:
        train_text, heldout_text = split_corpus(f.read())
    with open(os.path.join(model_dir, "heldout.txt"), encoding="utf-8") as f:
        if f.read() != heldout_text:
            raise AssertionError(f"the corpus split differs from {model_dir}/heldout.txt")
    return train_text, heldout_text, bpe.ByteLevelBPE.load(os.path.join(model_dir, "tokenizer.json"))


# ---- data --------------------------------------------------------------------------------------


def sample_batch(train_ids, batch_size, seq_len, bos_id, generator):
    """Random windows. inputs: [batch, seq] = <|bos|> + seq-1 tokens; targets: [batch, seq]."""
    starts = torch.randint(0, len(train_ids) - seq_len, (batch_size,), generator=generator)
    targets = torch.stack([train_ids[s : s + seq_len] for s in starts.tolist()])  # [batch, seq]
    bos = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    inputs = torch.cat((bos, targets[:, :-1]), dim=1)
    return inputs, targets


def heldout_windows(ids, seq_len, bos_id):
    """Consecutive windows covering every held-out token exactly once as a target."""
    for begin in range(0, len(ids), seq_len):
        targets = ids[begin : begin + seq_len]
        inputs = torch.cat((torch.tensor([bos_id]), targets[:-1]))
        yield inputs[None], targets[None]  # [1, n] each


@torch.no_grad()
def evaluate(model, ids, seq_len, bos_id):
    """Per-token mean negative log-likelihood (nats), teacher forced."""
    model.eval()
    total_nll, total_tokens = 0.0, 0
    for inputs, targets in heldout_windows(ids, seq_len, bos_id):
        logits = model(inputs)  # [1, n, vocab]
        total_nll += F.cross_entropy(logits[0], targets[0], reduction="sum").item()
        total_tokens += targets.numel()
    return total_nll / total_tokens


@torch.no_grad()
def generate(model, prompt_ids, num_new_tokens, temperature, top_k, generator, eos_id=None):
    """Samples a continuation by re-running the whole sequence each step (no KV cache)."""
    ids = list(prompt_ids)
    for _ in range(num_new_tokens):
        logits = model(torch.tensor([ids]))[0, -1]  # [vocab]
        if temperature == 0:
            next_id = int(logits.argmax())
        else:
            top_logits, top_ids = (logits / temperature).topk(top_k)
            choice = torch.multinomial(top_logits.softmax(-1), 1, generator=generator)
            next_id = int(top_ids[choice])
        ids.append(next_id)
        if next_id == eos_id:
            break
    return ids


# ---- training ----------------------------------------------------------------------------------


def learning_rate(step, total_steps, peak_lr, warmup_steps, final_lr_fraction):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return peak_lr * (final_lr_fraction + (1 - final_lr_fraction) * cosine)


def update_correction_biases(model, bias_step):
    """Aux-loss-free balancing (DeepSeek-V3): raise the bias of under-loaded experts, lower it
    for over-loaded ones, by a fixed step."""
    with torch.no_grad():
        for moe in model.moe_layers():
            load = moe.last_tokens_per_expert.float()  # [experts]
            moe.gate.e_score_correction_bias += bias_step * torch.sign(load.mean() - load)


def make_optimizer(model, lr, weight_decay):
    """AdamW; matrices other than the embedding decay, norms and the embedding do not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() == 2 and "embed_tokens" not in name else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train(model, train_ids, args, bos_id, log):
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    tokens_per_step = args.batch_size * args.seq_len
    start = time.time()
    smoothed_loss = None
    for step in range(args.steps):
        model.train()
        lr = learning_rate(step, args.steps, args.lr, args.warmup_steps, args.final_lr_fraction)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = sample_batch(train_ids, args.batch_size, args.seq_len, bos_id, generator)
        logits = model(inputs)  # [batch, seq, vocab]
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        update_correction_biases(model, args.bias_step)

        smoothed_loss = loss.item() if smoothed_loss is None else 0.9 * smoothed_loss + 0.1 * loss.item()
        if step % args.log_every == 0 or step == args.steps - 1:
            elapsed_s = time.time() - start
            tokens_per_s = (step + 1) * tokens_per_step / elapsed_s
            log(
                f"step {step:5d}/{args.steps}  loss {loss.item():.4f}  smoothed {smoothed_loss:.4f}  "
                f"lr {lr:.2e}  {tokens_per_s:.0f} tok/s  {elapsed_s / 60:.1f} min"
            )
    return {"steps": args.steps, "wall_s": time.time() - start, "final_train_loss": smoothed_loss}


# ---- checkpoint --------------------------------------------------------------------------------


def round_weights_to_bf16(model):
    """Rounds every parameter to bf16 in place (kept as fp32), so the in-memory model computes
    exactly what the saved checkpoint computes. Correction biases stay fp32 (stored as F32)."""
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).float())


def checkpoint_tensors(model):
    tensors = {}
    for name, tensor in model.state_dict().items():
        is_bias = name.endswith("e_score_correction_bias")
        tensors[name] = tensor.float().contiguous() if is_bias else tensor.to(torch.bfloat16).contiguous()
    return tensors


def save_checkpoint(model, config, out_dir):
    safetensors_io.save_file(checkpoint_tensors(model), os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def verify_checkpoint(model, config, out_dir, sample_ids):
    """Reloads the written files and checks the logits equal the in-memory model's."""
    tensors, _ = safetensors_io.load_file(os.path.join(out_dir, "model.safetensors"))
    reloaded = modeling.load_model(config, tensors)
    with torch.no_grad():
        model.eval()
        expected = model(sample_ids)
        actual = reloaded(sample_ids)
    max_abs_diff = (expected - actual).abs().max().item()
    if max_abs_diff != 0.0:
        raise AssertionError(f"reloaded checkpoint differs from the in-memory model by {max_abs_diff}")
    return max_abs_diff


def write_model_card(out_dir, config, num_params, stats, sample_text, sample_settings, corpus_chars):
    moe_layers = [i for i in range(config["num_hidden_layers"]) if modeling.ModelConfig.from_dict(config).is_moe_layer(i)]
    card = f"""# shakespeare-mla

A tiny DeepSeek-V3-architecture model (MLA attention + routed/shared MoE) trained from scratch
on tinyshakespeare, bundled with mlaserve for tests, demos and benchmarks. It is a toy: it writes
Shakespeare-shaped text, not sense.

## Architecture (`config.json`)
- `DeepseekV3ForCausalLM`, {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, {config['num_attention_heads']} heads, vocab {config['vocab_size']}.
- MLA: q_lora_rank {config['q_lora_rank']}, kv_lora_rank {config['kv_lora_rank']}, qk_nope/rope/v head dims
  {config['qk_nope_head_dim']}/{config['qk_rope_head_dim']}/{config['v_head_dim']}, rope_theta {config['rope_theta']:g}, rope_interleave true, no rope scaling.
  KV cache per token per layer: {config['kv_lora_rank']} + {config['qk_rope_head_dim']} = {config['kv_lora_rank'] + config['qk_rope_head_dim']} values.
- MoE on layers {moe_layers} (layer 0 dense, intermediate {config['intermediate_size']}): {config['n_routed_experts']} routed experts
  + {config['n_shared_experts']} shared, width {config['moe_intermediate_size']}, top-{config['num_experts_per_tok']}; sigmoid scores,
  `noaux_tc` routing with {config['n_group']} groups / top-{config['topk_group']} groups, normalized top-k weights,
  routed_scaling_factor {config['routed_scaling_factor']}. Trained with aux-loss-free balancing
  (`e_score_correction_bias`, stored as F32).
- Parameters: {num_params:,} (untied embeddings and lm_head). Weights stored as BF16 in `model.safetensors`.

## Tokenizer
Byte-level BPE (GPT-2 regex split and byte map), {config['vocab_size']} tokens: 256 byte symbols,
{config['vocab_size'] - 256 - len(bpe.SPECIAL_TOKENS)} merges, then the special tokens {', '.join('`' + t + '`' for t in bpe.SPECIAL_TOKENS)}
(ids {config['vocab_size'] - len(bpe.SPECIAL_TOKENS)}..{config['vocab_size'] - 1}). Hugging Face `tokenizer.json` format;
`tokenizer_config.json` adds `<|bos|>` to every prompt. Trained on the training split only.

## Training
- Data: tinyshakespeare ({corpus_chars:,} characters). The last 10% (cut at a line boundary) is
  held out, never trained on, and shipped verbatim as `heldout.txt`.
- {stats['steps']} AdamW steps, batch {stats['batch_size']} x {stats['seq_len']} tokens (each window starts with `<|bos|>`),
  peak lr {stats['lr']:g} with {stats['warmup_steps']} warmup steps and cosine decay, seed {stats['seed']}.
- Wall time: {stats['wall_s'] / 60:.1f} min on 2 CPU cores, fp32, {stats['steps'] * stats['batch_size'] * stats['seq_len'] / stats['wall_s']:,.0f} tokens/s
  (throughput depends on other load on the cores: ~1,150 tokens/s, ~18 min, on an idle machine).
- Final train loss (smoothed): {stats['final_train_loss']:.3f} nats/token.
- Held-out loss: {stats['heldout_loss']:.3f} nats/token, perplexity {math.exp(stats['heldout_loss']):.1f}
  ({stats['heldout_tokens']:,} tokens, teacher forced, windows of {stats['seq_len']} starting with `<|bos|>`, BF16 weights).

## Sample
{sample_settings}:

```
{sample_text}
```

## Reproduce
From the repository root (after `sh tools/train/setup.sh`):

```
/usr/bin/python3 tools/train/train.py
```

The run is seeded; results can differ in the last bits with a different BLAS or thread count.
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(card)


# ---- main --------------------------------------------------------------------------------------


def add_training_args(parser, steps, warmup_steps, seed):
    """The optimizer and run flags shared with train_mtp.py, with the caller's defaults."""
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=warmup_steps)
    parser.add_argument("--final-lr-fraction", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--bias-step", type=float, default=1e-3, help="aux-loss-free balancing gamma")
    parser.add_argument("--init-std", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=25)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=DEFAULT_CORPUS, help="tinyshakespeare.txt")
    parser.add_argument("--out", default=DEFAULT_OUT, help="model directory to write")
    parser.add_argument("--tokenizer-only", action="store_true", help="write the tokenizer files and stop")
    add_training_args(parser, steps=600, warmup_steps=50, seed=1234)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    def log(message):
        print(message, flush=True)

    with open(args.corpus, encoding="utf-8") as f:
        corpus = f.read()
    train_text, heldout_text = split_corpus(corpus)
    os.makedirs(args.out, exist_ok=True)

    start = time.time()
    tokenizer = bpe.train_bpe(train_text, VOCAB_SIZE, log=log)
    tokenizer.save(args.out)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(heldout_text)
    log(f"tokenizer: {tokenizer.vocab_size} tokens in {time.time() - start:.1f} s -> {args.out}")
    if args.tokenizer_only:
        return

    bos_id = tokenizer.token_id("<|bos|>")
    eos_id = tokenizer.token_id("<|eos|>")
    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    heldout_ids = torch.tensor(tokenizer.encode(heldout_text), dtype=torch.long)
    log(f"data: {len(train_ids):,} train tokens, {len(heldout_ids):,} held-out tokens")

    config = model_config_json(bos_id, eos_id)
    model = modeling.DeepseekForCausalLM(modeling.ModelConfig.from_dict(config))
    modeling.init_weights(model, args.init_std)
    num_params = sum(p.numel() for p in model.parameters())
    log(f"model: {num_params:,} parameters")

    stats = train(model, train_ids, args, bos_id, log)
    stats.update(
        batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr, warmup_steps=args.warmup_steps, seed=args.seed
    )

    round_weights_to_bf16(model)
    model.eval()
    save_checkpoint(model, config, args.out)
    verify_checkpoint(model, config, args.out, heldout_ids[None, :64])
    log("checkpoint: reloaded model.safetensors reproduces the in-memory logits exactly")

    stats["heldout_loss"] = evaluate(model, heldout_ids, args.seq_len, bos_id)
    stats["heldout_tokens"] = len(heldout_ids)
    log(f"held-out: loss {stats['heldout_loss']:.4f}, perplexity {math.exp(stats['heldout_loss']):.2f}")

    prompt = "ROMEO:\n"
    sample_settings = f"Prompt `{prompt.strip()}` + newline, 160 tokens, temperature 0.8, top-k 40, seed {args.seed}"
    sample_ids = generate(
        model,
        [bos_id] + tokenizer.encode(prompt),
        160,
        temperature=0.8,
        top_k=40,
        generator=torch.Generator().manual_seed(args.seed),
        eos_id=eos_id,
    )
    sample_text = tokenizer.decode(sample_ids[1:])
    log("sample:\n" + sample_text)

    write_model_card(args.out, config, num_params, stats, sample_text, sample_settings, len(corpus))
    log(f"done: {stats['wall_s'] / 60:.1f} min training; files in {args.out}")


if __name__ == "__main__":
    main()
