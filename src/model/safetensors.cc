#include "model/safetensors.h"

#include "core/read_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace mlaserve {
namespace fs = std::filesystem;
using nlohmann::json;

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::Error(path + ": cannot stat: " + std::strerror(errno));
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    // Not MAP_POPULATE: the matrices are packed into owned copies at load and their pages given
    // back one matrix at a time (Model::Load), and unused tensors (MTP layers) are never read.
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::Error(path + ": mmap failed: " + std::strerror(errno));
    }
    file->data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return file;
}

void Checkpoint::ReleaseMappedPages(const void* data, size_t num_bytes) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + num_bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

namespace {

Result<DType> ParseDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  if (s == "BOOL") return DType::kBool;
  return Status::Error("dtype " + s + " is not supported (supported: F32, BF16, F16, F8_E4M3, I32, I64, BOOL)");
}

}  // namespace

Status Checkpoint::AddFile(const std::string& path,
                           const std::vector<std::string>* expected_names) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  const MappedFile& file = **mapped;
  if (file.size() < 8) return Status::Error(path + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > file.size() - 8 || header_len > (100u << 20)) {
    return Status::Error(path + ": not a safetensors file (header length " +
                         std::to_string(header_len) + " exceeds the file)");
  }
  json header = json::parse(reinterpret_cast<const char*>(file.data()) + 8,
                            reinterpret_cast<const char*>(file.data()) + 8 + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::Error(path + ": safetensors header is not valid JSON");
  }
  const std::byte* data_begin = file.data() + 8 + header_len;
  const size_t data_size = file.size() - 8 - header_len;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_object() && metadata_.empty()) {
        for (auto& [k, v] : entry.items()) {
          if (v.is_string()) metadata_[k] = v.get<std::string>();
        }
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() ||
        !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      return Status::Error(where + ": malformed header entry");
    }
    auto dtype = ParseDType(entry["dtype"].get<std::string>());
    if (!dtype.ok()) return Status::Error(where + ": " + dtype.error());
    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.file = path;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned()) return Status::Error(where + ": malformed shape");
      view.shape.push_back(d.get<int64_t>());
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return Status::Error(where + ": malformed data_offsets");
    }
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return Status::Error(where + ": data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") lie outside the file");
    }
    if (end - begin != uint64_t(view.numel()) * uint64_t(DTypeBytes(view.dtype))) {
      return Status::Error(where + ": " + std::to_string(end - begin) +
                           " bytes do not match shape " + view.ShapeString() + " of " +
                           DTypeName(view.dtype));
    }
    view.data = data_begin + begin;
    view.num_bytes = end - begin;
    if (expected_names != nullptr &&
        std::find(expected_names->begin(), expected_names->end(), name) ==
            expected_names->end()) {
      return Status::Error(where + " is not listed for this file in model.safetensors.index.json");
    }
    if (tensors_.count(name)) return Status::Error(where + " appears in more than one file");
    total_tensor_bytes_ += view.num_bytes;
    tensors_.emplace(name, std::move(view));
  }
  files_.push_back(std::move(mapped).value());
  return Status::Ok();
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return Status::Error(path + ": no such file or directory");
    MLA_RETURN_IF_ERROR(ckpt->AddFile(path, nullptr));
    return ckpt;
  }
  const fs::path dir(path);
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    auto text = ReadWholeFile(index_path.string());
    if (!text.ok()) return text.status();
    json index = json::parse(*text, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return Status::Error(index_path.string() + ": not valid JSON with a weight_map object");
    }
    std::map<std::string, std::vector<std::string>> names_by_file;
    for (auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) return Status::Error(index_path.string() + ": bad entry for " + name);
      names_by_file[file.get<std::string>()].push_back(name);
    }
    for (auto& [file, names] : names_by_file) {
      if (file.find('/') != std::string::npos) {
        return Status::Error(index_path.string() + ": shard name '" + file + "' is not a plain file name");
      }
      MLA_RETURN_IF_ERROR(ckpt->AddFile((dir / file).string(), &names));
    }
    for (auto& [file, names] : names_by_file) {
      for (auto& name : names) {
        if (!ckpt->tensors_.count(name)) {
          return Status::Error(index_path.string() + ": tensor '" + name + "' is missing from " + file);
        }
      }
    }
    return ckpt;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::Error(path + ": no *.safetensors files in the model directory");
  for (const auto& f : files) MLA_RETURN_IF_ERROR(ckpt->AddFile(f, nullptr));
  return ckpt;
}

const TensorView* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace mlaserve
