"""Writes an EAGLE-3 draft with random weights for a target model (tools/train/eagle3.py's layout
and sizes): the worst case of speculative decoding, a draft whose guesses are never accepted,
for benchmarks of what drafting costs (docs/benchmarks.md). Only the target's config.json is read.

Usage (from the repository root):
    /usr/bin/python3 tools/train/init_random_eagle3.py TARGET_DIR OUT_DIR [--draft-vocab N] [--aux-layer-ids 0,1,2]
The draft vocabulary is the target's first N token ids; the aux layer ids are SGLang's (id k:
the output of target layer k).
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eagle3 import Eagle3Draft, config_json, save_draft  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("out")
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--aux-layer-ids", default="0,1,2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with open(os.path.join(args.target, "config.json")) as f:
        target = json.load(f)
    torch.manual_seed(args.seed)
    vocab = min(args.draft_vocab, target["vocab_size"])
    config = config_json(target, vocab, [int(k) for k in args.aux_layer_ids.split(",")])
    # (The target's embedding is not part of the draft: zeros stand in for it here.)
    draft = Eagle3Draft(config, torch.zeros(target["vocab_size"], target["hidden_size"]))
    draft.set_vocab(list(range(vocab)))
    save_draft(draft, args.out)
    print(f"{args.out}: random EAGLE-3 draft for {args.target}, draft vocabulary {vocab}, "
          f"aux layer ids {args.aux_layer_ids}")


if __name__ == "__main__":
    main()
