// The GGUF reader and writer (model/gguf.h, model/gguf_writer.h): what the writer writes reads
// back value for value and byte for byte; every prefix of a valid file and each kind of bad
// header is refused with a line naming the problem (never a crash); llama.cpp's deepseek2 names
// map to Hugging Face's and back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <array>
#include <functional>
#include <random>
#include <sstream>
#include <utility>
#include <unistd.h>

#include "core/float16.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_writer.h"
#include "model/safetensors.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::byte> Bytes(size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte((i * 31 + size_t(seed) * 7) & 0xff);
  return out;
}

// The bytes of `values` as an F32 tensor's data.
std::vector<std::byte> F32Bytes(const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A deepseek2 file at `path` with the tensors `add` gives the writer (their bytes must outlive the
// call), opened as a checkpoint.
Result<std::unique_ptr<Checkpoint>> WriteAndOpen(const std::string& path, const std::function<void(GgufWriter&)>& add) {
  GgufWriter w;
  w.SetString("general.architecture", "deepseek2");
  add(w);
  if (Status written = w.Write(path); !written.ok()) return written;
  return Checkpoint::Open(path);
}

// A small file with one value of every kind and three tensors of different types.
std::string WriteSample(const std::string& path) {
  GgufWriter w;
  w.SetString("general.architecture", "deepseek2");
  w.SetU32("deepseek2.block_count", 3);
  w.SetI32("an.int", -5);
  w.SetU64("a.u64", uint64_t(1) << 40);
  w.SetF32("a.float", 0.25f);
  w.SetBool("a.bool", true);
  w.SetStrings("some.strings", {"a", "", "ccc"});
  w.SetI32s("some.ints", {1, -2, 3});
  w.SetF32s("some.floats", {0.5f, 1.5f});
  static const std::vector<std::byte> a = Bytes(4 * 6, 1), b = Bytes(2 * 64, 2), q = Bytes(34 * 2, 3);
  EXPECT_TRUE(w.AddTensor("t.f32", {3, 2}, GgmlType::kF32, a).ok());
  EXPECT_TRUE(w.AddTensor("t.bf16", {64}, GgmlType::kBF16, b).ok());
  EXPECT_TRUE(w.AddTensor("t.q8_0", {32, 2}, GgmlType::kQ8_0, q).ok());
  EXPECT_TRUE(w.Write(path).ok());
  return ReadAll(path);
}

TEST(Gguf, WhatTheWriterWritesReadsBack) {
  testing::TempDir dir;
  const std::string bytes = WriteSample(dir.path() + "/x.gguf");
  auto f = ParseGguf(bytes, "x.gguf");
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(*f->Text("general.architecture"), "deepseek2");
  EXPECT_EQ(*f->Integer("deepseek2.block_count"), 3);
  EXPECT_EQ(*f->Integer("an.int"), -5);
  EXPECT_EQ(*f->Integer("a.u64"), int64_t(1) << 40);
  EXPECT_EQ(*f->Real("a.float"), 0.25);
  EXPECT_EQ(*f->Integer("a.bool"), 1);
  EXPECT_EQ(f->Find("some.strings")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->Find("some.ints")->integers, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->Find("some.floats")->reals, (std::vector<double>{0.5, 1.5}));
  EXPECT_FALSE(f->Integer("general.architecture").ok()) << "a string is not an integer";
  EXPECT_NE(f->Integer("absent").error().find("absent is missing"), std::string::npos);
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->data_offset % 32, 0u);
  const std::vector<std::vector<std::byte>> expected = {Bytes(4 * 6, 1), Bytes(2 * 64, 2), Bytes(34 * 2, 3)};
  for (size_t i = 0; i < 3; ++i) {
    const GgufTensorInfo& t = f->tensors[i];
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    ASSERT_EQ(t.num_bytes, expected[i].size()) << t.name;
    EXPECT_EQ(std::memcmp(bytes.data() + f->data_offset + t.offset, expected[i].data(), t.num_bytes), 0) << t.name;
  }
  EXPECT_EQ(f->tensors[0].ne, (std::vector<int64_t>{3, 2}));
  EXPECT_STREQ(GgmlTraits(f->tensors[2].type).name, "Q8_0");
}

// One tensor `t` of `type` (GGUF dimensions ne) written as a file and opened as a checkpoint: each
// value's weight as the kernels form it from the codes and F32 scales the loader split the blocks
// into (code x scale; with `t_scale_min`, fma(code, scale, -min)), and the loaded shapes.
struct LoadedBlocks {
  std::vector<float> weights;
  std::vector<int64_t> codes_shape, scales_shape;
};
LoadedBlocks LoadBlocks(GgmlType type, const std::vector<int64_t>& ne, const std::vector<std::byte>& blocks) {
  LoadedBlocks out;
  testing::TempDir dir;
  auto ckpt = WriteAndOpen(dir.path() + "/t.gguf", [&](GgufWriter& w) { EXPECT_TRUE(w.AddTensor("t", ne, type, blocks).ok()); });
  EXPECT_TRUE(ckpt.ok()) << ckpt.error();
  if (!ckpt.ok()) return out;
  const TensorView* codes = (*ckpt)->Find("t");
  const TensorView* pairs = (*ckpt)->Find("t_scale_min");
  const TensorView* scales = pairs != nullptr ? pairs : (*ckpt)->Find("t_scale");
  if (codes == nullptr || scales == nullptr) {
    ADD_FAILURE() << "no codes or scales for " << GgmlTraits(uint32_t(type)).name;
    return out;
  }
  EXPECT_EQ(codes->dtype, DType::kI8);
  EXPECT_EQ(scales->dtype, DType::kF32);
  out.codes_shape = codes->shape;
  out.scales_shape = scales->shape;
  size_t elements = 1;
  for (int64_t d : ne) elements *= size_t(d);
  const bool nibbles = codes->num_bytes * 2 == elements;
  const size_t floats_per_group = pairs != nullptr ? 2 : 1;
  const size_t group = elements / (scales->num_bytes / 4 / floats_per_group);
  for (size_t i = 0; i < elements; ++i) {
    const auto byte = uint8_t(codes->data[nibbles ? i / 2 : i]);
    const float code = nibbles ? float((byte >> (4 * (i % 2))) & 0xF) : pairs != nullptr ? float(byte) : float(int8_t(byte));
    float at[2] = {0.0f, 0.0f};
    std::memcpy(at, scales->data + 4 * (i / group) * floats_per_group, 4 * floats_per_group);
    out.weights.push_back(pairs != nullptr ? std::fma(code, at[0], -at[1]) : code * at[0]);
  }
  return out;
}

// got[i] within relative `tolerance` of want[i] (0: equal), for every i.
void ExpectWeights(const std::vector<float>& got, const std::vector<float>& want, float tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::abs(want[i]))) << what << " value " << i;
  }
}

