// Checkpoint::AddGgufFile: a deepseek2 GGUF file's tensors as the Hugging Face checkpoint's
// (model/gguf_model.h has the names). F32 / F16 / BF16 tensors are views into the mapped file, in
// their stored bytes: a GGUF shape is the reverse of the torch shape, with the same row-major
// bytes. Q8_0 tensors (blocks of an fp16 scale and 32 int8 codes) are split once at load into
// their codes (`X.weight`, I8) and their scales widened exactly (`X.weight_scale`, F32
// [rows, cols / 32]): the grouped int8 format the kernels compute (kernels/weight_matrix.h),
// in shared anonymous memory the checkpoint owns, never dequantized. Q6_K (super-blocks of 256:
// 16 sub-blocks of 16 six-bit codes q, an int8 scale each, an fp16 scale d) goes the same way:
// codes q - 32 in int8 and scales d * scale, exact in F32, per 16 values (8 bits a weight in
// memory instead of the file's 6.56: the kernels have no 6-bit layout yet). Q4_K (8 sub-blocks of
// 32 four-bit codes, 6-bit scales and mins, fp16 d and dmin) and Q4_0 (32 codes - 8, an fp16 d)
// become 4-bit codes two a byte (`X.weight`, I8 [rows, cols / 2]) and exact F32 (scale, min)
// pairs per 32 (`X.weight_scale_min`): real = code * scale - min, the kUint4GroupMin format
// (0.75 bytes a weight, the file's 0.56). Q5_K likewise, its 5-bit codes one a byte with the pairs
// (`X.weight` I8 [rows, cols], kUint8GroupMin: 1.25 bytes a weight, the file's 0.69), and so do
// the 32-value Q4_1 (as Q4_0), Q5_0 and Q5_1 (as Q5_K). A stacked expert tensor
// [experts][rows][cols] becomes one view per expert. The split kv_b layout (attn_k_b, attn_v_b):
// a pair of one float type (F32/F16/BF16) is rearranged into kv_b_proj's rows in that type; any
// other pair (a block type, or two types: files mix a K type's fallback for k_b's 128-value rows
// with another type) keeps each tensor in its own format, under kv_b_proj's companion names
// `kv_b_proj.weight_k_b` [heads * kv_lora, nope] (W_UK^T per head, its blocks along nope) and
// `kv_b_proj.weight_v_b` [heads * v, kv_lora] (W_UV), each with its scales as any tensor of its
// type: their blocks run along the absorbed products' inputs, so the absorbed decode multiplies
// them as they are (model/absorbed_weights.h). A tensor type mlaserve does not compute is refused,
// naming the type and the tensors that use it.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/float16.h"
#include "core/thread_pool.h"

#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/safetensors.h"

namespace mlaserve {
namespace {

std::optional<DType> DTypeOfGgml(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ8_0:
    case GgmlType::kQ6_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K: return DType::kI8;  // split into codes and scales below
    default: return std::nullopt;
  }
}

// The types split into 4-bit codes with (scale, min) pairs per 32 (the kUint4GroupMin format).
bool IsUint4Min(uint32_t type) {
  const GgmlType t = GgmlType(type);
  return t == GgmlType::kQ4_K || t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1;
}
// Split into 8-bit unsigned codes with (scale, min) pairs per 32 (the kUint8GroupMin format).
bool IsUint8Min(uint32_t type) {
  const GgmlType t = GgmlType(type);
  return t == GgmlType::kQ5_K || t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
}

// A block of ggml's 32-value types (Q4_0: fp16 d, qs[16]; Q4_1: d, m, qs[16]; Q5_0: d, qh[4],
// qs[16]; Q5_1: d, m, qh[4], qs[16]) as 32 unsigned codes and the (scale, min) pair that makes
// code * scale - min its values: value j < 16 from the low nibble of qs[j] (plus 16 x bit j of
// qh), value j + 16 from its high nibble (plus 16 x bit j + 16); Q4_0 and Q5_0 are (q - 8) d and
// (q - 16) d: the pair (d, 8 d) or (d, 16 d); Q4_1 and Q5_1 are q d + m: (d, -m). Exact in F32.
void SplitLegacy32(GgmlType type, const std::byte* block, uint8_t* codes, float* scale_min) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  const bool with_m = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const bool five = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  uint16_t d_bits, m_bits = 0;
  std::memcpy(&d_bits, b, 2);
  if (with_m) std::memcpy(&m_bits, b + 2, 2);
  const uint8_t* after = b + (with_m ? 4 : 2);
  uint32_t qh = 0;
  if (five) std::memcpy(&qh, after, 4);
  const uint8_t* qs = after + (five ? 4 : 0);
  const float d = F16ToF32(d_bits);
  scale_min[0] = d;
  scale_min[1] = with_m ? -F16ToF32(m_bits) : (five ? 16.0f : 8.0f) * d;
  for (int j = 0; j < 16; ++j) {
    codes[j] = uint8_t((qs[j] & 0xF) | (five ? ((qh >> j) & 1) << 4 : 0));
    codes[j + 16] = uint8_t((qs[j] >> 4) | (five ? ((qh >> (j + 16)) & 1) << 4 : 0));
  }
}

