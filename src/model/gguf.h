// GGUF files (llama.cpp's single-file checkpoints), read: the header, the metadata key/values and
// the tensor infos, every count, length, size and offset checked against the file before use, so
// that a bad or hostile file gets one line naming the problem, never a crash or an absurd
// allocation. Versions 2 and 3 (little-endian); version 1 (32-bit counts) is refused by name.
// The format: a 4-byte magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata count;
// then the metadata (key: uint64 length + bytes; uint32 value type; value), the tensor infos
// (name; uint32 n_dims; uint64 ne[n_dims], innermost first; uint32 ggml type; uint64 offset in
// the data section), and the data section at the next multiple of general.alignment (default 32).
// Ownership: ParseGguf copies the metadata and infos out of `bytes`; it keeps no pointer into it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mlaserve {

// ggml's tensor types, by their numbers in the file (ggml.h). Gaps are types ggml removed.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};

// Q8_0's block: an fp16 scale, then 32 int8 codes (GgmlTraits(kQ8_0) says the same).
inline constexpr int kQ8_0Values = 32, kQ8_0Bytes = 34;

struct GgmlTypeTraits {
  const char* name = nullptr;  // "Q4_K"; nullptr: not a type this reader knows
  int block_elements = 0;      // elements per block along the innermost dimension
  int block_bytes = 0;         // bytes per block
};
// The traits of type number `type`; name == nullptr for an unknown number.
GgmlTypeTraits GgmlTraits(uint32_t type);

// Metadata value types, by their numbers in the file.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8,
  kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* GgufValueTypeName(GgufValueType t);

// One metadata value. Scalars: integers (and bools) in `integer`, floats in `real`, strings in
// `text`. Arrays: elements of `element_type` in `integers`, `reals` or `strings`; an array of
// arrays, or of more than 2^24 elements (or past 2^26 elements kept in the whole file), keeps only
// its length (nothing mlaserve reads is one).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  int64_t integer = 0;
  double real = 0;
  bool out_of_range = false;  // a u64 above INT64_MAX: not an integer, its value in `real`
  std::string text;
  GgufValueType element_type = GgufValueType::kU8;
  uint64_t length = 0;   // arrays: element count
  std::vector<int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> strings;

  bool is_integer() const;  // any integer type or bool
  bool is_real() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64 || out_of_range; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // innermost first (ggml's order; a torch shape is its reverse)
  uint32_t type = 0;        // a GgmlType number with known traits
  uint64_t offset = 0;      // from the start of the data section, a multiple of the alignment
  uint64_t num_bytes = 0;   // what ne and the type's blocks take
  int shard = 0;            // which file of a split GGUF holds it (ReadGgufFile; ParseGguf: 0)
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // where the data section starts in the file
  // ReadGgufFile: by shard (one for a single file), the size it parsed and its data_offset; a
  // reader that maps the files again checks the sizes (the infos were checked against them).
  std::vector<uint64_t> shard_file_bytes;
  std::vector<uint64_t> shard_data_offsets;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order; byte ranges inside the file, not overlapping

  const GgufValue* Find(const std::string& key) const;
  // Typed getters: an error naming the key when it is absent (Required) or of another type.
  Result<int64_t> Integer(const std::string& key) const;
  Result<double> Real(const std::string& key) const;  // integers convert
  Result<std::string> Text(const std::string& key) const;
  std::optional<int64_t> OptionalInteger(const std::string& key) const;  // absent or not an integer: none
  std::optional<double> OptionalReal(const std::string& key) const;
};

// Parses a GGUF file whose bytes are `bytes` (the whole file, usually mmapped). `source` names
// the file in errors.
Result<GgufFile> ParseGguf(std::string_view bytes, const std::string& source = "gguf");

}  // namespace mlaserve
