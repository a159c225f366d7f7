"""Trains an EAGLE-3 draft model for the bundled model models/shakespeare-mla from the target's
own regenerated outputs, writes models/shakespeare-mla-eagle3/, and measures it on held-out text.

Workflow (scripts/train-eagle3.sh runs it end to end):
  1. `train_eagle3.py --write-prompts FILE`: prompts for `mlaserve batch`, windows of train.py's
     TRAINING split (never held-out text) starting at line beginnings, as plain-prompt JSONL;
  2. `mlaserve batch --model-path models/shakespeare-mla --chat-template <plain> --dump-hidden-states
     DIR --hidden-layers 1,2,3 --temperature 0` regenerates the answers and dumps the target's
     hidden states (docs/batch.md, "Hidden states");
  3. `train_eagle3.py --data DIR`: picks the draft vocabulary, trains with EAGLE-3's
     training-time test (eagle3.py), writes the draft (bf16), then measures on train.py's held-out
     windows against the fp32 reference target (modeling.py):
       (a) draft-1 acceptance: argmax draft == the target's greedy next token;
       (b) chained draft 2 accepted given draft 1;
       (c) mean accept length of greedy verification with 3 chained drafts
           (1 + accepted drafts per verify step), decoding greedily from held-out prompts;
       (d) the draft vocabulary's coverage of held-out target tokens;
     prints them and writes them into the model card.
  `--eval-only` re-measures the stored draft.

Usage (from the repository root, after scripts/build.sh):
    scripts/train-eagle3.sh                                          # all three (~25 min, 2 cores)
    /usr/bin/python3 tools/train/train_eagle3.py --data DIR          # train + measure (~15 + ~5 min)
    /usr/bin/python3 tools/train/train_eagle3.py --eval-only         # measure the stored draft (~5 min)
Training is bounded by --max-minutes (default 15; 0: exactly --steps, reproducible).
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
import eagle3  # noqa: E402
import load_hidden_states  # noqa: E402
import modeling  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402

TARGET_DIR = train.DEFAULT_OUT
DEFAULT_OUT = os.path.join(train.REPO_ROOT, "models", "shakespeare-mla-eagle3")
# The target's capture indices (`--hidden-layers`): the residual stream entering layers 1, 2, 3 =
# the outputs of layers 0, 1, 2 (the config's eagle_aux_hidden_state_layer_ids).
HIDDEN_LAYERS = [1, 2, 3]
# A Jinja chat template that renders a prompt as `<|bos|>` + its text, as the model was trained.
PLAIN_TEMPLATE = '{{ bos_token }}{% for m in messages %}{{ m["content"] }}{% endfor %}'


# ---- prompts -----------------------------------------------------------------------------------


def write_prompts(path, tokenizer, train_text, count, min_tokens, max_tokens, seed):
    """`count` plain-prompt JSONL records: windows of min..max tokens of the training split, each
    starting at a line beginning, decoded back to text."""
    ids = tokenizer.encode(train_text)
    line_starts = [i for i in range(1, len(ids) - max_tokens) if tokenizer.decode([ids[i - 1]]).endswith("\n")]
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(line_starts), (count,), generator=generator).tolist()
    lengths = torch.randint(min_tokens, max_tokens + 1, (count,), generator=generator).tolist()
    with open(path, "w", encoding="utf-8") as out:
        for k, (pick, length) in enumerate(zip(picks, lengths)):
            start = line_starts[pick]
            text = tokenizer.decode(ids[start : start + length])
            out.write(json.dumps({"id": f"p{k:05d}", "prompt": text}) + "\n")


# ---- data --------------------------------------------------------------------------------------


def load_records(dump_dir, log):
    """[(input_ids int64 [n], aux bf16 [n-1, C*H])] of every record of the dump."""
    records = []
    for entry, ids, rows in load_hidden_states.load_dump(dump_dir):
        if entry["layers"] != HIDDEN_LAYERS:
            raise SystemExit(f"{dump_dir}: layers {entry['layers']}, expected --hidden-layers {HIDDEN_LAYERS}")
        records.append((ids.long(), rows.flatten(1)))
    tokens = sum(ids.numel() for ids, _ in records)
    log(f"data: {len(records):,} records, {tokens:,} tokens from {dump_dir}")
    return records


def pick_vocab(records, vocab_size, draft_vocab_size):
    """The draft vocabulary: the draft_vocab_size most frequent target tokens of the training
    data (every token after the first of each record; ties by id), as ascending target ids."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, _ in records:
        counts += torch.bincount(ids[1:], minlength=vocab_size)
    order = sorted(range(vocab_size), key=lambda t: (-int(counts[t]), t))
    return torch.tensor(sorted(order[:draft_vocab_size]), dtype=torch.long)