// Values per F32 scale of a type split into groups (DTypeOfGgml kI8).
int64_t Int8GroupOf(uint32_t type) { return GgmlType(type) == GgmlType::kQ6_K ? 16 : 32; }

// A Q4_K super-block (ggml's block_q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for
// 8 sub-blocks of 32, qs[128]) as 256 nibbles, row-major (value e in byte e / 2, nibble e % 2),
// and 8 (scale, min) pairs d * scale_j, dmin * min_j (exact in F32: 11 x 6 significant bits).
// Sub-block j's 6-bit scale and min: j < 4: low 6 bits of bytes j and j + 4; else the low (scale)
// and high (min) nibble of byte j + 4, their top 2 bits the top 2 bits of bytes j - 4 and j.
// Values 64i .. 64i + 31 are the low nibbles of qs[32i .. 32i + 31] (sub-block 2i), 64i + 32 ..
// 64i + 63 their high nibbles (sub-block 2i + 1).
void SplitQ4_K(const std::byte* block, uint8_t* nibbles, float* scale_min);

// A Q4_0, Q4_1 or Q4_K tensor of `elements` values as nibbles [elements / 2] and (scale, min) pairs
// [elements / 32][2].
void SplitToUint4(uint32_t type, const std::byte* blocks, int64_t elements, uint8_t* nibbles, float* scale_min) {
  if (GgmlType(type) == GgmlType::kQ4_0 || GgmlType(type) == GgmlType::kQ4_1) {
    const int64_t block_bytes = GgmlTraits(type).block_bytes;
    uint8_t codes[32];
    for (int64_t b = 0; b < elements / 32; ++b) {
      SplitLegacy32(GgmlType(type), blocks + b * block_bytes, codes, scale_min + b * 2);
      for (int e = 0; e < 32; e += 2) nibbles[b * 16 + e / 2] = uint8_t(codes[e] | (codes[e + 1] << 4));
    }
    return;
  }
  for (int64_t b = 0; b < elements / 256; ++b) SplitQ4_K(blocks + b * 144, nibbles + b * 128, scale_min + b * 16);
}

// Q4_K's and Q5_K's 8 (scale, min) pairs: d * scale_j, dmin * min_j from the 12 bytes at sc
// (get_scale_min_k4's layout: see SplitQ4_K).
void KScaleMins(float d, float dmin, const uint8_t* sc, float* scale_min) {
  for (int j = 0; j < 8; ++j) {
    const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
    const int min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    scale_min[2 * j] = d * float(scale);
    scale_min[2 * j + 1] = dmin * float(min);
  }
}

// A Q5_K super-block (ggml's block_q5_K: fp16 d, fp16 dmin, 12 bytes of scales and mins as
// Q4_K's, qh[32], qs[128]) as 256 codes 0 .. 31 (one a byte) and 8 (scale, min) pairs. Value
// 64i + l (l < 32): the low nibble of qs[32i + l] plus 16 x bit 2i of qh[l]; value 64i + 32 + l:
// its high nibble plus 16 x bit 2i + 1.
void SplitQ5_K(const std::byte* block, uint8_t* codes, float* scale_min) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  uint16_t d_bits, dmin_bits;
  std::memcpy(&d_bits, b, 2);
  std::memcpy(&dmin_bits, b + 2, 2);
  KScaleMins(F16ToF32(d_bits), F16ToF32(dmin_bits), b + 4, scale_min);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int e = 0; e < 256; ++e) {
    const int i = e / 64, half = (e % 64) / 32, l = e % 32;
    const int low = (qs[32 * i + l] >> (4 * half)) & 0xF;
    const int high = (qh[l] >> (2 * i + half)) & 1;
    codes[e] = uint8_t(low | (high << 4));
  }
}

