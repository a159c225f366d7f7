"""Adds a DeepSeek-V3 multi-token-prediction (MTP / NEXTN) layer to the bundled model
models/shakespeare-mla and trains it, with the main model frozen.

The main model's tensors are read from model.safetensors and written back byte for byte (checked
after writing); the MTP layer's tensors are added under `model.layers.{L}.`, L = num_hidden_layers
(see modeling.MTPLayer), and config.json gets "num_nextn_predict_layers": 1.

Training data is train.py's training split; the loss is the cross-entropy of the MTP logits at
position j (pair (h_j, t_{j+1})) against t_{j+2}. Afterwards the script measures, on train.py's
held-out windows, with the weights as stored:
  (a) top-1 accuracy of the MTP against the text token t_{j+2};
  (b) greedy acceptance of draft 1: argmax mtp_logits_j == argmax target_logits_{j+1};
  (c) greedy acceptance of chained draft 2 (d_2 from the pair (g_j, d_1)) against the target's
      greedy token after its own greedy token, given that draft 1 was accepted;
prints them and writes them into the model card's "MTP layer" section.

Usage (from the repository root):
    /usr/bin/python3 tools/train/train_mtp.py               # train, write, measure (~26 min, 2 cores)
    /usr/bin/python3 tools/train/train_mtp.py --eval-only   # measure the stored MTP layer
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import modeling  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402

DEFAULT_MODEL_DIR = train.DEFAULT_OUT
CARD_SECTION = "## MTP layer"


# ---- data --------------------------------------------------------------------------------------


def mtp_batch(target, inputs, targets):
    """From a train.py window (inputs t_0..t_{S-1}, targets t_1..t_S, [batch, S] each) returns the
    MTP's inputs and labels over its S-1 positions: (h_0..h_{S-2} [batch, S-1, hidden],
    t_1..t_{S-1} [batch, S-1], labels t_2..t_S [batch, S-1]), plus the target's logits
    [batch, S, vocab]. The target runs without gradients."""
    with torch.no_grad():
        hidden = target.final_hidden(inputs)  # [batch, S, hidden]
        logits = F.linear(hidden, target.output_weight())
    return hidden[:, :-1], targets[:, :-1], targets[:, 1:], logits


# ---- training ----------------------------------------------------------------------------------


def train_mtp(mtp, target, train_ids, args, bos_id, log):
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = train.make_optimizer(mtp, args.lr, args.weight_decay)
    tokens_per_step = args.batch_size * args.seq_len
    start = time.time()
    smoothed_loss = None
    for step in range(args.steps):
        mtp.train()
        lr = train.learning_rate(step, args.steps, args.lr, args.warmup_steps, args.final_lr_fraction)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = train.sample_batch(train_ids, args.batch_size, args.seq_len, bos_id, generator)
        hidden, next_ids, labels, _ = mtp_batch(target, inputs, targets)
        _, logits = mtp(hidden, next_ids, target)  # [batch, S-1, vocab]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), args.grad_clip)
        optimizer.step()
        train.update_correction_biases(mtp, args.bias_step)  # aux-loss-free balancing of the MTP router

        smoothed_loss = loss.item() if smoothed_loss is None else 0.9 * smoothed_loss + 0.1 * loss.item()
        if step % args.log_every == 0 or step == args.steps - 1:
            elapsed_s = time.time() - start
            tokens_per_s = (step + 1) * tokens_per_step / elapsed_s
            log(
                f"step {step:5d}/{args.steps}  loss {loss.item():.4f}  smoothed {smoothed_loss:.4f}  "
                f"lr {lr:.2e}  {tokens_per_s:.0f} tok/s  {elapsed_s / 60:.1f} min"
            )
    wall_s = time.time() - start
    return {"steps": args.steps, "wall_s": wall_s, "final_train_loss": smoothed_loss,
            "tokens_per_s": args.steps * tokens_per_step / wall_s}


# ---- checkpoint --------------------------------------------------------------------------------


def mtp_tensors(mtp, target, original):
    """The MTP layer's checkpoint tensors: BF16, correction bias F32; the embed_tokens and
    shared_head.head copies are the stored main tensors themselves."""
    tensors = {}
    prefix = modeling.mtp_prefix(target.config)
    for name, tensor in modeling.mtp_checkpoint_names(mtp, target).items():
        if name == prefix + "embed_tokens.weight":
            tensors[name] = original["model.embed_tokens.weight"].clone()
        elif name == prefix + "shared_head.head.weight":
            tensors[name] = original["lm_head.weight"].clone()
        elif name.endswith("e_score_correction_bias"):
            tensors[name] = tensor.float().contiguous()
        else:
            tensors[name] = tensor.to(torch.bfloat16).contiguous()
    return tensors


def bits(tensor):
    """The tensor's stored bit pattern (same-size integer view), for byte-exact comparison."""
    view_dtype = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
    return tensor.view(view_dtype[tensor.dtype]) if tensor.dtype in view_dtype else tensor


