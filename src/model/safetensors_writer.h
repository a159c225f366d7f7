// Writes a safetensors file tensor by tensor, streaming the data, so checkpoints larger than
// memory can be produced (mlaserve init-random). Declare every tensor, then Begin(), then
// Write() each tensor's bytes in declaration order, in as many pieces as convenient.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mlaserve {

class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path) : path_(std::move(path)) {}
  ~SafetensorsWriter();

  void Declare(const std::string& name, DType dtype, std::vector<int64_t> shape);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  Status Begin();                                  // writes the header
  Status Write(const void* data, size_t num_bytes);  // appends tensor data
  Status Finish();                                 // checks every byte was written, closes

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin, end;
  };
  std::string path_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  size_t total_bytes_ = 0;
  size_t written_bytes_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace mlaserve
