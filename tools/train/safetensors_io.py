"""Reads and writes the safetensors format (the `safetensors` package is not available here).

File layout:
    [8 bytes]  header_len_bytes, unsigned 64-bit little-endian
    [header_len_bytes]  UTF-8 JSON: {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}
                        plus an optional "__metadata__": {str: str}; padded with spaces so the
                        data section starts 8-byte aligned
    [rest]     raw little-endian tensor bytes; data_offsets are relative to the start of this section

Tensors cross this module as torch tensors. BF16 is handled through its 16-bit pattern because
numpy has no bfloat16.
"""

import json
import os
import struct

import numpy as np
import torch

# safetensors dtype tag -> (torch dtype, numpy dtype of the stored bit pattern, bytes per element)
_DTYPES = {
    "F32": (torch.float32, np.dtype("<f4"), 4),
    "F16": (torch.float16, np.dtype("<f2"), 2),
    "BF16": (torch.bfloat16, np.dtype("<u2"), 2),
    "I64": (torch.int64, np.dtype("<i8"), 8),
    "I32": (torch.int32, np.dtype("<i4"), 4),
    "BOOL": (torch.bool, np.dtype("?"), 1),  # one byte per element, 0 or 1
    # Read only: E4M3 codes come back as their uint8 bit patterns (this torch has no float8);
    # see dequantize.py.
    "F8_E4M3": (torch.uint8, np.dtype("u1"), 1),
}
_TAG_OF_TORCH_DTYPE = {torch_dtype: tag for tag, (torch_dtype, _, _) in _DTYPES.items() if tag != "F8_E4M3"}

_HEADER_ALIGN_BYTES = 8


def _tensor_bytes(tensor):
    """Returns the raw little-endian bytes of a contiguous CPU tensor."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        # Same-size reinterpretation: the bf16 bit pattern as int16.
        array = tensor.view(torch.int16).numpy()
    else:
        array = tensor.numpy()
    return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def save_file(tensors, path, metadata=None):
    """Writes {name: torch.Tensor} to `path`. `metadata` is an optional {str: str} map."""
    header = {}
    chunks = []
    offset_bytes = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in _TAG_OF_TORCH_DTYPE:
            raise ValueError(f"{name}: unsupported dtype {tensor.dtype}")
    # Widest elements first (then by name): every tensor starts aligned to its element size,
    # so a reader can mmap the file and point into it.
    def layout_key(name):
        return (-_DTYPES[_TAG_OF_TORCH_DTYPE[tensors[name].dtype]][2], name)

    for name in sorted(tensors, key=layout_key):
        tensor = tensors[name]
        data = _tensor_bytes(tensor)
        header[name] = {
            "dtype": _TAG_OF_TORCH_DTYPE[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset_bytes, offset_bytes + len(data)],
        }
        chunks.append(data)
        offset_bytes += len(data)
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError("__metadata__ must map str to str")
        header["__metadata__"] = dict(metadata)

    header_json = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    padding = (-(8 + len(header_json))) % _HEADER_ALIGN_BYTES
    header_json += b" " * padding
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header_json)))
        out.write(header_json)
        for data in chunks:
            out.write(data)


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data section offset in bytes)."""
    with open(path, "rb") as f:
        (header_len_bytes,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len_bytes).decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + header_len_bytes


def load_file(path):
    """Returns ({name: torch.Tensor}, metadata) read from `path`."""
    header, metadata, data_start_bytes = read_header(path)
    with open(path, "rb") as f:
        f.seek(data_start_bytes)
        data = f.read()
    tensors = {}
    for name, info in header.items():
        torch_dtype, np_dtype, elem_bytes = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = info["shape"]
        num_elements = int(np.prod(shape)) if shape else 1
        if end - begin != num_elements * elem_bytes:
            raise ValueError(f"{name}: data_offsets span {end - begin} bytes, expected {num_elements * elem_bytes}")
        array = np.frombuffer(data, dtype=np_dtype, count=num_elements, offset=begin).reshape(shape)
        if torch_dtype == torch.bfloat16:
            # Reinterpret the bit pattern (no value conversion), then view it as bf16.
            tensor = torch.from_numpy(array.copy().view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array.astype(np_dtype.newbyteorder("="), copy=True))
        tensors[name] = tensor
    return tensors, metadata


def load_checkpoint(model_dir):
    """Loads every tensor of a checkpoint directory: model.safetensors, or the sharded form
    described by model.safetensors.index.json."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        tensors, _ = load_file(os.path.join(model_dir, "model.safetensors"))
        return tensors
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        shard_tensors, _ = load_file(os.path.join(model_dir, shard))
        tensors.update(shard_tensors)
    missing = set(weight_map) - set(tensors)
    if missing:
        raise ValueError(f"index names tensors missing from shards: {sorted(missing)[:5]}")
    return tensors
