"""Byte-level BPE: trains merges on a corpus, encodes/decodes with Hugging Face `tokenizers`
semantics, and reads/writes HF's tokenizer.json.

Pipeline (encode), identical to HF for this tokenizer.json:
  1. split the text on special tokens (leftmost match); each special maps to its own id;
  2. split every other piece with the GPT-2 regex (Split, behavior "Isolated");
  3. map each piece's UTF-8 bytes to printable symbols (GPT-2's bytes_to_unicode);
  4. within each piece, repeatedly apply the lowest-ranked merge to all of its left-to-right,
     non-overlapping occurrences, until no adjacent pair has a merge.

Vocabulary layout: ids 0..255 are the byte symbols (id == byte value), then one id per merge in
merge order, then the special tokens.
"""

import collections
import heapq
import json
import os

import regex

GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

NUM_BYTE_SYMBOLS = 256


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map.

    Printable Latin-1 bytes map to themselves; the remaining 68 bytes (controls, space, 0x7F-0xA0,
    0xAD) map to U+0100 onwards, in byte order. So no symbol is whitespace or a control char.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\N{INVERTED EXCLAMATION MARK}"), ord("\N{NOT SIGN}") + 1))
        + list(range(ord("\N{REGISTERED SIGN}"), ord("\N{LATIN SMALL LETTER Y WITH DIAERESIS}") + 1))
    )
    symbol_of_byte = {b: chr(b) for b in printable}
    next_code_point = NUM_BYTE_SYMBOLS
    for b in range(NUM_BYTE_SYMBOLS):
        if b not in symbol_of_byte:
            symbol_of_byte[b] = chr(next_code_point)
            next_code_point += 1
    return symbol_of_byte


BYTE_TO_SYMBOL = bytes_to_unicode()
SYMBOL_TO_BYTE = {symbol: b for b, symbol in BYTE_TO_SYMBOL.items()}

_SPLIT_RE = regex.compile(GPT2_SPLIT_PATTERN)


def pre_tokenize(text):
    """Regex pieces of `text`, each as its byte-level symbol string."""
    return ["".join(BYTE_TO_SYMBOL[b] for b in piece.encode("utf-8")) for piece in _SPLIT_RE.findall(text)]


