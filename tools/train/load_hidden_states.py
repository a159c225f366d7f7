"""Loads the hidden states `mlaserve batch --dump-hidden-states DIR` wrote (docs/batch.md,
"Hidden states") and checks their shapes: the input of an EAGLE-3 drafter's training step.

Per record (DIR/index.jsonl: {"id", "file", "rows", "layers", "hidden_size", ...}):
    input_ids      int32 [n]               the final turn's whole sequence (prompt, then answer)
    hidden_states  bf16  [n - 1, C * H]    row p: the residual stream entering each of the C
                                           layers at position p, concatenated in layer order

Usage: python3 tools/train/load_hidden_states.py DIR [--reference MODEL_DIR]
With --reference, every row is also compared with the PyTorch reference forward (modeling.py, fp32)
over the record's input_ids: the residual stream entering each layer. The file and the engine's
KV cache are bf16, so a row agrees to about 0.2% of its norm, not bit for bit; at a rare position
a near-tie in MoE routing picks another expert in one of the two, and that row and a few after
it differ by more. So the check is statistical: the median relative difference must be under
--median-tolerance and at most --outlier-share of the rows may differ by more than --tolerance.
"""

import argparse
import json
import os

import torch

from modeling import load_model, rope_cos_sin
from safetensors_io import load_checkpoint, load_file


def load_dump(directory):
    """Yields (index entry, input_ids, hidden_states [n-1, C, H]) for every record of the index."""
    with open(os.path.join(directory, "index.jsonl"), encoding="utf-8") as index:
        for line in index:
            entry = json.loads(line)
            tensors, metadata = load_file(os.path.join(directory, entry["file"]))
            ids, rows = tensors["input_ids"], tensors["hidden_states"]
            layers, hidden = entry["layers"], entry["hidden_size"]
            assert metadata["record_id"] == entry["id"], (metadata, entry)
            assert ids.dim() == 1 and rows.shape == (ids.shape[0] - 1, len(layers) * hidden), (ids.shape, rows.shape)
            assert rows.shape[0] == entry["rows"]
            yield entry, ids, rows.view(rows.shape[0], len(layers), hidden)


@torch.no_grad()
def reference_rows(model, ids, layers):
    """[n-1, C, H] fp32: the residual stream entering each layer at positions 0..n-2."""
    tokens = ids[:-1].long().unsqueeze(0)
    cos, sin = rope_cos_sin(model.config, tokens.shape[1])
    x = model.model.embed_tokens(tokens)
    captured = {}
    for i, layer in enumerate(model.model.layers):
        if i in layers:
            captured[i] = x[0]
        x = layer(x, cos, sin)
    if len(model.model.layers) in layers:
        captured[len(model.model.layers)] = x[0]
    return torch.stack([captured[layer] for layer in layers], dim=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--reference", help="model directory: compare every row with the PyTorch forward")
    parser.add_argument("--tolerance", type=float, default=0.01, help="|row - ref| / |ref| of a row that agrees")
    parser.add_argument("--median-tolerance", type=float, default=0.005)
    parser.add_argument("--outlier-share", type=float, default=0.05, help="share of rows allowed past --tolerance")
    args = parser.parse_args()
    model = None
    if args.reference:
        with open(os.path.join(args.reference, "config.json"), encoding="utf-8") as f:
            model = load_model(json.load(f), load_checkpoint(args.reference))  # (MTP layers ignored)
    records = tokens = 0
    differences = []  # per row and layer: |row - ref| / |ref|
    for entry, ids, rows in load_dump(args.dir):
        records += 1
        tokens += ids.shape[0]
        if records == 1:
            print(f"{entry['id']}: input_ids {tuple(ids.shape)} {ids.dtype}, hidden_states {tuple(rows.shape)} "
                  f"{rows.dtype}, first row's norms per layer {[round(float(r.float().norm()), 3) for r in rows[0]]}")
        if model is not None:
            want = reference_rows(model, ids, entry["layers"])
            differences.append(((rows.float() - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-6)).flatten())
    print(f"{records} records, {tokens} tokens: shapes ok")
    if model is not None:
        d = torch.cat(differences)
        median, outliers = float(d.median()), float((d > args.tolerance).float().mean())
        print(f"against the PyTorch reference, |row - ref| / |ref| over {d.numel()} rows: median {median:.5f}, "
              f"max {float(d.max()):.5f}, {100 * outliers:.2f}% above {args.tolerance}")
        if median > args.median_tolerance or outliers > args.outlier_share:
            raise SystemExit("rows differ from the reference forward")


if __name__ == "__main__":
    main()