// A Q5_K, Q5_0 or Q5_1 tensor of `elements` values as byte codes [elements] and (scale, min)
// pairs [elements / 32][2].
void SplitToUint8(uint32_t type, const std::byte* blocks, int64_t elements, uint8_t* codes, float* scale_min) {
  if (GgmlType(type) == GgmlType::kQ5_K) {
    for (int64_t b = 0; b < elements / 256; ++b) SplitQ5_K(blocks + b * 176, codes + b * 256, scale_min + b * 16);
    return;
  }
  const int64_t block_bytes = GgmlTraits(type).block_bytes;
  for (int64_t b = 0; b < elements / 32; ++b) {
    SplitLegacy32(GgmlType(type), blocks + b * block_bytes, codes + b * 32, scale_min + b * 2);
  }
}

void SplitQ4_K(const std::byte* block, uint8_t* nibbles, float* scale_min) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  uint16_t d_bits, dmin_bits;
  std::memcpy(&d_bits, b, 2);
  std::memcpy(&dmin_bits, b + 2, 2);
  const float d = F16ToF32(d_bits), dmin = F16ToF32(dmin_bits);
  KScaleMins(d, dmin, b + 4, scale_min);
  const uint8_t* qs = b + 16;
  for (int e = 0; e < 256; e += 2) {
    const auto nibble = [&](int v) { return (qs[32 * (v / 64) + v % 32] >> (4 * ((v % 64) / 32))) & 0xF; };
    nibbles[e / 2] = uint8_t(nibble(e) | (nibble(e + 1) << 4));
  }
}

std::vector<int64_t> TorchShape(const std::vector<int64_t>& ne) { return {ne.rbegin(), ne.rend()}; }

// A block tensor's split into codes and scales (or (scale, min) pairs), made once every tensor
// info is read and accepted, in parts of whole blocks that threads take: single-threaded, the
// split ran at ~0.7 GB/s of file on the AMD host (14% of a 400-token Q8_0 bench's samples).
struct SplitJob {
  uint32_t type;
  const std::byte* blocks;  // the file's
  int64_t elements;
  std::byte* codes;         // int8 or uint8 [elements], or nibbles [elements / 2]
  float* scales;            // [elements / Int8GroupOf(type)], or pairs [elements / 32][2]
};
// Values per part: whole blocks of every type (32 and 256 divide it).
constexpr int64_t kSplitPartValues = int64_t(1) << 20;

// Values [first, first + count) of the job, count a whole number of the type's blocks.
void SplitPart(const SplitJob& j, int64_t first, int64_t count);

// A Q6_K super-block (ggml's block_q6_K: ql[128] low 4 bits, qh[64] high 2 bits, int8 scales[16],
// fp16 d) as 256 codes q - 32 and 16 scales d * scales[j]. Value e of the block: half h = e / 128,
// within it k = (e % 128) / 32 and l = e % 32; its low bits are nibble k / 2 of ql[64h + 32(k % 2)
// + l], its high bits bits 2k, 2k + 1 of qh[32h + l]; its scale is scales[e / 16].
void SplitQ6_K(const std::byte* block, int8_t* codes, float* scales) {
  const auto* ql = reinterpret_cast<const uint8_t*>(block);
  const uint8_t* qh = ql + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(qh + 64);
  uint16_t d_bits;
  std::memcpy(&d_bits, sc + 16, 2);
  const float d = F16ToF32(d_bits);
  for (int j = 0; j < 16; ++j) scales[j] = d * float(sc[j]);  // exact: 11 x 8 significant bits
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int low = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF;
    const int high = (qh[32 * h + l] >> (2 * k)) & 3;
    codes[e] = int8_t((low | (high << 4)) - 32);
  }
}

// A Q8_0 or Q6_K tensor of `elements` values as int8 codes [elements] and F32 scales
// [elements / Int8GroupOf(type)].
void SplitToInt8(uint32_t type, const std::byte* blocks, int64_t elements, int8_t* codes, float* scales) {
  if (GgmlType(type) == GgmlType::kQ6_K) {
    for (int64_t b = 0; b < elements / 256; ++b) SplitQ6_K(blocks + b * 210, codes + b * 256, scales + b * 16);
    return;
  }
  for (int64_t b = 0; b < elements / kQ8_0Values; ++b) {
    const std::byte* block = blocks + b * kQ8_0Bytes;
    uint16_t d;
    std::memcpy(&d, block, 2);
    scales[b] = F16ToF32(d);
    std::memcpy(codes + b * kQ8_0Values, block + 2, kQ8_0Values);
  }
}