// Q6_K super-blocks (random bits, normal fp16 scales) load as int8 codes and F32 scales per 16
// whose products are exactly what ggml's dequantize_row_q6_K makes of them (written out here
// as ggml loops over the block, not as the loader indexes it).
TEST(Gguf, Q6_KBlocksLoadAsTheValuesGgmlDequantizes) {
  std::mt19937 rng(7);
  // 3 blocks, then past the loader's 1M-value parts (SplitPart from first > 0).
  for (const int kBlocks : {3, 4100}) {
    std::vector<std::byte> blocks(kBlocks * 210);
    for (std::byte& b : blocks) b = std::byte(rng() & 0xff);
    std::vector<float> want(kBlocks * 256);
    for (int b = 0; b < kBlocks; ++b) {
      const uint16_t d_bits = F32ToF16(0.0123f * float(b + 1));
      std::memcpy(&blocks[size_t(b) * 210 + 208], &d_bits, 2);
      const auto* ql = reinterpret_cast<const uint8_t*>(&blocks[size_t(b) * 210]);
      const uint8_t* qh = ql + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(ql + 192);
      const float d = F16ToF32(d_bits);
      float* y = want.data() + b * 256;
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * float(sc[is]) * float(q1);
          y[l + 32] = d * float(sc[is + 2]) * float(q2);
          y[l + 64] = d * float(sc[is + 4]) * float(q3);
          y[l + 96] = d * float(sc[is + 6]) * float(q4);
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
      }
    }
    const LoadedBlocks loaded = LoadBlocks(GgmlType::kQ6_K, {256, kBlocks}, blocks);
    EXPECT_EQ(loaded.codes_shape, (std::vector<int64_t>{kBlocks, 256}));
    EXPECT_EQ(loaded.scales_shape, (std::vector<int64_t>{kBlocks, 16}));
    ExpectWeights(loaded.weights, want, 0.0f, "Q6_K");
  }
}

// kBlocks random K-type super-blocks of block_bytes each, with finite fp16 d and dmin (a file's
// first four bytes of a block): d_step * (b + 1) and dmin_step * (b + 2) for block b.
std::vector<std::byte> RandomKBlocks(int blocks, size_t block_bytes, float d_step, float dmin_step, std::mt19937& rng) {
  std::vector<std::byte> bytes(size_t(blocks) * block_bytes);
  for (std::byte& b : bytes) b = std::byte(rng() & 0xff);
  for (int b = 0; b < blocks; ++b) {
    const uint16_t d_bits = F32ToF16(d_step * float(b + 1)), dmin_bits = F32ToF16(dmin_step * float(b + 2));
    std::memcpy(&bytes[size_t(b) * block_bytes], &d_bits, 2);
    std::memcpy(&bytes[size_t(b) * block_bytes + 2], &dmin_bits, 2);
  }
  return bytes;
}