def make_batch(records, picks, steps, target_to_draft):
    """Pads the picked records into aux [b, R, C*H] (R = the longest n-1), ids [b, R + steps - 1]
    (t_1.., padded with 0) and labels [steps][b, R] (draft ids of t_{p+j+1}; -100 where past the
    record or outside the draft vocabulary)."""
    rows = max(records[i][1].shape[0] for i in picks)
    aux = torch.zeros(len(picks), rows, records[picks[0]][1].shape[1])
    ids = torch.zeros(len(picks), rows + steps, dtype=torch.long)  # t_1 .. t_{R+steps}
    valid = torch.zeros(len(picks), rows + steps, dtype=torch.bool)
    for b, i in enumerate(picks):
        tokens, hidden = records[i]
        aux[b, : hidden.shape[0]] = hidden.float()
        ids[b, : tokens.numel() - 1] = tokens[1:]
        valid[b, : tokens.numel() - 1] = True
    mapped = torch.where(valid, target_to_draft[ids], torch.full_like(ids, -100))
    labels = [mapped[:, j + 1 : j + 1 + rows] for j in range(steps)]  # step j+1 predicts t_{p+j+2}
    return aux, ids[:, : rows + steps - 1], labels


# ---- training ----------------------------------------------------------------------------------


def train_draft(draft, records, args, log):
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = train.make_optimizer(draft, args.lr, args.weight_decay)
    target_to_draft = torch.full((draft.t2d.numel(),), -100, dtype=torch.long)
    target_to_draft[draft.draft_ids()] = torch.arange(draft.d2t.numel())
    step_weights = [args.step_decay**j for j in range(args.ttt_steps)]
    start = time.time()
    rows_seen = 0
    smoothed = None
    order = torch.randperm(len(records), generator=generator).tolist()
    cursor = 0
    budget_s = 60 * args.max_minutes
    step = 0
    while True:
        # The schedule runs on the larger of the step count and the share of the time budget
        # spent, so a slow machine ends the cosine decay on time with fewer steps.
        progress_step = max(step, int(args.steps * (time.time() - start) / budget_s)) if budget_s else step
        if progress_step >= args.steps:
            break
        draft.train()
        lr = train.learning_rate(progress_step, args.steps, args.lr, args.warmup_steps, args.final_lr_fraction)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if cursor + args.batch_size > len(order):
            order = torch.randperm(len(records), generator=generator).tolist()
            cursor = 0
        picks = order[cursor : cursor + args.batch_size]
        cursor += args.batch_size
        aux, ids, labels = make_batch(records, picks, args.ttt_steps, target_to_draft)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            step_logits = draft.ttt_forward(aux, ids, args.ttt_steps)
        losses = [
            F.cross_entropy(lg.float().flatten(0, 1), lb.flatten(), ignore_index=-100) for lg, lb in zip(step_logits, labels)
        ]
        loss = sum(w * l for w, l in zip(step_weights, losses))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), args.grad_clip)
        optimizer.step()
        rows_seen += sum(records[i][1].shape[0] for i in picks)
        per_step = [round(l.item(), 3) for l in losses]
        smoothed = per_step if smoothed is None else [0.9 * s + 0.1 * l for s, l in zip(smoothed, per_step)]
        if step % args.log_every == 0 or progress_step == args.steps - 1:
            elapsed_s = time.time() - start
            log(
                f"step {step:5d} (schedule {progress_step}/{args.steps})  loss per TTT step {per_step}  "
                f"smoothed {[round(s, 3) for s in smoothed]}  lr {lr:.2e}  {rows_seen / elapsed_s:.0f} rows/s  "
                f"{elapsed_s / 60:.1f} min"
            )
        step += 1
    wall_s = time.time() - start
    return {"steps": step, "wall_s": wall_s, "rows_per_s": rows_seen / wall_s, "rows_seen": rows_seen,
            "final_losses": smoothed}