def write_checkpoint(out_dir, original, metadata, mtp, target, config):
    tensors = dict(original)
    tensors.update(mtp_tensors(mtp, target, original))
    safetensors_io.save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def verify_checkpoint(out_dir, original, config, mtp, target, sample_ids):
    """Every main tensor is byte-identical to the original; the reloaded MTP layer computes
    exactly what the in-memory one does."""
    stored, _ = safetensors_io.load_file(os.path.join(out_dir, "model.safetensors"))
    for name, tensor in original.items():
        if stored[name].dtype != tensor.dtype or not torch.equal(bits(stored[name]), bits(tensor)):
            raise AssertionError(f"{name} changed")
    reloaded_target = modeling.load_model(config, stored)
    reloaded = modeling.load_mtp(config, stored, reloaded_target)
    with torch.no_grad():
        hidden = target.final_hidden(sample_ids)
        expected = mtp(hidden[:, :-1], sample_ids[:, 1:], target)[1]
        actual = reloaded(reloaded_target.final_hidden(sample_ids)[:, :-1], sample_ids[:, 1:], reloaded_target)[1]
    if not torch.equal(expected, actual):
        raise AssertionError("reloaded MTP layer differs from the in-memory one")
    return len(stored) - len(original)


# ---- measurement -------------------------------------------------------------------------------


@torch.no_grad()
def measure(mtp, target, heldout_ids, seq_len, bos_id, chain_stride, log):
    """The three figures on train.py's held-out windows (see the module docstring). Chained
    step 2 runs at window positions j = chain_stride-1, 2*chain_stride-1, ... (one extra target
    forward each, for its greedy token after its own greedy token)."""
    mtp.eval()
    loss_sum = 0.0
    text_hits = draft1_hits = positions = 0
    chain_tried = chain_draft1_hits = chain_draft2_hits = 0
    for inputs, targets in train.heldout_windows(heldout_ids, seq_len, bos_id):
        if inputs.shape[1] < 2:
            continue
        hidden, next_ids, labels, target_logits = mtp_batch(target, inputs, targets)
        g, logits = mtp(hidden, next_ids, target)  # [1, S-1, ...]
        drafts = logits[0].argmax(-1)  # [S-1]: d_1 at each MTP position j
        target_greedy = target_logits[0].argmax(-1)  # [S]: target's greedy token after t_0..t_j
        loss_sum += F.cross_entropy(logits[0], labels[0], reduction="sum").item()
        text_hits += (drafts == labels[0]).sum().item()
        draft1_hits += (drafts == target_greedy[1:]).sum().item()
        positions += drafts.numel()

        for j in range(chain_stride - 1, drafts.numel(), chain_stride):
            chain_tried += 1
            greedy1 = int(target_greedy[j + 1])
            if int(drafts[j]) != greedy1:
                continue
            chain_draft1_hits += 1
            # The target's greedy token after t_0..t_{j+1}, greedy1.
            extended = torch.cat((inputs[:, : j + 2], torch.tensor([[greedy1]])), dim=1)
            greedy2 = int(target(extended)[0, -1].argmax())
            # d_2: MTP position j+1 from the pair (g_j, d_1), over MTP positions 0..j+1.
            chain_hidden = torch.cat((hidden[:, : j + 1], g[:, j : j + 1]), dim=1)
            chain_ids = torch.cat((next_ids[:, : j + 1], drafts[None, j : j + 1]), dim=1)
            draft2 = int(mtp(chain_hidden, chain_ids, target)[1][0, -1].argmax())
            chain_draft2_hits += draft2 == greedy2
    figures = {
        "heldout_positions": positions,
        "mtp_loss": loss_sum / positions,
        "text_top1": text_hits / positions,
        "draft1_acceptance": draft1_hits / positions,
        "chain_positions": chain_tried,
        "chain_draft1_acceptance": chain_draft1_hits / chain_tried,
        "chain_draft2_given_draft1": chain_draft2_hits / max(1, chain_draft1_hits),
        "chain_both": chain_draft2_hits / chain_tried,
    }
    log(
        f"held-out MTP ({positions:,} positions): loss {figures['mtp_loss']:.4f}, "
        f"(a) top-1 vs text t_(j+2) {figures['text_top1']:.2%}, "
        f"(b) draft 1 == target greedy {figures['draft1_acceptance']:.2%}"
    )
    log(
        f"chained ({chain_tried} positions, every {chain_stride}th): draft 1 accepted {figures['chain_draft1_acceptance']:.2%}, "
        f"(c) draft 2 accepted given draft 1 {figures['chain_draft2_given_draft1']:.2%}, "
        f"both {figures['chain_both']:.2%}"
    )
    return figures