// A K-type block's d and dmin, as stored (fp16).
std::pair<float, float> KBlockScales(const std::byte* block) {
  uint16_t d_bits, dmin_bits;
  std::memcpy(&d_bits, block, 2);
  std::memcpy(&dmin_bits, block + 2, 2);
  return {F16ToF32(d_bits), F16ToF32(dmin_bits)};
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j from a K block's 12 bytes.
void ScaleMinK4(const uint8_t* scales, int j, int& sc, int& m) {
  sc = j < 4 ? scales[j] & 63 : (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
  m = j < 4 ? scales[j + 4] & 63 : (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
}

// ggml's scale and min of sub-blocks is and is + 1 of a K block: {d * sc, dmin * m} of each.
std::array<float, 4> SubBlockPair(const uint8_t* scales, int is, float d, float dmin) {
  int sc1, m1, sc2, m2;
  ScaleMinK4(scales, is, sc1, m1);
  ScaleMinK4(scales, is + 1, sc2, m2);
  return {d * float(sc1), dmin * float(m1), d * float(sc2), dmin * float(m2)};
}

// Q4_K super-blocks (random bits, normal fp16 d and dmin) load as nibbles and F32 (scale, min)
// pairs per 32 whose weights fma(code, scale, -min) are what ggml's dequantize_row_q4_K makes of
// them (d * sc * q - dmin * m, written out here as ggml loops over the block), to within the
// rounding of its two products.
TEST(Gguf, Q4_KBlocksLoadAsTheValuesGgmlDequantizes) {
  std::mt19937 rng(9);
  // 3 blocks, then past the loader's 1M-value parts (SplitPart from first > 0).
  for (const int kBlocks : {3, 4100}) {
    const std::vector<std::byte> blocks = RandomKBlocks(kBlocks, 144, 0.011f, 0.007f, rng);
    std::vector<float> want(kBlocks * 256);
    for (int b = 0; b < kBlocks; ++b) {
      const std::byte* block = &blocks[size_t(b) * 144];
      const auto* scales = reinterpret_cast<const uint8_t*>(block + 4);
      const auto* q = reinterpret_cast<const uint8_t*>(block + 16);
      const auto [d, dmin] = KBlockScales(block);
      float* y = want.data() + b * 256;
      for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
        const auto [d1, m1, d2, m2] = SubBlockPair(scales, is, d, dmin);
        for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
        q += 32;
      }
    }
    const LoadedBlocks loaded = LoadBlocks(GgmlType::kQ4_K, {256, kBlocks}, blocks);
    EXPECT_EQ(loaded.codes_shape, (std::vector<int64_t>{kBlocks, 128}));
    EXPECT_EQ(loaded.scales_shape, (std::vector<int64_t>{kBlocks, 8, 2}));
    ExpectWeights(loaded.weights, want, 1e-6f, "Q4_K");
  }
}

// Q4_0 blocks load as nibbles and (d, 8 d) pairs: fma(code, d, -8 d) is ggml's (q - 8) * d,
// value j from the low nibble of qs[j], value j + 16 from its high nibble.
TEST(Gguf, Q4_0BlocksLoadAsTheValuesGgmlDequantizes) {
  std::mt19937 rng(13);
  constexpr int kBlocks = 16;  // a row of 512 values
  std::vector<std::byte> blocks(kBlocks * 18);
  for (std::byte& b : blocks) b = std::byte(rng() & 0xff);
  std::vector<float> want(kBlocks * 32);
  for (int b = 0; b < kBlocks; ++b) {
    const uint16_t d_bits = F32ToF16(0.003f * float(b + 1));
    std::memcpy(&blocks[size_t(b) * 18], &d_bits, 2);
    const auto* qs = reinterpret_cast<const uint8_t*>(&blocks[size_t(b) * 18 + 2]);
    for (int j = 0; j < 16; ++j) {
      want[size_t(b * 32 + j)] = float(int(qs[j] & 0xF) - 8) * F16ToF32(d_bits);
      want[size_t(b * 32 + j + 16)] = float(int(qs[j] >> 4) - 8) * F16ToF32(d_bits);
    }
  }
  const LoadedBlocks loaded = LoadBlocks(GgmlType::kQ4_0, {512}, blocks);
  EXPECT_EQ(loaded.codes_shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(loaded.scales_shape, (std::vector<int64_t>{16, 2}));
  ExpectWeights(loaded.weights, want, 0.0f, "Q4_0");
}

// Q5_K super-blocks load as 5-bit codes (one a byte) and (scale, min) pairs per 32 whose weights
// are ggml's dequantize_row_q5_K: d * sc * (low nibble + 16 x its qh bit) - dmin * m.
TEST(Gguf, Q5_KBlocksLoadAsTheValuesGgmlDequantizes) {
  std::mt19937 rng(21);
  // 2 blocks, then past the loader's 1M-value parts (SplitPart from first > 0).
  for (const int kBlocks : {2, 4100}) {
    const std::vector<std::byte> blocks = RandomKBlocks(kBlocks, 176, 0.013f, 0.005f, rng);
    std::vector<float> want(kBlocks * 256);
    for (int b = 0; b < kBlocks; ++b) {
      const std::byte* block = &blocks[size_t(b) * 176];
      const auto* scales = reinterpret_cast<const uint8_t*>(block + 4);
      const auto* qh = reinterpret_cast<const uint8_t*>(block + 16);
      const auto* ql = reinterpret_cast<const uint8_t*>(block + 48);
      const auto [d, dmin] = KBlockScales(block);
      float* y = want.data() + b * 256;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
        const auto [d1, m1, d2, m2] = SubBlockPair(scales, is, d, dmin);
        for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 = uint8_t(u1 << 2);
        u2 = uint8_t(u2 << 2);
      }
    }
    const LoadedBlocks loaded = LoadBlocks(GgmlType::kQ5_K, {256, kBlocks}, blocks);
    EXPECT_EQ(loaded.codes_shape, (std::vector<int64_t>{kBlocks, 256}));
    EXPECT_EQ(loaded.scales_shape, (std::vector<int64_t>{kBlocks, 8, 2}));
    ExpectWeights(loaded.weights, want, 1e-6f, "Q5_K");
  }
}

// Q4_1, Q5_0 and Q5_1 blocks load as codes and (scale, min) pairs whose weights are ggml's
// dequantize_row_q4_1 / q5_0 / q5_1 (written out here: x * d + m, (x - 16) * d, x * d + m, the
// fifth bits from qh as ggml shifts them), to within the rounding of ggml's two operations.
TEST(Gguf, Q4_1Q5_0AndQ5_1BlocksLoadAsTheValuesGgmlDequantizes) {
  std::mt19937 rng(31);
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const bool with_m = type != GgmlType::kQ5_0, five = type != GgmlType::kQ4_1;
    const size_t block_bytes = size_t(GgmlTraits(uint32_t(type)).block_bytes);
    constexpr int kBlocks = 4;
    std::vector<std::byte> blocks(kBlocks * block_bytes);
    for (std::byte& b : blocks) b = std::byte(rng() & 0xff);
    std::vector<float> want(kBlocks * 32);
    for (int b = 0; b < kBlocks; ++b) {
      std::byte* block = &blocks[size_t(b) * block_bytes];
      const uint16_t d_bits = F32ToF16(0.02f * float(b + 1)), m_bits = F32ToF16(-0.1f * float(b + 1));
      std::memcpy(block, &d_bits, 2);
      if (with_m) std::memcpy(block + 2, &m_bits, 2);
      uint32_t qh = 0;
      if (five) std::memcpy(&qh, block + (with_m ? 4 : 2), 4);
      const auto* qs = reinterpret_cast<const uint8_t*>(block + (with_m ? 4 : 2) + (five ? 4 : 0));
      const float d = F16ToF32(d_bits), m = F16ToF32(m_bits);
      for (int j = 0; j < 16; ++j) {
        const int xh_0 = five ? int(((qh >> (j + 0)) << 4) & 0x10) : 0;
        const int xh_1 = five ? int((qh >> (j + 12)) & 0x10) : 0;
        const int x0 = (qs[j] & 0x0F) | xh_0, x1 = (qs[j] >> 4) | xh_1;
        want[size_t(b * 32 + j)] = with_m ? float(x0) * d + m : float(x0 - 16) * d;
        want[size_t(b * 32 + j + 16)] = with_m ? float(x1) * d + m : float(x1 - 16) * d;
      }
    }
    const LoadedBlocks loaded = LoadBlocks(type, {32 * kBlocks}, blocks);
    EXPECT_EQ(loaded.codes_shape, (std::vector<int64_t>{five ? 32 * kBlocks : 16 * kBlocks}));
    ExpectWeights(loaded.weights, want, 1e-6f, GgmlTraits(uint32_t(type)).name);
  }
}

// A split kv_b pair of two types (attn_k_b in Q8_0, attn_v_b in F32, as files mix a K type's
// fallback with another type) keeps each tensor in its format under kv_b_proj's companion names:
// k_b as int8 codes [heads * lora, nope] with a scale per 32 (its blocks run along nope), v_b as
// F32 [heads * v, lora]; no kv_b_proj is made (model/absorbed_weights.h multiplies the pair).
TEST(Gguf, ASplitKvPairOfTwoTypesKeepsEachFormat) {
  constexpr int kNope = 32, kLora = 8, kHeads = 2, kV = 4;
  std::vector<std::byte> k_b(size_t(kHeads * kLora) * kQ8_0Bytes);  // [heads][lora] blocks of nope
  std::vector<float> k_values(size_t(kHeads * kLora * kNope));
  for (int b = 0; b < kHeads * kLora; ++b) {
    const uint16_t d = F32ToF16(0.25f * float(b + 1));
    std::memcpy(&k_b[size_t(b) * kQ8_0Bytes], &d, 2);
    for (int j = 0; j < kNope; ++j) {
      const auto code = int8_t((b * 7 + j * 3) % 255 - 127);
      k_b[size_t(b) * kQ8_0Bytes + 2 + size_t(j)] = std::byte(code);
      k_values[size_t(b * kNope + j)] = float(code) * F16ToF32(d);
    }
  }
  std::vector<float> v_values(size_t(kHeads * kV * kLora));
  for (size_t i = 0; i < v_values.size(); ++i) v_values[i] = 0.5f * float(i) - 3.0f;
  const std::vector<std::byte> v_b = F32Bytes(v_values);
  testing::TempDir dir;
  auto ckpt = WriteAndOpen(dir.path() + "/kv.gguf", [&](GgufWriter& w) {
    EXPECT_TRUE(w.AddTensor("blk.0.attn_k_b.weight", {kNope, kLora, kHeads}, GgmlType::kQ8_0, k_b).ok());
    EXPECT_TRUE(w.AddTensor("blk.0.attn_v_b.weight", {kLora, kV, kHeads}, GgmlType::kF32, v_b).ok());
  });
  ASSERT_TRUE(ckpt.ok()) << ckpt.error();
  EXPECT_EQ((*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight"), nullptr);
  const TensorView* codes = (*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight_k_b");
  const TensorView* scales = (*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight_k_b_scale");
  const TensorView* v = (*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight_v_b");
  ASSERT_TRUE(codes != nullptr && scales != nullptr && v != nullptr);
  EXPECT_EQ(codes->dtype, DType::kI8);
  ASSERT_EQ(codes->shape, (std::vector<int64_t>{kHeads * kLora, kNope}));
  ASSERT_EQ(scales->shape, (std::vector<int64_t>{kHeads * kLora, kNope / 32}));
  for (int r = 0; r < kHeads * kLora; ++r) {
    float scale;
    std::memcpy(&scale, scales->data + 4 * size_t(r), 4);
    for (int j = 0; j < kNope; ++j) {
      const float got = float(int8_t(codes->data[size_t(r * kNope + j)])) * scale;
      ASSERT_EQ(got, k_values[size_t(r * kNope + j)]) << "k_b row " << r << " column " << j;
    }
  }
  EXPECT_EQ(v->dtype, DType::kF32);
  ASSERT_EQ(v->shape, (std::vector<int64_t>{kHeads * kV, kLora}));
  ASSERT_EQ(std::memcmp(v->data, v_values.data(), v_values.size() * 4), 0);
}

// A split pair's problems are one line naming the layer: one tensor of the pair without the other,
// or two that do not fit together; a layer with attn_kv_b as well reads it and not the pair.
TEST(Gguf, SplitPairProblemsAreOneLineAndACombinedTensorWins) {
  constexpr int kNope = 32, kLora = 8, kHeads = 2, kV = 4;
  std::vector<std::byte> k_b(size_t(kHeads * kLora * kNope) * 4), v_b(size_t(kHeads * kV * kLora) * 4),
      kv_b(size_t(kHeads * (kNope + kV) * kLora) * 4), misfit(size_t(kHeads * kV * (kLora + 1)) * 4);
  testing::TempDir dir;
  struct Case {
    const char* name;
    bool k, v, combined, misfit_v;
    const char* error;  // nullptr: loads
  };
  for (const Case& c : {Case{"only_k", true, false, false, false, "layer 0 has only one of attn_k_b and attn_v_b"},
                        Case{"only_v", false, true, false, false, "layer 0 has only one of attn_k_b and attn_v_b"},
                        Case{"misfit", true, true, false, true, "layer 0: attn_k_b and attn_v_b do not fit together"},
                        Case{"both", true, true, true, false, nullptr}}) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.path() + "/" + c.name + ".gguf";
    auto ckpt = WriteAndOpen(path, [&](GgufWriter& w) {
      if (c.k) {
        EXPECT_TRUE(w.AddTensor("blk.0.attn_k_b.weight", {kNope, kLora, kHeads}, GgmlType::kF32, k_b).ok());
      }
      if (c.v && !c.misfit_v) {  // F16: a second type
        EXPECT_TRUE(w.AddTensor("blk.0.attn_v_b.weight", {kLora, kV, kHeads}, GgmlType::kF16,
                                std::span(v_b).first(v_b.size() / 2))
                        .ok());
      }
      if (c.misfit_v) {  // kv_lora + 1 columns against k_b's kv_lora rows
        EXPECT_TRUE(w.AddTensor("blk.0.attn_v_b.weight", {kLora + 1, kV, kHeads}, GgmlType::kF32, misfit).ok());
      }
      if (c.combined) {
        EXPECT_TRUE(w.AddTensor("blk.0.attn_kv_b.weight", {kLora, kHeads * (kNope + kV)}, GgmlType::kF32, kv_b).ok());
      }
    });
    if (c.error != nullptr) {
      ASSERT_FALSE(ckpt.ok());
      EXPECT_NE(ckpt.error().find(c.error), std::string::npos) << ckpt.error();
      EXPECT_EQ(ckpt.error().find('\n'), std::string::npos) << ckpt.error();
      continue;
    }
    ASSERT_TRUE(ckpt.ok()) << ckpt.error();
    const TensorView* combined = (*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight");
    ASSERT_NE(combined, nullptr);
    EXPECT_EQ(combined->file, path);  // the file's attn_kv_b, not a pair rearranged
    EXPECT_EQ((*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight_k_b"), nullptr);
    EXPECT_EQ((*ckpt)->Find("model.layers.0.self_attn.kv_b_proj.weight_v_b"), nullptr);
  }
}

// FreePages gives a block tensor's split codes back for good (they read as zeros after: the pages
// are gone from their shared memory, not only unmapped), while a file-backed tensor's pages are
// dropped and read again from the file.
TEST(Gguf, FreePagesGivesSplitBlocksBackAndKeepsFilePages) {
  constexpr int kRows = 64, kCols = 1024;  // 64 KiB of int8 codes: whole pages
  std::vector<std::byte> blocks(size_t(kRows * kCols / 32) * kQ8_0Bytes);
  for (size_t b = 0; b < blocks.size() / kQ8_0Bytes; ++b) {
    const uint16_t d = F32ToF16(0.5f);
    std::memcpy(&blocks[b * kQ8_0Bytes], &d, 2);
    for (int j = 0; j < 32; ++j) blocks[b * kQ8_0Bytes + 2 + size_t(j)] = std::byte(1 + (b + size_t(j)) % 100);
  }
  const std::vector<std::byte> dense_bytes = F32Bytes(std::vector<float>(size_t(kRows * kCols), 1.5f));
  testing::TempDir dir;
  auto ckpt = WriteAndOpen(dir.path() + "/free.gguf", [&](GgufWriter& w) {
    EXPECT_TRUE(w.AddTensor("blk.0.ffn_up.weight", {kCols, kRows}, GgmlType::kQ8_0, blocks).ok());
    EXPECT_TRUE(w.AddTensor("blk.0.ffn_down.weight", {kCols, kRows}, GgmlType::kF32, dense_bytes).ok());
  });
  ASSERT_TRUE(ckpt.ok()) << ckpt.error();
  const TensorView* codes = (*ckpt)->Find("model.layers.0.mlp.up_proj.weight");
  const TensorView* file_backed = (*ckpt)->Find("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(codes != nullptr && file_backed != nullptr);
  const auto nonzero = [](const TensorView& t, size_t from, size_t to) {
    size_t n = 0;
    for (size_t i = from; i < to; ++i) n += t.data[i] != std::byte{0};
    return n;
  };
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  // The whole pages inside the view: the ones FreePages gives back.
  const auto begin = size_t((reinterpret_cast<uintptr_t>(codes->data) + page - 1) / page * page -
                            reinterpret_cast<uintptr_t>(codes->data));
  const auto end = size_t((reinterpret_cast<uintptr_t>(codes->data) + codes->num_bytes) / page * page -
                          reinterpret_cast<uintptr_t>(codes->data));
  ASSERT_LT(begin, end);
  EXPECT_EQ(nonzero(*codes, begin, end), end - begin);
  (*ckpt)->FreePages(*codes);
  EXPECT_EQ(nonzero(*codes, begin, end), 0u);
  (*ckpt)->FreePages(*file_backed);
  EXPECT_EQ(std::memcmp(file_backed->data, dense_bytes.data(), dense_bytes.size()), 0);
}

TEST(Gguf, EveryTruncationIsRefusedWithALine) {
  testing::TempDir dir;
  const std::string bytes = WriteSample(dir.path() + "/x.gguf");
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = ParseGguf(std::string_view(bytes).substr(0, n), "cut.gguf");
    ASSERT_FALSE(f.ok()) << n << " of " << bytes.size() << " bytes";
    EXPECT_EQ(f.error().rfind("cut.gguf: ", 0), 0u) << f.error();
    EXPECT_EQ(f.error().find('\n'), std::string::npos);
  }
}

// Overwrites the little-endian integer of `size` bytes at `at`.
std::string Patched(std::string bytes, size_t at, uint64_t value, size_t size) {
  std::memcpy(bytes.data() + at, &value, size);
  return bytes;
}

TEST(Gguf, BadHeadersNameTheirProblem) {
  testing::TempDir dir;
  const std::string good = WriteSample(dir.path() + "/x.gguf");
  auto f = ParseGguf(good);
  ASSERT_TRUE(f.ok());
  // The first tensor info follows the metadata: find its name to locate the fields after it.
  const size_t info = good.find("t.f32") - 8;
  const size_t t0_type = info + 8 + 5 + 4 + 2 * 8, t0_offset = t0_type + 4;
  struct Case {
    std::string bytes, message;
  } cases[] = {
      {"GGML" + good.substr(4), "not a GGUF file"},
      {Patched(good, 4, 1, 4), "version 1"},
      {Patched(good, 4, 0x03000000, 4), "GGUF version 50331648"},
      {Patched(good, 8, uint64_t(1) << 60, 8), "tensors cannot fit"},
      {Patched(good, 16, uint64_t(1) << 60, 8), "metadata entries cannot fit"},
      {Patched(good, info + 8 + 5, 5, 4), "has 5 dimensions"},
      {Patched(good, t0_type, 31, 4), "unknown ggml type 31"},
      {Patched(good, t0_offset, 8, 8), "is not a multiple of the alignment"},
      {Patched(good, t0_offset, 1 << 20, 8), "runs past the end of the file"},
      {Patched(good, t0_offset, 128, 8), "overlap"},
  };
  for (const Case& c : cases) {
    auto r = ParseGguf(c.bytes, "bad.gguf");
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_NE(r.error().find(c.message), std::string::npos) << r.error();
  }
  // A Q8_0 row that is not whole blocks.
  GgufWriter w;
  const std::vector<std::byte> q(34);
  EXPECT_FALSE(w.AddTensor("q", {16, 2}, GgmlType::kQ8_0, q).ok());
}

TEST(Gguf, Deepseek2NamesMapToHuggingFacesAndBack) {
  for (const char* layer_name :
       {"attn_norm.weight", "ffn_norm.weight", "attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight",
        "attn_q.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_kv_b.weight", "attn_output.weight",
        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_gate_inp.weight", "exp_probs_b.bias",
        "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"}) {
    const std::string gguf = "blk.17." + std::string(layer_name);
    auto hf = HfNameOfGgufTensor(gguf);
    ASSERT_TRUE(hf.has_value()) << gguf;
    EXPECT_EQ(hf->name.rfind("model.layers.17.", 0), 0u) << hf->name;
    EXPECT_EQ(GgufNameOfHfTensor(hf->name), gguf);
  }
  EXPECT_EQ(HfNameOfGgufTensor("blk.3.attn_kv_b.weight")->name, "model.layers.3.self_attn.kv_b_proj.weight");
  EXPECT_EQ(HfNameOfGgufTensor("blk.3.exp_probs_b.bias")->name, "model.layers.3.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(HfNameOfGgufTensor("token_embd.weight")->name, "model.embed_tokens.weight");
  EXPECT_EQ(HfNameOfGgufTensor("output.weight")->name, "lm_head.weight");
  EXPECT_EQ(HfNameOfGgufTensor("blk.2.ffn_down_exps.weight")->expert_projection, "down_proj");
  EXPECT_EQ(HfNameOfGgufTensor("blk.2.attn_k_b.weight")->kv_part, "k_b");
  EXPECT_FALSE(HfNameOfGgufTensor("blk.x.attn_norm.weight").has_value());
  EXPECT_FALSE(HfNameOfGgufTensor("blk.1.nextn.eh_proj.weight").has_value());
}

// A tiny deepseek2 header (no tensors) plus `extra`, parsed into a config.
Result<ModelConfig> ConfigOf(const std::string& dir, const std::function<void(GgufWriter&)>& extra) {
  GgufWriter w;
  const std::string a = "deepseek2.";
  w.SetString("general.architecture", "deepseek2");
  w.SetU32(a + "block_count", 2);
  w.SetU32(a + "context_length", 128);
  w.SetU32(a + "embedding_length", 64);
  w.SetU32(a + "feed_forward_length", 96);
  w.SetU32(a + "attention.head_count", 4);
  w.SetU32(a + "attention.kv_lora_rank", 32);
  w.SetU32(a + "rope.dimension_count", 16);
  w.SetU32(a + "attention.key_length", 48);
  w.SetU32(a + "attention.value_length", 32);
  w.SetU32(a + "vocab_size", 100);
  w.SetU32(a + "expert_count", 4);
  w.SetU32(a + "expert_used_count", 2);
  w.SetU32(a + "expert_feed_forward_length", 32);
  w.SetU32(a + "leading_dense_block_count", 1);
  extra(w);
  const std::string path = dir + "/c.gguf";
  EXPECT_TRUE(w.Write(path).ok());
  auto f = ParseGguf(ReadAll(path), path);
  if (!f.ok()) return f.status();
  return ModelConfigFromGguf(*f, path);
}

TEST(Gguf, Deepseek2KeysBecomeTheConfigAndUnknownOnesAreRefused) {
  testing::TempDir dir;
  auto plain = ConfigOf(dir.path(), [](GgufWriter&) {});
  ASSERT_TRUE(plain.ok()) << plain.error();
  EXPECT_EQ(plain->qk_nope_head_dim, 32);
  EXPECT_EQ(plain->qk_rope_head_dim, 16);
  EXPECT_EQ(plain->v_head_dim, 32);
  EXPECT_EQ(plain->first_k_dense_replace, 1);
  EXPECT_EQ(plain->scoring_func, ScoringFunc::kSoftmax);
  EXPECT_EQ(plain->topk_method, TopkMethod::kGreedy);
  EXPECT_EQ(plain->family, ModelFamily::kDeepSeekV2);
  // Newer files: the latent's sizes in key_length / value_length, the heads' in *_mla; sigmoid
  // gating, groups, YaRN.
  auto v3 = ConfigOf(dir.path(), [](GgufWriter& w) {
    w.SetU32("deepseek2.attention.key_length_mla", 48);
    w.SetU32("deepseek2.attention.value_length_mla", 32);
    w.SetU32("deepseek2.expert_gating_func", 2);
    w.SetU32("deepseek2.expert_group_count", 2);
    w.SetU32("deepseek2.expert_group_used_count", 1);
    w.SetString("deepseek2.rope.scaling.type", "yarn");
    w.SetF32("deepseek2.rope.scaling.factor", 40.0f);
    w.SetU32("deepseek2.rope.scaling.original_context_length", 64);
    w.SetF32("deepseek2.rope.scaling.yarn_log_multiplier", 0.1f);
  });
  ASSERT_TRUE(v3.ok()) << v3.error();
  EXPECT_EQ(v3->qk_nope_head_dim, 32);
  EXPECT_EQ(v3->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(v3->topk_method, TopkMethod::kGroupLimitedGreedy);
  EXPECT_EQ(v3->n_group, 2);
  EXPECT_TRUE(v3->yarn.enabled);
  EXPECT_NEAR(v3->yarn.mscale_all_dim, 1.0, 1e-6);
  EXPECT_EQ(v3->yarn.original_max_position_embeddings, 64);
  auto gating_none = ConfigOf(dir.path(), [](GgufWriter& w) { w.SetU32("deepseek2.expert_gating_func", 0); });
  ASSERT_TRUE(gating_none.ok()) << gating_none.error();
  EXPECT_EQ(gating_none->scoring_func, ScoringFunc::kSoftmax);
  struct Case {
    std::function<void(GgufWriter&)> extra;
    std::string message;
  } cases[] = {
      {[](GgufWriter& w) { w.SetF32("deepseek2.attention.temperature_scale", 0.1f); },
       "metadata deepseek2.attention.temperature_scale is not supported"},
      {[](GgufWriter& w) { w.SetU32("deepseek2.expert_gating_func", 7); }, "expert_gating_func 7"},
      {[](GgufWriter& w) { w.SetString("deepseek2.rope.scaling.type", "linear"); }, "rope scaling 'linear'"},
  };
  for (const Case& c : cases) {
    auto r = ConfigOf(dir.path(), c.extra);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_NE(r.error().find(c.message), std::string::npos) << r.error();
  }
  // A shard (split.count > 1) not named as one: ReadGgufFile cannot find the others.
  ASSERT_TRUE(ConfigOf(dir.path(), [](GgufWriter& w) { w.SetU32("split.count", 3); }).ok());
  auto shard = ReadGgufFile(dir.path() + "/c.gguf");
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.error().find("one shard of 3 (split.count), but not named as one"), std::string::npos) << shard.error();
}

}  // namespace
}  // namespace mlaserve