# ---- measurement -------------------------------------------------------------------------------


@torch.no_grad()
def target_pass(target, tokens):
    """The fp32 reference target over tokens [n]: (aux [1, n, C*H], the captured rows a_p, and
    logits [n, vocab], the target's next-token logits after t_0..t_p)."""
    layers = HIDDEN_LAYERS + [target.config.num_hidden_layers]
    rows = load_hidden_states.reference_rows(target, torch.cat((tokens, tokens[-1:])), layers)  # [n, C+1, H]
    logits = F.linear(target.model.norm(rows[:, -1]), target.output_weight())
    return rows[:, :-1].flatten(1)[None], logits


def heldout_prompts(heldout_ids, count, prompt_tokens, bos_id):
    """`count` prompts of `prompt_tokens` held-out tokens (after `<|bos|>`), evenly spaced."""
    stride = (len(heldout_ids) - prompt_tokens) // count
    return [torch.cat((torch.tensor([bos_id]), heldout_ids[k * stride : k * stride + prompt_tokens])) for k in range(count)]


@torch.no_grad()
def measure(draft, target, heldout_ids, bos_id, args, log):
    """The figures of the module docstring. (a) and (d) on train.py's held-out windows
    (teacher forced on the text); (b) and (c) from greedy speculative decoding: the target's
    greedy continuations of held-out prompts, drafted with `--num-drafts` chained drafts per
    verify step."""
    draft.eval()
    in_vocab = draft.t2d
    text_tokens = text_in_vocab = greedy_tokens = greedy_in_vocab = rows = draft1_hits = 0
    for w, (inputs, _) in enumerate(train.heldout_windows(heldout_ids, args.eval_seq_len, bos_id)):
        if args.eval_windows and w == args.eval_windows:
            break
        tokens = inputs[0]
        if tokens.numel() < 3:
            continue
        aux, target_logits = target_pass(target, tokens)
        greedy = target_logits.argmax(-1)
        _, logits = draft(aux[:, :-1], tokens[None, 1:])  # rows 0..n-2, pairs (a_p, t_{p+1})
        drafts = draft.to_target(logits[0].argmax(-1))
        draft1_hits += int((drafts == greedy[1:]).sum())
        rows += drafts.numel()
        text_tokens += tokens.numel() - 1
        text_in_vocab += int(in_vocab[tokens[1:]].sum())
        greedy_tokens += greedy.numel()
        greedy_in_vocab += int(in_vocab[greedy].sum())
    figures = {
        "heldout_rows": rows,
        "draft1_acceptance": draft1_hits / rows,
        "coverage_text": text_in_vocab / text_tokens,
        "coverage_greedy": greedy_in_vocab / greedy_tokens,
    }
    log(
        f"held-out windows ({rows:,} rows): (a) draft 1 == target greedy {figures['draft1_acceptance']:.2%}; "
        f"(d) draft-vocab coverage: held-out text tokens {figures['coverage_text']:.2%}, "
        f"target greedy tokens {figures['coverage_greedy']:.2%}"
    )

    cycles = accepted = d1_hits = d2_hits = generated = 0
    histogram = [0] * (args.num_drafts + 1)
    start = time.time()
    for prompt in heldout_prompts(heldout_ids, args.decode_prompts, args.decode_prompt_tokens, bos_id):
        sequence = torch.tensor(train.generate(target, prompt.tolist(), args.decode_tokens, 0, 1, None))
        generated += args.decode_tokens
        aux, _ = target_pass(target, sequence)
        full = eagle3.DraftCache()
        o, logits = draft(aux[:, :-1], sequence[None, 1:], full)  # every row the target verifies
        m = prompt.numel()  # t_0..t_m known: the prompt and the target's first token
        while m + args.num_drafts < sequence.numel():
            cache = eagle3.DraftCache()
            cache.k, cache.v = full.k[:, :m], full.v[:, :m]
            drafts = draft.chain(cache, o[:, m - 1 : m], logits[:, m - 1 : m], args.num_drafts)[0]
            hits = (drafts == sequence[m + 1 : m + 1 + args.num_drafts]).tolist()
            k = hits.index(False) if False in hits else len(hits)
            cycles += 1
            accepted += k
            histogram[k] += 1
            d1_hits += hits[0]
            d2_hits += hits[0] and hits[1]
            m += k + 1
    figures.update(
        decode_prompts=args.decode_prompts,
        decode_cycles=cycles,
        decode_draft1=d1_hits / cycles,
        decode_draft2_given_draft1=d2_hits / max(1, d1_hits),
        mean_accept_length=1 + accepted / cycles,
        accept_histogram=histogram,
    )
    log(
        f"greedy decoding ({args.decode_prompts} held-out prompts of {args.decode_prompt_tokens} tokens, "
        f"{args.decode_tokens} target tokens each, {cycles} verify steps, {args.num_drafts} chained drafts, "
        f"{time.time() - start:.0f} s): draft 1 accepted {figures['decode_draft1']:.2%}, "
        f"(b) draft 2 accepted given draft 1 {figures['decode_draft2_given_draft1']:.2%}, "
        f"(c) mean accept length {figures['mean_accept_length']:.3f} (verify steps by drafts accepted: {histogram})"
    )
    return figures


