// Read-only, memory-mapped access to safetensors checkpoints: one file, a sharded set listed by
// model.safetensors.index.json, or every *.safetensors in a directory.
// Ownership: a Checkpoint owns its mappings; every TensorView it hands out points into them and
// stays valid for the Checkpoint's lifetime. Nothing is copied at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mlaserve {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // little-endian elements, row-major, possibly unaligned
  size_t num_bytes = 0;
  std::string file;                 // the file it lives in, for error messages

  // (A loaded tensor's product fits: ParseSafetensorsHeader refuses shapes that overflow.)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string ShapeString() const;
};

// A safetensors file's header, checked: each tensor's dtype, shape and byte range in the data
// section, and the `__metadata__` strings.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // each dimension >= 0, their product times the dtype's size fits
  uint64_t begin = 0;          // data_offsets, relative to the data section: [begin, end)
  uint64_t end = 0;
};
struct SafetensorsHeader {
  uint64_t data_offset = 0;                      // where the data section starts: 8 + header length
  std::vector<SafetensorsEntry> tensors;         // ordered by begin; byte ranges do not overlap
  std::map<std::string, std::string> metadata;   // __metadata__
};

// Parses a safetensors file from its first bytes, touching no file: `bytes` holds at least the
// 8-byte length and the JSON header, `file_size` is the whole file's size (the data section is
// what follows the header). Refuses, with one line naming `source` and the tensor: a header
// length past the file, JSON that is not an object, `__metadata__` that is not an object of
// strings, an unknown dtype, a negative or overflowing shape, data_offsets outside the data
// section, reversed, not matching the shape's bytes, or overlapping another tensor's.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view bytes, uint64_t file_size,
                                                 const std::string& source = "safetensors");

// One mmapped file, or shared anonymous memory that a checkpoint fills at load (a GGUF file's
// tensors rearranged). Dropping pages of either (Checkpoint::ReleaseMappedPages) keeps their
// contents: file pages are read again, shared anonymous pages stay in their shmem object, which
// only Checkpoint::FreePages gives back.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Writable through `mutable_data` until handed to a Checkpoint; zero-filled.
  static Result<std::unique_ptr<MappedFile>> SharedAnonymous(size_t size);
  std::byte* mutable_data() const { return const_cast<std::byte*>(data_); }
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool filled() const { return filled_; }  // SharedAnonymous: memory a checkpoint filled, not a file

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool filled_ = false;
};

class Checkpoint {
 public:
  // `path` is a model directory, a single .safetensors file, or a GGUF file (llama.cpp's
  // deepseek2; its tensors under their Hugging Face names, model/gguf_model.h). load_threads:
  // the threads a GGUF's block tensors are split on (0: ThreadPool::DefaultThreadCount(); a
  // tensor-parallel rank passes its share of the machine's cores).
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& path, int load_threads = 0);

  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // Metadata of the first file ("__metadata__"), string values only.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t total_tensor_bytes() const { return total_tensor_bytes_; }
  // Gives back the pages of `t` (those wholly inside it) once nothing reads it again (its
  // contents copied elsewhere, or not needed: packed matrices, MTP layers), so that resident
  // memory stays near what the model holds: file pages are dropped (touching them would read the
  // file again); memory the checkpoint filled at load (MappedFile::filled: a GGUF's split blocks)
  // is freed for good (MADV_REMOVE: it would read as zeros).
  void FreePages(const TensorView& t) const { FreeRange(t.data, t.num_bytes); }
  // The same for a range inside one of this checkpoint's mappings (a packed matrix's source, which
  // may be a slice of a tensor).
  void FreeRange(const void* data, size_t num_bytes) const;
  // Drops the process's pages of a range inside this checkpoint's mappings, keeping their contents:
  // file pages are read again, filled memory stays in its shared object (never for other memory:
  // dropping private anonymous pages would zero them). For a range that may still be read.
  static void ReleaseMappedPages(const void* data, size_t num_bytes);

 private:
  Status AddFile(const std::string& path, const std::vector<std::string>* expected_names);
  Status AddGgufFile(const std::string& path, int load_threads);  // model/gguf_checkpoint.cc

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  size_t total_tensor_bytes_ = 0;
};

}  // namespace mlaserve
