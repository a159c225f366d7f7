// Writes GGUF files (version 3, little-endian; model/gguf.h describes the layout): metadata
// key/values in the order set, then tensor infos and data in the order added, each tensor's data
// at a multiple of the alignment (32, or general.alignment when set as a uint32).
// Ownership: AddTensor keeps a view of the caller's bytes, which must stay valid until Write
// returns; everything else is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"

namespace mlaserve {

class GgufWriter {
 public:
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetU64(const std::string& key, uint64_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStrings(const std::string& key, const std::vector<std::string>& v);
  void SetI32s(const std::string& key, const std::vector<int32_t>& v);
  void SetF32s(const std::string& key, const std::vector<float>& v);

  // `ne` innermost first; `data` must be exactly the bytes ne and type take.
  Status AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type, std::span<const std::byte> data);

  Status Write(const std::string& path) const;
  // As llama.cpp's gguf-split writes a split GGUF: PREFIX-00001-of-0000N.gguf ..., at most
  // max_tensors tensors a shard (>= 1), the metadata in the first, and every shard's split.no
  // (from 0), split.count and split.tensors.count. Returns the paths written.
  Result<std::vector<std::string>> WriteSplit(const std::string& prefix, size_t max_tensors) const;

 private:
  void Key(const std::string& key, GgufValueType type);
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::span<const std::byte> data;
  };
  Status WriteFile(const std::string& path, const std::string& metadata, uint64_t num_metadata,
                   const std::vector<Tensor>& tensors) const;
  std::string metadata_;  // the encoded key/values
  uint64_t num_metadata_ = 0;
  uint64_t alignment_ = 32;
  std::vector<Tensor> tensors_;
};

}  // namespace mlaserve