class ByteLevelBPE:
    """A trained byte-level BPE tokenizer. `merges` is a list of (left, right) symbol strings."""

    def __init__(self, merges, special_tokens):
        self.merges = list(merges)
        self.special_tokens = list(special_tokens)

        self.token_of_id = [BYTE_TO_SYMBOL[b] for b in range(NUM_BYTE_SYMBOLS)]
        self.token_of_id += [left + right for left, right in self.merges]
        self.token_of_id += self.special_tokens
        self.id_of_token = {token: i for i, token in enumerate(self.token_of_id)}
        if len(self.id_of_token) != len(self.token_of_id):
            raise ValueError("duplicate token strings in vocabulary")

        # (left id, right id) -> (rank, merged id)
        self.merge_of_pair = {}
        for rank, (left, right) in enumerate(self.merges):
            pair = (self.id_of_token[left], self.id_of_token[right])
            self.merge_of_pair[pair] = (rank, NUM_BYTE_SYMBOLS + rank)

        self.special_ids = {self.id_of_token[t] for t in self.special_tokens}
        # Longest first so a special that is a prefix of another cannot shadow it.
        alternatives = sorted(self.special_tokens, key=len, reverse=True)
        self._special_re = regex.compile("|".join(regex.escape(t) for t in alternatives)) if alternatives else None
        self._piece_cache = {}

    @property
    def vocab_size(self):
        return len(self.token_of_id)

    # ---- encoding ---------------------------------------------------------------------------

    def _encode_piece(self, piece_symbols):
        """BPE on one pre-tokenized piece (a byte-symbol string); returns token ids."""
        cached = self._piece_cache.get(piece_symbols)
        if cached is not None:
            return cached
        ids = [self.id_of_token[symbol] for symbol in piece_symbols]
        while len(ids) > 1:
            best = None  # (rank, merged id, pair)
            for pair in zip(ids, ids[1:]):
                merge = self.merge_of_pair.get(pair)
                if merge is not None and (best is None or merge[0] < best[0]):
                    best = (merge[0], merge[1], pair)
            if best is None:
                break
            _, merged_id, pair = best
            ids = _merge_pair(ids, pair, merged_id)
        self._piece_cache[piece_symbols] = ids
        return ids

    def encode(self, text):
        """Token ids of `text` (no BOS added)."""
        ids = []
        position = 0
        if self._special_re is not None:
            for match in self._special_re.finditer(text):
                ids += self._encode_ordinary(text[position : match.start()])
                ids.append(self.id_of_token[match.group()])
                position = match.end()
        ids += self._encode_ordinary(text[position:])
        return ids

    def _encode_ordinary(self, text):
        ids = []
        for piece_symbols in pre_tokenize(text):
            ids += self._encode_piece(piece_symbols)
        return ids

    def decode(self, ids):
        """Text of `ids`; special tokens appear literally, invalid UTF-8 becomes U+FFFD."""
        data = bytearray()
        for token_id in ids:
            token = self.token_of_id[token_id]
            if token_id in self.special_ids:
                data += token.encode("utf-8")
            else:
                data += bytes(SYMBOL_TO_BYTE[symbol] for symbol in token)
        return data.decode("utf-8", errors="replace")

    # ---- tokenizer.json ---------------------------------------------------------------------

    def to_hf_json(self):
        first_special_id = NUM_BYTE_SYMBOLS + len(self.merges)
        added_tokens = [
            {
                "id": first_special_id + i,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, token in enumerate(self.special_tokens)
        ]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added_tokens,
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {
                        "type": "Split",
                        "pattern": {"Regex": GPT2_SPLIT_PATTERN},
                        "behavior": "Isolated",
                        "invert": False,
                    },
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
                ],
            },
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "vocab": {token: i for i, token in enumerate(self.token_of_id)},
                "merges": [f"{left} {right}" for left, right in self.merges],
            },
        }

    def save(self, directory, model_max_length=2048):
        """Writes tokenizer.json and tokenizer_config.json into `directory`."""
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(self.to_hf_json(), f, ensure_ascii=False, indent=2)
            f.write("\n")
        config = {
            "bos_token": self.special_tokens[0],
            "eos_token": self.special_tokens[1],
            "add_bos_token": True,
            "add_eos_token": False,
            "model_max_length": model_max_length,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path):
        """Reads a tokenizer.json written by `save` (checks the vocabulary layout it relies on)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        merges = [tuple(m.split(" ")) for m in data["model"]["merges"]]
        special_tokens = [t["content"] for t in sorted(data["added_tokens"], key=lambda t: t["id"])]
        tokenizer = cls(merges, special_tokens)
        if tokenizer.id_of_token != data["model"]["vocab"]:
            raise ValueError(f"{path}: vocabulary does not follow bytes, merges, specials layout")
        return tokenizer

    def token_id(self, token):
        return self.id_of_token[token]


def _merge_pair(ids, pair, merged_id):
    """Replaces the left-to-right, non-overlapping occurrences of `pair` in `ids`."""
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(merged_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _adjacent_pairs(ids):
    return collections.Counter(zip(ids, ids[1:]))


def train_bpe(text, vocab_size, special_tokens=SPECIAL_TOKENS, log=print):
    """Learns vocab_size - 256 - len(special_tokens) merges on `text`.

    Counts are kept incrementally: a merge only revisits the words that contain the chosen pair.
    The best pair is the most frequent one; ties go to the smaller (left id, right id). A pair whose
    concatenation already is a token is skipped, so each merge adds exactly one new token.
    """
    num_merges = vocab_size - NUM_BYTE_SYMBOLS - len(special_tokens)
    if num_merges < 0:
        raise ValueError("vocab_size too small")

    word_counts = collections.Counter(pre_tokenize(text))
    words = [[ord_symbol_id(symbol) for symbol in word] for word in word_counts]  # ids per word
    counts = list(word_counts.values())

    pair_counts = collections.Counter()
    words_with_pair = collections.defaultdict(set)  # pair -> word indices containing it
    for word_idx, ids in enumerate(words):
        for pair, n in _adjacent_pairs(ids).items():
            pair_counts[pair] += n * counts[word_idx]
            words_with_pair[pair].add(word_idx)

    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)

    token_of_id = [BYTE_TO_SYMBOL[b] for b in range(NUM_BYTE_SYMBOLS)]
    known_tokens = set(token_of_id) | set(special_tokens)
    merges = []
    while len(merges) < num_merges and heap:
        negative_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative_count:
            continue  # stale entry; a fresher one for this pair is in the heap
        if -negative_count < 1:
            break
        merged_token = token_of_id[pair[0]] + token_of_id[pair[1]]
        if merged_token in known_tokens:
            del pair_counts[pair]
            continue
        merged_id = len(token_of_id)
        token_of_id.append(merged_token)
        known_tokens.add(merged_token)
        merges.append((token_of_id[pair[0]], token_of_id[pair[1]]))

        changed_pairs = set()
        for word_idx in list(words_with_pair.pop(pair, ())):
            old_ids = words[word_idx]
            new_ids = _merge_pair(old_ids, pair, merged_id)
            words[word_idx] = new_ids
            old_pairs = _adjacent_pairs(old_ids)
            new_pairs = _adjacent_pairs(new_ids)
            for p, n in old_pairs.items():
                pair_counts[p] -= n * counts[word_idx]
                changed_pairs.add(p)
                if p not in new_pairs:
                    words_with_pair[p].discard(word_idx)
            for p, n in new_pairs.items():
                pair_counts[p] += n * counts[word_idx]
                changed_pairs.add(p)
                words_with_pair[p].add(word_idx)
        pair_counts.pop(pair, None)
        for p in changed_pairs:
            count = pair_counts.get(p, 0)
            if count > 0:
                heapq.heappush(heap, (-count, p))
            else:
                pair_counts.pop(p, None)
        if log and (len(merges) % 500 == 0 or len(merges) == num_merges):
            log(f"bpe: {len(merges)}/{num_merges} merges, last {merged_token!r} x{-negative_count}")

    if len(merges) != num_merges:
        raise ValueError(f"corpus too small: only {len(merges)} of {num_merges} merges learned")
    return ByteLevelBPE(merges, special_tokens)


def ord_symbol_id(symbol):
    """Id of a single byte symbol (id == byte value)."""
    return SYMBOL_TO_BYTE[symbol]