# ---- model card --------------------------------------------------------------------------------


def card_section(config, stats, figures, args, num_params):
    layer = config["num_hidden_layers"]
    kind = "MoE" if modeling.ModelConfig.from_dict(config).is_moe_layer(layer) else "dense"
    training = (
        f"- Training: {stats['steps']} AdamW steps, batch {args.batch_size} x {args.seq_len} tokens of the training split\n"
        f"  (train.py's windows), peak lr {args.lr:g}, {args.warmup_steps} warmup steps, cosine decay, seed {args.seed};\n"
        f"  main model frozen. Loss: cross-entropy of the MTP logits at j against t_(j+2).\n"
        f"  Wall time {stats['wall_s'] / 60:.1f} min on 2 CPU cores, fp32, {stats['tokens_per_s']:,.0f} tokens/s\n"
        f"  (cores shared with a C++ build). Final train loss (smoothed): {stats['final_train_loss']:.3f} nats.\n"
        if stats
        else "- Training: see the command below.\n"
    )
    return f"""{CARD_SECTION}
`num_nextn_predict_layers: 1`: one DeepSeek-V3 multi-token-prediction layer for speculative
decoding, HF index {layer} (`model.layers.{layer}.`, {num_params:,} parameters, {kind}, its own router
and `e_score_correction_bias`): `enorm`, `hnorm`, `eh_proj` [H, 2H], a full decoder block,
`shared_head.norm`, and the V3 copies `embed_tokens` and `shared_head.head` (byte copies of the
main embedding and `lm_head`, which the MTP shares).
- Math: MTP position j takes the target's final-normed hidden state h_j (what `lm_head`
  multiplies) and the next token t_(j+1):
  `x_j = eh_proj(concat(enorm(embed(t_(j+1))), hnorm(h_j)))`, the decoder block runs causally over
  the MTP positions with rope position j, `g_j = shared_head.norm(y_j)`, logits `g_j @ lm_head^T`
  predict t_(j+2). Chained drafts feed the pair (g_j, d) back in as the next position.
{training}- Held-out figures ({figures['heldout_positions']:,} MTP positions, train.py's held-out windows of {args.seq_len}, weights as stored):
  MTP loss {figures['mtp_loss']:.3f} nats;
  (a) top-1 accuracy against the text token t_(j+2): {figures['text_top1']:.1%};
  (b) draft 1 acceptance, argmax MTP == the target's greedy next-next token: {figures['draft1_acceptance']:.1%};
  (c) chained draft 2 (from (g_j, d_1)) == the target's greedy token after its own greedy token,
  given draft 1 accepted: {figures['chain_draft2_given_draft1']:.1%} (both accepted: {figures['chain_both']:.1%};
  {figures['chain_positions']} positions, every {args.chain_stride}th).
- Reproduce (after train.py; leaves the main tensors byte-identical):
  `/usr/bin/python3 tools/train/train_mtp.py{'' if args.steps == DEFAULT_STEPS else f' --steps {args.steps}'}`;
  `--eval-only` re-measures the stored layer. The measurement takes about as long as the
  training on 2 cores (the chained figure re-runs the target once per position).

"""