void SplitPart(const SplitJob& j, int64_t first, int64_t count) {
  const GgmlTypeTraits traits = GgmlTraits(j.type);
  const std::byte* blocks = j.blocks + first / traits.block_elements * traits.block_bytes;
  if (IsUint4Min(j.type)) {
    SplitToUint4(j.type, blocks, count, reinterpret_cast<uint8_t*>(j.codes) + first / 2, j.scales + first / 32 * 2);
  } else if (IsUint8Min(j.type)) {
    SplitToUint8(j.type, blocks, count, reinterpret_cast<uint8_t*>(j.codes) + first, j.scales + first / 32 * 2);
  } else {
    SplitToInt8(j.type, blocks, count, reinterpret_cast<int8_t*>(j.codes) + first, j.scales + first / Int8GroupOf(j.type));
  }
}

}  // namespace

Status Checkpoint::AddGgufFile(const std::string& first_path, int load_threads) {
  // Every shard of a split GGUF (one file otherwise), mapped; the tensor infos with the data
  // section of the shard that holds each (ReadGgufFile checks the split keys and duplicates).
  auto shard_paths = GgufShardPaths(first_path);
  if (!shard_paths.ok()) return shard_paths.status();
  auto merged = ReadGgufFile(first_path);
  if (!merged.ok()) return merged.status();
  std::vector<const std::byte*> shard_data;
  for (size_t i = 0; i < shard_paths->size(); ++i) {
    auto mapped = MappedFile::Open((*shard_paths)[i]);
    if (!mapped.ok()) return mapped.status();
    // The tensor infos were checked against the size ReadGgufFile mapped: the same file, or an error.
    if ((*mapped)->size() != merged->shard_file_bytes[i]) {
      return Status::Error((*shard_paths)[i] + ": changed while it was being read");
    }
    shard_data.push_back((*mapped)->data() + merged->shard_data_offsets[i]);
    files_.push_back(std::move(mapped).value());
  }
  // Errors name the first shard's path (where the metadata is), tensor data the shard's.
  const std::string& path = shard_paths->front();
  std::map<std::string, std::vector<std::string>> unsupported;  // type name -> tensors
  struct SplitKv {
    const GgufTensorInfo* k_b = nullptr;
    const GgufTensorInfo* v_b = nullptr;
  };
  std::map<int, SplitKv> split_kv;
  // The split pairs, their layers' combined tensors first: a layer with attn_kv_b reads it and
  // not the pair; a pair of one float type is rearranged into kv_b_proj below; any other pair
  // keeps its formats (kept_pair).
  const std::set<int> combined_kv_b = CombinedKvBLayers(merged->tensors);
  for (const GgufTensorInfo& t : merged->tensors) {
    const std::optional<HfTensorName> hf = HfNameOfGgufTensor(t.name);
    if (hf && !hf->kv_part.empty()) (hf->kv_part == "k_b" ? split_kv[hf->layer].k_b : split_kv[hf->layer].v_b) = &t;
  }
  std::set<int> kept_pair;
  std::vector<SplitJob> split_jobs;  // made below, once every tensor is accepted
  for (const auto& [layer, kv] : split_kv) {
    if (combined_kv_b.count(layer)) continue;
    if (kv.k_b == nullptr || kv.v_b == nullptr) {
      return Status::Error(path + ": layer " + std::to_string(layer) + " has only one of attn_k_b and attn_v_b");
    }
    const GgufTensorInfo &k = *kv.k_b, &v = *kv.v_b;  // ne: k [nope, kv_lora, heads], v [kv_lora, v, heads]
    if (k.ne.size() != 3 || v.ne.size() != 3 || k.ne[2] != v.ne[2] || k.ne[1] != v.ne[0]) {
      return Status::Error(path + ": layer " + std::to_string(layer) +
                           ": attn_k_b and attn_v_b do not fit together as [heads, kv_lora, nope] and [heads, v, kv_lora]");
    }
    const std::optional<DType> kd = DTypeOfGgml(k.type), vd = DTypeOfGgml(v.type);
    if (kd && vd && (*kd == DType::kI8 || *vd == DType::kI8 || k.type != v.type)) kept_pair.insert(layer);
  }
  auto add = [&](TensorView view) -> Status {
    if (tensors_.count(view.name)) return Status::Error(path + ": tensor '" + view.name + "' appears twice");
    total_tensor_bytes_ += view.num_bytes;
    tensors_.emplace(view.name, std::move(view));
    return Status::Ok();
  };
  for (const GgufTensorInfo& t : merged->tensors) {
    const std::byte* data = shard_data[size_t(t.shard)];
    const std::string& file = (*shard_paths)[size_t(t.shard)];
    const std::optional<DType> dtype = DTypeOfGgml(t.type);
    if (!dtype) {
      unsupported[GgmlTraits(t.type).name].push_back(t.name);
      continue;
    }
    const std::optional<HfTensorName> hf = HfNameOfGgufTensor(t.name);
    // A split pair: rearranged below, not read (the layer's attn_kv_b is), or kept as it is.
    if (hf && !hf->kv_part.empty() && !kept_pair.count(hf->layer)) continue;
    // The values' bytes, and for the block types their F32 scales: split out of the blocks into
    // owned memory. Q8_0 / Q6_K: int8 codes, NAME_scale [.., cols / group]; Q4_K / Q4_0: nibbles
    // (two a byte: NAME [.., cols / 2]), NAME_scale_min [.., cols / 32, 2].
    int64_t elements = 1;
    for (int64_t d : t.ne) elements *= d;
    const std::byte* values = data + t.offset;
    const std::byte* scales = nullptr;
    const bool q4_k = IsUint4Min(t.type);  // Q4_K or Q4_0
    const bool with_mins = q4_k || IsUint8Min(t.type);
    const int64_t group = Int8GroupOf(t.type);
    const size_t group_scale_bytes = with_mins ? 8 : 4;
    size_t value_bytes = size_t(t.num_bytes);
    if (*dtype == DType::kI8) {
      value_bytes = q4_k ? size_t(elements) / 2 : size_t(elements);
      const size_t codes_bytes = (value_bytes + 63) / 64 * 64;
      auto owned = MappedFile::SharedAnonymous(codes_bytes + size_t(elements / group) * group_scale_bytes);
      if (!owned.ok()) return owned.status();
      std::byte* out = (*owned)->mutable_data();
      split_jobs.push_back({.type = t.type, .blocks = values, .elements = elements, .codes = out,
                            .scales = reinterpret_cast<float*>(out + codes_bytes)});
      values = out;
      scales = out + codes_bytes;
      files_.push_back(std::move(owned).value());
    }
    // One tensor (or one expert's slice of `count` values from value `first`): its values, and
    // its scales under NAME_scale (NAME_scale_min).
    auto add_tensor = [&](std::string name, std::vector<int64_t> shape, int64_t first, int64_t count) -> Status {
      // Bytes per value: whole (the float types, int8 codes) or half (nibbles); never
      // value_bytes * first / elements, which overflows 64 bits for DeepSeek-V3's stacked experts.
      const auto byte_count = [&](int64_t n) {
        return q4_k ? size_t(n) / 2 : value_bytes / size_t(elements) * size_t(n);
      };
      const size_t bytes = byte_count(count);
      const size_t offset = byte_count(first);
      if (scales != nullptr) {
        std::vector<int64_t> scale_shape = shape;
        scale_shape.back() /= group;
        if (with_mins) scale_shape.push_back(2);
        MLA_RETURN_IF_ERROR(add(TensorView{.name = name + (with_mins ? "_scale_min" : "_scale"), .dtype = DType::kF32,
                                           .shape = scale_shape,
                                           .data = scales + size_t(first / group) * group_scale_bytes,
                                           .num_bytes = size_t(count / group) * group_scale_bytes, .file = file}));
        if (q4_k) shape.back() /= 2;  // two nibbles a byte
      }
      return add(TensorView{.name = std::move(name), .dtype = *dtype, .shape = std::move(shape),
                            .data = values + offset, .num_bytes = bytes, .file = file});
    };
    if (!hf) {
      MLA_RETURN_IF_ERROR(add_tensor(t.name, TorchShape(t.ne), 0, elements));  // its own name (e.g. an MTP layer's)
    } else if (!hf->kv_part.empty()) {
      // k_b [heads, kv_lora, nope] as [heads * kv_lora, nope]; v_b [heads, v, kv_lora] as [heads * v, kv_lora].
      MLA_RETURN_IF_ERROR(add_tensor(
          "model.layers." + std::to_string(hf->layer) + ".self_attn.kv_b_proj.weight_" + hf->kv_part,
          {t.ne[2] * t.ne[1], t.ne[0]}, 0, elements));
    } else if (!hf->name.empty()) {
      MLA_RETURN_IF_ERROR(add_tensor(hf->name, TorchShape(t.ne), 0, elements));
    } else {
      // [experts][rows][cols]: one view per expert.
      if (t.ne.size() != 3) return Status::Error(path + ": tensor " + t.name + " is not 3-D [experts, rows, cols]");
      const int64_t per_expert = t.ne[0] * t.ne[1];
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        MLA_RETURN_IF_ERROR(add_tensor(HfExpertTensorName(hf->layer, e, hf->expert_projection), {t.ne[1], t.ne[0]},
                                       e * per_expert, per_expert));
      }
    }
  }
  if (!unsupported.empty()) {
    std::string message = path + ": tensor types mlaserve does not compute yet (supported: F32, F16, BF16, Q8_0, Q6_K, Q5_K, Q5_1, Q5_0, Q4_K, Q4_1, Q4_0):";
    for (const auto& [type, names] : unsupported) {
      message += " " + type + " (" + std::to_string(names.size()) + " tensors: " + names[0] +
                 (names.size() > 1 ? ", " + names[1] : "") + (names.size() > 2 ? ", ..." : "") + ")";
    }
    return Status::Error(message);
  }
  std::vector<std::pair<size_t, int64_t>> parts;  // (job, first value)
  for (size_t i = 0; i < split_jobs.size(); ++i) {
    for (int64_t first = 0; first < split_jobs[i].elements; first += kSplitPartValues) parts.push_back({i, first});
  }
  if (!parts.empty()) {
    ThreadPool pool(load_threads > 0 ? load_threads : ThreadPool::DefaultThreadCount());
    pool.ParallelFor(int64_t(parts.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const auto [job, first] = parts[size_t(p)];
        SplitPart(split_jobs[job], first, std::min(kSplitPartValues, split_jobs[job].elements - first));
      }
    });
  }
  // A pair of one float type: kv_b_proj[h * (nope + v) + j][c] = j < nope ? k_b[h][c][j] : v_b[h][j - nope][c].
  for (const auto& [layer, kv] : split_kv) {
    if (combined_kv_b.count(layer) || kept_pair.count(layer)) continue;
    const std::string name = "model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight";
    const GgufTensorInfo &k = *kv.k_b, &v = *kv.v_b;  // checked above
    const int64_t nope = k.ne[0], lora = k.ne[1], heads = k.ne[2], vdim = v.ne[1];
    const DType out_dtype = *DTypeOfGgml(k.type);
    const size_t elem = size_t(DTypeBytes(out_dtype));
    const size_t bytes = size_t(heads * (nope + vdim) * lora) * elem;
    auto owned = MappedFile::SharedAnonymous(bytes);
    if (!owned.ok()) return owned.status();
    std::byte* out = (*owned)->mutable_data();
    const std::byte* kb = shard_data[size_t(k.shard)] + k.offset;
    const std::byte* vb = shard_data[size_t(v.shard)] + v.offset;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < nope; ++j) {
        std::byte* row = out + size_t((h * (nope + vdim) + j) * lora) * elem;
        for (int64_t c = 0; c < lora; ++c) {
          std::memcpy(row + size_t(c) * elem, kb + size_t((h * lora + c) * nope + j) * elem, elem);
        }
      }
      std::memcpy(out + size_t((h * (nope + vdim) + nope) * lora) * elem, vb + size_t(h * vdim * lora) * elem,
                  size_t(vdim * lora) * elem);
    }
    MLA_RETURN_IF_ERROR(add(TensorView{.name = name, .dtype = out_dtype, .shape = {heads * (nope + vdim), lora},
                                       .data = out, .num_bytes = bytes, .file = path + " (attn_k_b + attn_v_b)"}));
    files_.push_back(std::move(owned).value());
  }
  return Status::Ok();
}

}  // namespace mlaserve
