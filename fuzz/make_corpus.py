#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into fuzz/seeds/<target>/, which are committed: run it by hand
(Debian's /usr/bin/python3) after changing a fixture or a target's input format.

Seeds are small and derived from the repository's fixtures where there are some (config.json
files, the bundled tokenizer shrunk to a few hundred tokens, request shapes the tests use);
the rest are written here. Existing files are kept, so a corpus grown by earlier runs stays.
"""
import base64
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def http_request():
    # The first byte picks the piece size the target feeds the parser with.
    seeds = {
        "get": b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        "post": b'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                b'Content-Length: 15\r\n\r\n{"text": "hi"}\n',
        "chunked": b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n3;ext=1\r\n wo\r\n0\r\nTrailer: t\r\n\r\n",
        "pipelined": b"GET /health HTTP/1.1\r\n\r\nGET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "expect": b"POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        "close": b"\r\n\nPOST / HTTP/1.0\nconnection: close\ncontent-length: 0\n\n",
    }
    for i, (name, body) in enumerate(seeds.items()):
        write("http_request_fuzzer", name, bytes([i * 3]) + body)


REQUESTS = {
    "completion": {"model": "m", "prompt": "To be, or not", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9,
                   "stop": ["\n", "."], "logprobs": 2, "echo": True, "n": 2, "seed": 3},
    "completion_ids": {"prompt": [[1, 2, 3], "text"], "stream": True, "stream_options": {"include_usage": True},
                       "logit_bias": {"5": -100}, "top_k": 4, "min_p": 0.1, "repetition_penalty": 1.1},
    "chat": {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                          {"role": "assistant", "content": None, "reasoning_content": "think",
                           "tool_calls": [{"id": "c1", "type": "function",
                                           "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": "42"}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
             "tool_choice": "auto", "chat_template_kwargs": {"thinking": True}, "max_completion_tokens": 5,
             "logprobs": True, "top_logprobs": 3, "stream": True, "separate_reasoning": False},
    "generate": {"text": "ROMEO:", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "stop": "x",
                                                       "stop_token_ids": [2], "n": 2, "ignore_eos": True},
                 "return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": 0, "rid": "r1"},
    "generate_batch": {"input_ids": [[1, 2], [3]], "sampling_params": [{"top_k": 1}, {"min_new_tokens": 1}],
                       "rid": ["a", "b"]},
}


def json_bodies():
    for name, body in REQUESTS.items():
        write("request_fuzzer", name, json.dumps(body))
        write("json_reader_fuzzer", name, json.dumps(body))
    write("json_reader_fuzzer", "tokenizer_config", read("models/shakespeare-mla/tokenizer_config.json"))
    write("json_reader_fuzzer", "escapes", '{"s": "\\u00e9\\ud83d\\ude00\\n", "n": -1.5e300, "i": 18446744073709551615}')
    write("json_reader_fuzzer", "nested", "[" * 60 + "]" * 60)


def configs():
    for rel in ["models/shakespeare-mla/config.json", "tests/fixtures/tiny-v2/config.json"] + \
               ["tests/fixtures/configs/" + f for f in sorted(os.listdir(os.path.join(ROOT, "tests/fixtures/configs")))]:
        write("config_fuzzer", os.path.basename(os.path.dirname(rel)) + "_" + os.path.basename(rel), read(rel))


def safetensors_file(tensors, metadata=None):
    header, blobs, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs += data
        offset += len(data)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + blobs


def safetensors():
    write("safetensors_fuzzer", "f32", safetensors_file(
        [("w", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "F32", [2], struct.pack("<2f", 0, 1))],
        {"format": "pt"}))
    write("safetensors_fuzzer", "mixed", safetensors_file(
        [("a", "BF16", [3], b"\x80\x3f" * 3), ("q", "F8_E4M3", [2, 2], b"\x38" * 4), ("s", "I32", [], b"\x01\0\0\0"),
         ("e", "U8", [0, 4], b"")]))
    # The header of a real fixture (its tensors truncated: the data is not there).
    blob = read("tests/fixtures/tiny-v2/model-00002-of-00002.safetensors")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    first = [(k, v) for k, v in header.items() if k != "__metadata__"][:3]
    tensors = []
    for name, v in first:
        nbytes = v["data_offsets"][1] - v["data_offsets"][0]
        tensors.append((name, v["dtype"], v["shape"], b"\0" * min(nbytes, 4096)))
    write("safetensors_fuzzer", "tiny_v2_header", safetensors_file(tensors))


def small_tokenizer(num_merges=60):
    """The bundled tokenizer.json cut to its byte tokens, its first merges, and its added tokens."""
    t = json.loads(read("models/shakespeare-mla/tokenizer.json"))
    model = t["model"]
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    keep = {tok: i for tok, i in by_id if i < 256}
    merges = []
    for m in model["merges"]:
        left, right = m.split(" ") if isinstance(m, str) else m
        if left in keep and right in keep and len(merges) < num_merges:
            merges.append(m)
            if left + right not in keep:
                keep[left + right] = len(keep)
    model["vocab"] = keep
    model["merges"] = merges
    added = []
    for a in t.get("added_tokens", []):
        a = dict(a)
        a["id"] = len(keep) + len(added)
        added.append(a)
    t["added_tokens"] = added
    return json.dumps(t, ensure_ascii=False), added


def tokenizers():
    tok, added = small_tokenizer()
    config = read("models/shakespeare-mla/tokenizer_config.json").decode()
    special = added[0]["content"] if added else ""
    write("tokenizer_json_fuzzer", "bundled_small", tok + "\0" + config + "\0" + special + "ROMEO: the queen's 12 ducats\n\n")
    write("tokenizer_json_fuzzer", "no_config", tok + "\0\0" + "caf\u00e9 \xff text")
    ranks = "".join(base64.b64encode(bytes([b])).decode() + " " + str(b) + "\n" for b in range(256))
    for i, s in enumerate([b"ab", b"abc", b"abab", b" x", b"th", b"the"]):
        ranks += base64.b64encode(s).decode() + " " + str(256 + i) + "\n"
    kimi_config = json.dumps({"bos_token": "[BOS]", "eos_token": "[EOS]", "added_tokens_decoder": {
        "262": {"content": "[BOS]", "special": True}, "263": {"content": "[EOS]", "special": True},
        "265": {"content": "<|im_end|>", "special": True}}})
    write("tiktoken_fuzzer", "ranks", ranks + "\0" + kimi_config + "\0" + "[BOS]abab the x<|im_end|> 123")
    write("tiktoken_fuzzer", "plain_config", ranks[:4000] + "\0{}\0hello")


TEMPLATES = {
    "loop": "{% for m in messages %}<|{{ m['role'] }}|>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "namespace": "{%- set ns = namespace(sys='', n=0) -%}{%- for m in messages -%}{%- if m.role == 'system' -%}"
                 "{%- set ns.sys = ns.sys ~ m.content -%}{%- else -%}{%- set ns.n = ns.n + 1 -%}{%- endif -%}"
                 "{%- endfor -%}{{ bos_token }}{{ ns.sys }}[{{ ns.n }}]{{ messages | length }}",
    "macro": "{% macro render(x, sep=', ') %}{{ x | join(sep) }}{% endmacro %}{{ render([1, 2, 3]) }}"
             "{{ render(messages | map(attribute='role') | list, sep='|') }}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}",
    "filters": "{{ 'Hi %s' % name }}{{ (messages[0].content or '') | upper | replace('A', 'b') }}"
               "{{ [3, 1, 2] | sort | reverse | first }}{{ {'a': 1}.items() | list }}{{ range(3) | sum }}"
               "{{ messages[-1]['content'][:5] }}{{ 'x' * 3 }}{{ 7 // 2 }}{{ 2 ** 3 }}{{ none is none }}",
    "raise": "{% if messages | length == 0 %}{{ raise_exception('no messages') }}{% endif %}"
             "{% set x %}captured{% endset %}{{ x }}{{ thinking is defined and thinking }}",
}

CONTEXTS = [
    {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hello"},
                  {"role": "assistant", "content": "A", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}],
     "add_generation_prompt": True, "thinking": True, "name": "you"},
    {"messages": [{"role": "user", "content": None}], "tools": [{"type": "function", "function": {"name": "g"}}]},
    {},
]


def jinja():
    for i, (name, template) in enumerate(TEMPLATES.items()):
        write("jinja_fuzzer", name, template + "\0" + json.dumps(CONTEXTS[i % len(CONTEXTS)]))


def sse():
    # The first byte picks the piece size.
    streams = {
        "openai": 'data: {"choices": [{"text": "a"}]}\n\ndata: [DONE]\n\n',
        "fields": "\ufeff: comment\nevent: add\r\nid: 7\rdata:x\ndata:  y\nretry: 10\n\n",
        "cut": "data: first\n\ndata: second, never ended",
    }
    for i, (name, text) in enumerate(streams.items()):
        write("sse_fuzzer", name, bytes([i]) + text.encode("utf-8"))


def batch_input():
    lines = [
        {"id": "a", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]},
        {"id": 7, "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
                                    {"from": "human", "value": "q2"}]},
        {"prompt": "hi", "x": 1},
        {"id": "a", "prompt": "duplicate id"},
    ]
    text = "\n".join(json.dumps(l) for l in lines) + "\n\n  \n{not json}\n" + '{"messages": []}'
    write("batch_input_fuzzer", "mixed", text)
    write("batch_input_fuzzer", "crlf", json.dumps(lines[0]) + "\r\n" + json.dumps(lines[2]) + "\r\n")


def gguf_file(metadata, tensors):
    """GGUF v3: metadata [(key, type, value)], tensors [(name, ne, ggml_type, bytes)]."""
    def string(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(t, v):
        if t == 4:
            return struct.pack("<I", v)
        if t == 6:
            return struct.pack("<f", v)
        if t == 7:
            return struct.pack("<B", v)
        if t == 8:
            return string(v)
        elem, items = v  # an array
        return struct.pack("<IQ", elem, len(items)) + b"".join(value(elem, i) for i in items)

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, t, v in metadata:
        out += string(key) + struct.pack("<I", t) + value(t, v)
    offset, data = 0, b""
    for name, ne, ggml_type, raw in tensors:
        out += string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ggml_type, offset)
        data += raw + b"\0" * (-len(raw) % 32)
        offset = len(data)
    return out + b"\0" * (-len(out) % 32) + data


def gguf():
    a = "deepseek2."
    tokens = ["a", "b", "ab", "Ġ", "<s>", "</s>"]
    metadata = [
        ("general.architecture", 8, "deepseek2"), (a + "block_count", 4, 1), (a + "context_length", 4, 64),
        (a + "embedding_length", 4, 8), (a + "feed_forward_length", 4, 16), (a + "attention.head_count", 4, 2),
        (a + "attention.kv_lora_rank", 4, 8), (a + "rope.dimension_count", 4, 4), (a + "attention.key_length", 4, 8),
        (a + "attention.value_length", 4, 4), (a + "vocab_size", 4, 6), (a + "rope.freq_base", 6, 10000.0),
        ("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, "gpt-2"),
        ("tokenizer.ggml.tokens", 9, (8, tokens)), ("tokenizer.ggml.token_type", 9, (4, [1, 1, 1, 1, 3, 3])),
        ("tokenizer.ggml.merges", 9, (8, ["a b"])), ("tokenizer.ggml.bos_token_id", 4, 4),
        ("tokenizer.ggml.add_bos_token", 7, 1),
    ]
    f32 = lambda n: struct.pack("<%df" % n, *[0.01 * i for i in range(n)])
    tensors = [
        ("token_embd.weight", [8, 6], 0, f32(48)), ("output_norm.weight", [8], 0, f32(8)),
        ("blk.0.attn_kv_b.weight", [8, 16], 30, b"\1\2" * 128), ("blk.0.attn_k_b.weight", [4, 8, 2], 0, f32(64)),
        ("blk.0.ffn_up_exps.weight", [8, 4, 2], 1, b"\3\4" * 64), ("blk.0.ffn_gate.weight", [32, 1], 8, b"\5" * 34),
    ]
    write("gguf_fuzzer", "tiny_deepseek2", gguf_file(metadata, tensors))
    # The block types split at load (Q4_K, Q6_K, Q4_0, Q5_K, Q4_1, Q5_0, Q5_1; model/gguf_checkpoint.cc), stacked as
    # experts and whole, in a split kv_b pair of two types: pseudo-random block bytes.
    noise = lambda n, seed: bytes((i * 131 + seed * 17 + (i >> 3) * 7) & 0xff for i in range(n))
    blocks = [
        ("blk.0.ffn_up_exps.weight", [256, 1, 2], 12, noise(144 * 2, 1)),
        ("blk.0.ffn_down.weight", [256, 1], 14, noise(210, 2)),
        ("blk.0.ffn_gate.weight", [64, 1], 2, noise(18 * 2, 3)),
        ("blk.0.ffn_up.weight", [256, 1], 13, noise(176, 5)),
        ("blk.0.ffn_down_shexp.weight", [64, 1], 3, noise(20 * 2, 6)),
        ("blk.0.ffn_up_shexp.weight", [32, 2], 6, noise(22 * 2, 7)),
        ("blk.0.ffn_gate_shexp.weight", [32, 1], 7, noise(24, 8)),
        ("blk.0.attn_k_b.weight", [32, 8, 1], 8, noise(34 * 8, 4)),
        ("blk.0.attn_v_b.weight", [8, 4, 1], 0, f32(32)),
    ]
    write("gguf_fuzzer", "block_types", gguf_file(metadata[:1], blocks))


def main():
    http_request()
    json_bodies()
    configs()
    safetensors()
    tokenizers()
    jinja()
    sse()
    batch_input()
    gguf()
    return 0


if __name__ == "__main__":
    sys.exit(main())
