#include "model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace mlaserve {

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void SafetensorsWriter::Declare(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  size_t bytes = size_t(DTypeBytes(dtype));
  for (int64_t d : shape) bytes *= size_t(d);
  entries_.push_back(Entry{name, dtype, std::move(shape), total_bytes_, total_bytes_ + bytes});
  total_bytes_ += bytes;
}

Status SafetensorsWriter::Begin() {
  nlohmann::ordered_json header;
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", DTypeName(e.dtype)}, {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) return Status::Error(path_ + ": cannot create: " + std::strerror(errno));
  const uint64_t header_len = text.size();
  if (std::fwrite(&header_len, 8, 1, file_) != 1 ||
      std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    return Status::Error(path_ + ": write failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status SafetensorsWriter::Write(const void* data, size_t num_bytes) {
  if (written_bytes_ + num_bytes > total_bytes_) {
    return Status::Error(path_ + ": more tensor data written than declared");
  }
  if (std::fwrite(data, 1, num_bytes, file_) != num_bytes) {
    return Status::Error(path_ + ": write failed: " + std::strerror(errno));
  }
  written_bytes_ += num_bytes;
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  if (written_bytes_ != total_bytes_) {
    return Status::Error(path_ + ": " + std::to_string(written_bytes_) + " of " +
                         std::to_string(total_bytes_) + " tensor bytes written");
  }
  if (std::fclose(file_) != 0) {
    file_ = nullptr;
    return Status::Error(path_ + ": close failed: " + std::strerror(errno));
  }
  file_ = nullptr;
  return Status::Ok();
}

}  // namespace mlaserve
