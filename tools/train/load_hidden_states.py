"""Loads the hidden states `mlaserve batch --dump-hidden-states DIR` wrote (docs/batch.md,
"Hidden states") and checks their shapes: the input of an EAGLE-3 drafter's training step.

Per record (DIR/index.jsonl: {"id", "file", "rows", "layers", "hidden_size", ...}):
    input_ids      int32 [n]               the final turn's whole sequence (prompt, then answer)
    hidden_states  bf16  [n - 1, C * H]    row p: the residual stream entering each of the C
                                           layers at position p, concatenated in layer order

Usage: python3 tools/train/load_hidden_states.py DIR
"""

import json
import os
import sys

from safetensors_io import load_file


def load_dump(directory):
    """Yields (record id, input_ids, hidden_states [n-1, C, H]) for every record of the index."""
    with open(os.path.join(directory, "index.jsonl"), encoding="utf-8") as index:
        for line in index:
            entry = json.loads(line)
            tensors, metadata = load_file(os.path.join(directory, entry["file"]))
            ids, rows = tensors["input_ids"], tensors["hidden_states"]
            layers, hidden = entry["layers"], entry["hidden_size"]
            assert metadata["record_id"] == entry["id"], (metadata, entry)
            assert ids.dim() == 1 and rows.shape == (ids.shape[0] - 1, len(layers) * hidden), (ids.shape, rows.shape)
            assert rows.shape[0] == entry["rows"]
            yield entry["id"], ids, rows.view(rows.shape[0], len(layers), hidden)


def main():
    records = tokens = 0
    for record_id, ids, rows in load_dump(sys.argv[1]):
        records += 1
        tokens += ids.shape[0]
        if records == 1:
            print(f"{record_id}: input_ids {tuple(ids.shape)} {ids.dtype}, hidden_states {tuple(rows.shape)} "
                  f"{rows.dtype}, first row's norms per layer {[round(float(r.float().norm()), 3) for r in rows[0]]}")
    print(f"{records} records, {tokens} tokens: shapes ok")


if __name__ == "__main__":
    main()
