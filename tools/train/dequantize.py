"""Dequantizes the quantized checkpoint layouts mlaserve reads, independently of the engine, so
the reference forward (modeling.py) can run on exactly the weights a quantized file holds.

    fp8 block-scaled (DeepSeek-V3, Kimi-K2): X.weight F8_E4M3 [out, in] and X.weight_scale_inv
        F32 [ceil(out/B0), ceil(in/B1)], weight_block_size [B0, B1]; real = code * scale of its block.
    compressed-tensors pack-quantized int4 (Kimi-K2-Thinking): X.weight_packed I32 [out, in/8]
        (value j of a word at bits 4j, stored as q + 8), X.weight_scale BF16 [out, in/group],
        X.weight_shape [2]; real = q * scale of its group.
"""

import numpy as np
import torch


def e4m3_table():
    """fp32 value of each of the 256 OCP E4M3FN codes (0x7F / 0xFF are NaN)."""
    values = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> 3) & 0xF
        mantissa = code & 0x7
        if exponent == 0xF and mantissa == 0x7:
            values[code] = np.nan
        elif exponent == 0:
            values[code] = sign * (mantissa / 8.0) * 2.0 ** -6
        else:
            values[code] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return torch.from_numpy(values)


def dequantize_fp8(codes, scale_inv, block):
    rows, cols = codes.shape
    values = e4m3_table()[codes.long()]  # [rows, cols] fp32
    scale = scale_inv.float().repeat_interleave(block[0], dim=0)[:rows].repeat_interleave(block[1], dim=1)[:, :cols]
    return values * scale


def dequantize_int4(packed, scale, shape, group_size):
    rows, cols = int(shape[0]), int(shape[1])
    words = packed.to(torch.int64) & 0xFFFFFFFF  # unsigned view of the int32 words
    nibbles = torch.stack([(words >> (4 * j)) & 0xF for j in range(8)], dim=-1)  # [rows, in/8, 8]
    q = nibbles.reshape(rows, -1)[:, :cols].float() - 8.0
    return q * scale.float().repeat_interleave(group_size, dim=1)[:, :cols]


def dequantize_checkpoint(tensors, config):
    """{name: tensor} of a quantized checkpoint -> {name: tensor} with every quantized Linear
    replaced by its fp32 `X.weight`."""
    qc = config.get("quantization_config")
    if not qc:
        return tensors
    out = {}
    if qc["quant_method"] == "fp8":
        block = qc["weight_block_size"]
        for name, t in tensors.items():
            if name.endswith("_scale_inv"):
                continue
            if t.dtype == torch.uint8:  # F8_E4M3 codes
                out[name] = dequantize_fp8(t, tensors[name + "_scale_inv"], block)
            else:
                out[name] = t
        return out
    if qc["quant_method"] == "compressed-tensors":
        (group,) = qc["config_groups"].values()
        group_size = group["weights"]["group_size"]
        for name, t in tensors.items():
            if name.endswith(".weight_packed"):
                base = name[: -len(".weight_packed")]
                out[base + ".weight"] = dequantize_int4(
                    t, tensors[base + ".weight_scale"], tensors[base + ".weight_shape"], group_size
                )
            elif name.endswith(".weight_scale") or name.endswith(".weight_shape"):
                continue
            else:
                out[name] = t
        return out
    raise ValueError(f"unknown quant_method {qc['quant_method']}")