# ---- model card --------------------------------------------------------------------------------


def write_card(out_dir, config, stats, figures, args, num_params, data_summary):
    ids = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    if stats:
        training = f"""- Data: {data_summary}.
- Training: {stats['steps']} AdamW steps of {args.batch_size} records (padded; schedule of {args.steps} steps within {args.max_minutes:g} min), peak lr {args.lr:g},
  {args.warmup_steps} warmup steps, cosine decay, weight decay {args.weight_decay:g}, seed {args.seed};
  EAGLE-3 training-time test with {args.ttt_steps} steps, step j weighted {args.step_decay:g}^(j-1), inputs teacher-forced
  (step j at row p embeds the true token t_(p+j); its hidden is step j-1's o at row p, gradients flowing
  through). Labels: the record's tokens (the target's own greedy tokens in the answers, the text
  in the prompts) mapped to the draft vocabulary; tokens outside it are not trained on.
  {stats['rows_seen']:,} rows in {stats['wall_s'] / 60:.1f} min on 2 CPU cores ({'bf16 autocast, fp32 master weights' if args.autocast else 'fp32'}; nice, cores shared with a C++ build),
  {stats['rows_per_s']:,.0f} rows/s (a row counts once for all {args.ttt_steps} TTT steps).
  Final smoothed loss per TTT step: {stats['final_losses'] and [round(x, 3) for x in stats['final_losses']]} nats.
"""
    else:
        training = "- Training: see Reproduce.\n"
    card = f"""# shakespeare-mla-eagle3

An EAGLE-3 draft model for the bundled target `models/shakespeare-mla` (speculative decoding),
in SpecForge/SGLang's `LlamaForCausalLMEagle3` layout, trained on the target's own greedy
outputs. A toy, like its target.

## Architecture (`config.json`)
- One Llama decoder layer (`midlayer.`) over [input_layernorm(embed(t)) | hidden_norm(h)] (2H = {2 * config['hidden_size']} wide):
  {config['num_attention_heads']} query heads, {config['num_key_value_heads']} KV heads (GQA), head_dim {config['head_dim']}, rotate_half RoPE theta {config['rope_theta']:g},
  SiLU MLP {config['intermediate_size']}; `fc` [{config['hidden_size']}, {3 * config['target_hidden_size']}] maps the target's three captured rows to H.
- Target layers: `eagle_aux_hidden_state_layer_ids` {ids} (outputs of target layers {ids}, i.e. the
  residual stream entering layers {[k + 1 for k in ids]}: `mlaserve batch --hidden-layers {','.join(str(k + 1) for k in ids)}`).
- No `embed_tokens`: tokens are embedded with the target's `model.embed_tokens`.
- Draft vocabulary: {config['draft_vocab_size']} of the target's {config['vocab_size']} tokens (the most frequent in the
  training data, ties by id), draft id order = ascending target id; `d2t` I64 (target id = draft id +
  d2t[draft id]), `t2d` BOOL [{config['vocab_size']}].
- {num_params:,} parameters, BF16 (`d2t`, `t2d` excepted).
- Math: tools/train/eagle3.py (the reference); row p pairs the target's rows a_p with t_(p+1) and
  predicts t_(p+2); chained drafts feed back o (the layer's output before `norm`).

## Training
{training}
## Held-out figures
Measured by `train_eagle3.py` against the fp32 PyTorch reference target (tools/train/modeling.py), weights as stored:
- (a) draft 1 acceptance, argmax draft == the target's greedy next token, on train.py's held-out
  windows of {args.eval_seq_len} ({'the first ' + str(args.eval_windows) if args.eval_windows else 'all'}; teacher forced on the text, {figures['heldout_rows']:,} rows): {figures['draft1_acceptance']:.1%};
- greedy speculative decoding from {figures['decode_prompts']} held-out prompts of {args.decode_prompt_tokens} tokens, {args.decode_tokens} target tokens
  each, {args.num_drafts} chained drafts per verify step ({figures['decode_cycles']} verify steps): draft 1 accepted {figures['decode_draft1']:.1%};
  (b) chained draft 2 accepted given draft 1: {figures['decode_draft2_given_draft1']:.1%};
  (c) mean accept length (1 + accepted drafts per verify step): {figures['mean_accept_length']:.2f}
  (verify steps by drafts accepted 0..{args.num_drafts}: {figures['accept_histogram']});
- (d) draft vocabulary coverage: {figures['coverage_text']:.1%} of held-out text tokens, {figures['coverage_greedy']:.1%} of the
  target's greedy tokens on the held-out windows.

## Reproduce
After building mlaserve (`scripts/build.sh`), from the repository root:

```
scripts/train-eagle3.sh            # regenerate with build/mlaserve batch, train, measure
/usr/bin/python3 tools/train/train_eagle3.py --eval-only   # re-measure the stored draft
```
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(card)


# ---- main --------------------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=train.DEFAULT_CORPUS, help="tinyshakespeare.txt")
    parser.add_argument("--target", default=TARGET_DIR, help="the target model directory")
    parser.add_argument("--out", default=DEFAULT_OUT, help="draft directory to write (or measure)")
    parser.add_argument("--write-prompts", metavar="FILE", help="write the training prompts (JSONL) and the plain chat template (FILE.jinja), then stop")
    parser.add_argument("--num-prompts", type=int, default=4000)
    parser.add_argument("--prompt-tokens", type=int, nargs=2, default=[32, 96], metavar=("MIN", "MAX"))
    parser.add_argument("--data", help="the `mlaserve batch --dump-hidden-states` directory to train on")
    parser.add_argument("--eval-only", action="store_true", help="measure the stored draft, write nothing")
    parser.add_argument("--draft-vocab-size", type=int, default=1024)
    parser.add_argument("--max-minutes", type=float, default=15,
                        help="wall-time budget of the training loop (0: none); the lr schedule follows the larger of steps and time")
    parser.add_argument("--ttt-steps", type=int, default=3, help="training-time test steps")
    parser.add_argument("--step-decay", type=float, default=0.8, help="TTT step j's loss weight: decay^(j-1)")
    train.add_training_args(parser, steps=3000, warmup_steps=50, seed=2024)
    parser.set_defaults(batch_size=4, lr=2e-3, log_every=20)
    parser.add_argument("--no-autocast", dest="autocast", action="store_false",
                        help="train in fp32 (default: bf16 autocast, ~3.5x faster on AVX512-BF16 CPUs)")
    parser.add_argument("--eval-seq-len", type=int, default=256, help="held-out window length for (a), (d)")
    parser.add_argument("--eval-windows", type=int, default=40, help="held-out windows for (a), (d) (0: all)")
    parser.add_argument("--decode-prompts", type=int, default=16)
    parser.add_argument("--decode-prompt-tokens", type=int, default=32)
    parser.add_argument("--decode-tokens", type=int, default=96, help="target tokens generated per prompt")
    parser.add_argument("--num-drafts", type=int, default=3, help="chained drafts per verify step")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)

    def log(message):
        print(message, flush=True)

    train_text, heldout_text, tokenizer = train.split_for_model(args.corpus, args.target)
    if args.write_prompts:
        write_prompts(args.write_prompts, tokenizer, train_text, args.num_prompts, *args.prompt_tokens, args.seed)
        with open(args.write_prompts + ".jinja", "w") as f:
            f.write(PLAIN_TEMPLATE)
        log(f"{args.num_prompts} prompts -> {args.write_prompts}; chat template -> {args.write_prompts}.jinja")
        return

    bos_id = tokenizer.token_id("<|bos|>")
    heldout_ids = torch.tensor(tokenizer.encode(heldout_text), dtype=torch.long)
    with open(os.path.join(args.target, "config.json")) as f:
        target_config = json.load(f)
    target = modeling.load_model(target_config, safetensors_io.load_checkpoint(args.target))
    for param in target.parameters():
        param.requires_grad_(False)
    embed = target.model.embed_tokens.weight

    if args.eval_only:
        draft = eagle3.load_draft(args.out, embed)
        measure(draft, target, heldout_ids, bos_id, args, log)
        return
    if not args.data:
        raise SystemExit("give --data DIR (a dump of mlaserve batch --dump-hidden-states), --eval-only or --write-prompts")

    records = load_records(args.data, log)
    config = eagle3.config_json(target_config, args.draft_vocab_size, [k - 1 for k in HIDDEN_LAYERS])
    draft = eagle3.Eagle3Draft(config, embed)
    modeling.init_weights(draft, args.init_std, generator=torch.Generator().manual_seed(args.seed))
    draft.set_vocab(pick_vocab(records, config["vocab_size"], args.draft_vocab_size))
    num_params = sum(p.numel() for p in draft.parameters())
    log(f"draft: {num_params:,} parameters, draft vocabulary {args.draft_vocab_size}, {args.ttt_steps} TTT steps")

    stats = train_draft(draft, records, args, log)
    train.round_weights_to_bf16(draft)
    draft.eval()
    eagle3.save_draft(draft, args.out)
    reloaded = eagle3.load_draft(args.out, embed)
    sample_aux, sample_ids = records[0][1][None, :64].float(), records[0][0][None, 1:65]
    with torch.no_grad():
        if not torch.equal(draft(sample_aux, sample_ids)[1], reloaded(sample_aux, sample_ids)[1]):
            raise AssertionError("the reloaded draft differs from the in-memory one")
    log(f"checkpoint: {args.out} written; reload exact")

    figures = measure(reloaded, target, heldout_ids, bos_id, args, log)
    tokens = sum(ids.numel() for ids, _ in records)
    data_summary = (
        f"{len(records):,} records, {tokens:,} tokens: the target's greedy answers to prompts of "
        f"{args.prompt_tokens[0]}-{args.prompt_tokens[1]} tokens from train.py's training split, 160 tokens each, temperature 0 "
        f"(scripts/train-eagle3.sh), hidden states dumped by `mlaserve batch --dump-hidden-states`"
    )
    write_card(args.out, config, stats, figures, args, num_params, data_summary)
    log(f"done: {stats['wall_s'] / 60:.1f} min training, {stats['rows_per_s']:.0f} rows/s; files in {args.out}")


if __name__ == "__main__":
    main()
