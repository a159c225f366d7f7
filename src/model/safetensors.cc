#include "model/safetensors.h"

#include "model/gguf_model.h"

#include "core/json_quote.h"
#include "core/read_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

Result<std::unique_ptr<MappedFile>> MappedFile::SharedAnonymous(size_t size) {
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->size_ = size;
  file->filled_ = true;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::Error("cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
    file->data_ = static_cast<const std::byte*>(p);
  }
  return file;
}

namespace {

// madvise(advice) over the whole pages inside [data, data + num_bytes).
void AdviseInnerPages(const void* data, size_t num_bytes, int advice) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + num_bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

void Checkpoint::ReleaseMappedPages(const void* data, size_t num_bytes) {
  AdviseInnerPages(data, num_bytes, MADV_DONTNEED);
}

void Checkpoint::FreeRange(const void* data, size_t num_bytes) const {
  const auto* p = static_cast<const std::byte*>(data);
  bool filled = false;
  for (const auto& f : files_) {
    if (f->filled() && p >= f->data() && p < f->data() + f->size()) {
      filled = true;
      break;
    }
  }
  AdviseInnerPages(data, num_bytes, filled ? MADV_REMOVE : MADV_DONTNEED);
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


std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// One tensor's header entry, checked on its own (overlaps are checked across entries).
Result<SafetensorsEntry> ParseEntry(const std::string& name, const json& entry, uint64_t data_size,
                                    const std::string& where) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
      !entry.contains("shape") || !entry["shape"].is_array() ||
      !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2) {
    return Status::Error(where + ": malformed header entry");
  }
  auto dtype = ParseDType(entry["dtype"].get<std::string>());
  if (!dtype.ok()) return Status::Error(where + ": " + dtype.error());
  SafetensorsEntry out{.name = name, .dtype = *dtype};
  // The product is checked at each step, so TensorView::numel() (signed) never overflows.
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : entry["shape"]) {
    if (d.is_number_integer() && !d.is_number_unsigned()) {
      return Status::Error(where + ": shape has a negative dimension " + QuoteJson(d));
    }
    if (!d.is_number_unsigned()) return Status::Error(where + ": malformed shape " + QuoteJson(entry["shape"]));
    const uint64_t dim = d.get<uint64_t>();
    overflow = overflow || dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel) ||
               numel > uint64_t(INT64_MAX);
    if (!overflow) out.shape.push_back(int64_t(dim));
  }
  uint64_t num_bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, uint64_t(DTypeBytes(out.dtype)), &num_bytes)) {
    return Status::Error(where + ": shape " + QuoteJson(entry["shape"]) + " of " + DTypeName(out.dtype) +
                         " overflows 64-bit sizes");
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return Status::Error(where + ": malformed data_offsets " + QuoteJson(offsets));
  }
  out.begin = offsets[0].get<uint64_t>();
  out.end = offsets[1].get<uint64_t>();
  if (out.begin > out.end) return Status::Error(where + ": data_offsets " + Range(out.begin, out.end) + " are reversed");
  if (out.end > data_size) {
    return Status::Error(where + ": data_offsets " + Range(out.begin, out.end) + " lie outside the file (its data "
                         "section has " + std::to_string(data_size) + " bytes)");
  }
  if (out.end - out.begin != num_bytes) {
    TensorView shape_only;
    shape_only.shape = out.shape;
    return Status::Error(where + ": " + std::to_string(out.end - out.begin) + " bytes do not match shape " +
                         shape_only.ShapeString() + " of " + DTypeName(out.dtype));
  }
  return out;
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view bytes, uint64_t file_size,
                                                 const std::string& source) {
  constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
  if (file_size < 8 || bytes.size() < 8) {
    return Status::Error(source + ": not a safetensors file (shorter than 8 bytes)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian, as this host
  if (header_len > file_size - 8) {
    return Status::Error(source + ": not a safetensors file (header length " + std::to_string(header_len) +
                         " exceeds the file)");
  }
  if (header_len > kMaxHeaderBytes) {
    return Status::Error(source + ": safetensors header length " + std::to_string(header_len) +
                         " exceeds the 100 MiB limit");
  }
  if (bytes.size() - 8 < header_len) {
    return Status::Error(source + ": the safetensors header's " + std::to_string(header_len) + " bytes are cut short");
  }
  const json header = json::parse(bytes.data() + 8, bytes.data() + 8 + header_len, nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::Error(source + ": safetensors header is not valid JSON");
  }
  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  const uint64_t data_size = file_size - out.data_offset;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return Status::Error(source + ": __metadata__ must be an object of strings, got " + QuoteJson(entry));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Status::Error(source + ": __metadata__ '" + PrintableName(key) + "' must be a string, got " + QuoteJson(value));
        }
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    auto parsed = ParseEntry(name, entry, data_size, source + ": tensor '" + PrintableName(name) + "'");
    if (!parsed.ok()) return parsed.status();
    out.tensors.push_back(std::move(parsed).value());
  }
  // Two tensors must not share bytes (one written through the other's name would change both):
  // in begin order, each non-empty range starts at or after the furthest end so far.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const SafetensorsEntry* furthest = nullptr;
  for (const SafetensorsEntry& t : out.tensors) {
    if (t.begin == t.end) continue;
    if (furthest != nullptr && t.begin < furthest->end) {
      return Status::Error(source + ": tensor '" + PrintableName(t.name) + "' bytes " + Range(t.begin, t.end) +
                           " overlap tensor '" + PrintableName(furthest->name) + "' bytes " + Range(furthest->begin, furthest->end));
    }
    if (furthest == nullptr || t.end > furthest->end) furthest = &t;
  }
  return out;
}

Status Checkpoint::AddFile(const std::string& path,
                           const std::vector<std::string>* expected_names) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  const MappedFile& file = **mapped;
  auto header = ParseSafetensorsHeader(
      std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), file.size(), path);
  if (!header.ok()) return header.status();
  if (metadata_.empty()) metadata_ = header->metadata;
  const std::byte* data_begin = file.data() + header->data_offset;
  for (SafetensorsEntry& entry : header->tensors) {
    const std::string where = path + ": tensor '" + PrintableName(entry.name) + "'";
    if (expected_names != nullptr &&
        std::find(expected_names->begin(), expected_names->end(), entry.name) == expected_names->end()) {
      return Status::Error(where + " is not listed for this file in model.safetensors.index.json");
    }
    if (tensors_.count(entry.name)) return Status::Error(where + " appears in more than one file");
    TensorView view{.name = entry.name,
                    .dtype = entry.dtype,
                    .shape = std::move(entry.shape),
                    .data = data_begin + entry.begin,
                    .num_bytes = size_t(entry.end - entry.begin),
                    .file = path};
    total_tensor_bytes_ += view.num_bytes;
    tensors_.emplace(entry.name, std::move(view));
  }
  files_.push_back(std::move(mapped).value());
  return Status::Ok();
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path, int load_threads) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return Status::Error(path + ": no such file or directory");
    MLA_RETURN_IF_ERROR(IsGgufFile(path) ? ckpt->AddGgufFile(path, load_threads) : ckpt->AddFile(path, nullptr));
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