def update_card(path, section):
    """Replaces the card's MTP section (or inserts it before "## Sample")."""
    with open(path) as f:
        card = f.read()
    begin = card.find(CARD_SECTION)
    if begin >= 0:
        end = card.find("\n## ", begin + len(CARD_SECTION))
        card = card[:begin] + section + card[end + 1 :] if end >= 0 else card[:begin] + section
    else:
        anchor = card.find("## Sample")
        card = card[:anchor] + section + card[anchor:] if anchor >= 0 else card + "\n" + section
    with open(path, "w") as f:
        f.write(card)


# ---- main --------------------------------------------------------------------------------------

DEFAULT_STEPS = 200


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=train.DEFAULT_CORPUS, help="tinyshakespeare.txt")
    parser.add_argument("--model-dir", default=DEFAULT_MODEL_DIR, help="the trained model to add the layer to")
    parser.add_argument("--out", default=None, help="directory to write (default: --model-dir)")
    parser.add_argument("--eval-only", action="store_true", help="measure the stored MTP layer, write nothing")
    train.add_training_args(parser, steps=DEFAULT_STEPS, warmup_steps=30, seed=4321)
    parser.add_argument("--chain-stride", type=int, default=64, help="measure chained draft 2 every Nth position")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out_dir = args.out or args.model_dir

    def log(message):
        print(message, flush=True)

    train_text, heldout_text, tokenizer = train.split_for_model(args.corpus, args.model_dir)
    bos_id = tokenizer.token_id("<|bos|>")
    heldout_ids = torch.tensor(tokenizer.encode(heldout_text), dtype=torch.long)

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    main_config = modeling.ModelConfig.from_dict(config)
    stored, metadata = safetensors_io.load_file(os.path.join(args.model_dir, "model.safetensors"))
    original = {name: t for name, t in stored.items() if not modeling.is_mtp_tensor(main_config, name)}
    target = modeling.load_model(config, original)
    for param in target.parameters():
        param.requires_grad_(False)

    if args.eval_only:
        mtp = modeling.load_mtp(config, stored, target)
        measure(mtp, target, heldout_ids, args.seq_len, bos_id, args.chain_stride, log)
        return

    train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    log(f"data: {len(train_ids):,} train tokens, {len(heldout_ids):,} held-out tokens")
    # A full retrain writes this key too (train.model_config_json); keep the main model's order.
    config = {**config}
    if "num_nextn_predict_layers" not in config:
        items = list(config.items())
        at = [key for key, _ in items].index("num_hidden_layers") + 1
        config = dict(items[:at] + [("num_nextn_predict_layers", 1)] + items[at:])
    config["num_nextn_predict_layers"] = 1
    mtp_config = modeling.ModelConfig.from_dict(config)
    mtp = modeling.MTPLayer(mtp_config, mtp_config.num_hidden_layers)
    modeling.init_weights(mtp, args.init_std, generator=torch.Generator().manual_seed(args.seed))
    num_params = sum(p.numel() for p in mtp.parameters())
    log(f"MTP layer {mtp_config.num_hidden_layers}: {num_params:,} parameters; main model frozen")

    stats = train_mtp(mtp, target, train_ids, args, bos_id, log)
    train.round_weights_to_bf16(mtp)
    mtp.eval()

    os.makedirs(out_dir, exist_ok=True)
    write_checkpoint(out_dir, original, metadata, mtp, target, config)
    added = verify_checkpoint(out_dir, original, config, mtp, target, heldout_ids[None, :64])
    log(f"checkpoint: {len(original)} main tensors byte-identical, {added} MTP tensors added; reload exact")

    figures = measure(mtp, target, heldout_ids, args.seq_len, bos_id, args.chain_stride, log)
    card_path = os.path.join(out_dir, "README.md")
    if not os.path.exists(card_path):
        with open(os.path.join(args.model_dir, "README.md")) as src, open(card_path, "w") as dst:
            dst.write(src.read())
    update_card(card_path, card_section(config, stats, figures, args, num_params))
    log(f"done: {stats['wall_s'] / 60:.1f} min training, {stats['tokens_per_s']:.0f} tokens/s; files in {out_dir}")


if __name__ == "__main__":
    main()
