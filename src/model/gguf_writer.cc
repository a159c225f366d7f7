#include "model/gguf_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace mlaserve {
namespace {

template <typename T>
void Put(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

}  // namespace

void GgufWriter::Key(const std::string& key, GgufValueType type) {
  PutString(metadata_, key);
  Put<uint32_t>(metadata_, uint32_t(type));
  ++num_metadata_;
}

void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  Key(key, GgufValueType::kU32);
  Put(metadata_, v);
  if (key == "general.alignment" && v > 0 && (v & (v - 1)) == 0) alignment_ = v;
}
void GgufWriter::SetI32(const std::string& key, int32_t v) {
  Key(key, GgufValueType::kI32);
  Put(metadata_, v);
}
void GgufWriter::SetU64(const std::string& key, uint64_t v) {
  Key(key, GgufValueType::kU64);
  Put(metadata_, v);
}
void GgufWriter::SetF32(const std::string& key, float v) {
  Key(key, GgufValueType::kF32);
  Put(metadata_, v);
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  Key(key, GgufValueType::kBool);
  Put<uint8_t>(metadata_, v);
}
void GgufWriter::SetString(const std::string& key, const std::string& v) {
  Key(key, GgufValueType::kString);
  PutString(metadata_, v);
}

void GgufWriter::SetStrings(const std::string& key, const std::vector<std::string>& v) {
  Key(key, GgufValueType::kArray);
  Put<uint32_t>(metadata_, uint32_t(GgufValueType::kString));
  Put<uint64_t>(metadata_, v.size());
  for (const std::string& s : v) PutString(metadata_, s);
}

void GgufWriter::SetI32s(const std::string& key, const std::vector<int32_t>& v) {
  Key(key, GgufValueType::kArray);
  Put<uint32_t>(metadata_, uint32_t(GgufValueType::kI32));
  Put<uint64_t>(metadata_, v.size());
  for (int32_t x : v) Put(metadata_, x);
}

void GgufWriter::SetF32s(const std::string& key, const std::vector<float>& v) {
  Key(key, GgufValueType::kArray);
  Put<uint32_t>(metadata_, uint32_t(GgufValueType::kF32));
  Put<uint64_t>(metadata_, v.size());
  for (float x : v) Put(metadata_, x);
}

Status GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                             std::span<const std::byte> data) {
  const GgmlTypeTraits traits = GgmlTraits(uint32_t(type));
  if (traits.name == nullptr || ne.empty() || ne.size() > 4) return Status::Error(name + ": bad GGUF tensor");
  uint64_t elements = 1;
  for (int64_t d : ne) {
    if (d <= 0) return Status::Error(name + ": an empty dimension");
    elements *= uint64_t(d);
  }
  if (ne[0] % traits.block_elements != 0) {
    return Status::Error(name + ": rows of " + std::to_string(ne[0]) + " are not whole " + traits.name + " blocks");
  }
  const uint64_t bytes = elements / uint64_t(traits.block_elements) * uint64_t(traits.block_bytes);
  if (bytes != data.size()) {
    return Status::Error(name + ": " + std::to_string(data.size()) + " bytes given, " + std::to_string(bytes) + " expected");
  }
  tensors_.push_back({name, std::move(ne), type, data});
  return Status::Ok();
}

Status GgufWriter::Write(const std::string& path) const { return WriteFile(path, metadata_, num_metadata_, tensors_); }

Result<std::vector<std::string>> GgufWriter::WriteSplit(const std::string& prefix, size_t max_tensors) const {
  const size_t count = std::max<size_t>(1, (tensors_.size() + max_tensors - 1) / max_tensors);
  if (count > 99999) return Status::Error(prefix + ": more than 99999 shards");
  std::vector<std::string> paths;
  for (size_t i = 0; i < count; ++i) {
    // gguf-split's keys: every shard says its number and the count; the first also the total.
    GgufWriter keys;
    keys.Key("split.no", GgufValueType::kU16);
    Put<uint16_t>(keys.metadata_, uint16_t(i));
    keys.Key("split.count", GgufValueType::kU16);
    Put<uint16_t>(keys.metadata_, uint16_t(count));
    keys.Key("split.tensors.count", GgufValueType::kI32);
    Put<int32_t>(keys.metadata_, int32_t(tensors_.size()));
    const std::string metadata = i == 0 ? metadata_ + keys.metadata_ : keys.metadata_;
    const uint64_t num_metadata = (i == 0 ? num_metadata_ : 0) + keys.num_metadata_;
    const size_t begin = i * max_tensors, end = std::min(tensors_.size(), begin + max_tensors);
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.gguf", i + 1, count);
    paths.push_back(prefix + suffix);
    MLA_RETURN_IF_ERROR(WriteFile(paths.back(), metadata, num_metadata,
                                  std::vector<Tensor>(tensors_.begin() + ptrdiff_t(begin), tensors_.begin() + ptrdiff_t(end))));
  }
  return paths;
}

Status GgufWriter::WriteFile(const std::string& path, const std::string& metadata, uint64_t num_metadata,
                             const std::vector<Tensor>& tensors) const {
  std::string head;
  Put<uint32_t>(head, 0x46554747);  // "GGUF"
  Put<uint32_t>(head, 3);
  Put<uint64_t>(head, tensors.size());
  Put<uint64_t>(head, num_metadata);
  head += metadata;
  uint64_t offset = 0;
  auto aligned = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  for (const Tensor& t : tensors) {
    PutString(head, t.name);
    Put<uint32_t>(head, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(head, uint64_t(d));
    Put<uint32_t>(head, uint32_t(t.type));
    offset = aligned(offset);
    Put<uint64_t>(head, offset);
    offset += t.data.size();
  }
  head.resize(aligned(head.size()), '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error(path + ": cannot create");
  out.write(head.data(), std::streamsize(head.size()));
  uint64_t written = 0;
  const std::string padding(alignment_, '\0');
  for (const Tensor& t : tensors) {
    const uint64_t pad = aligned(written) - written;
    out.write(padding.data(), std::streamsize(pad));
    out.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size()));
    written += pad + t.data.size();
  }
  out.close();
  if (!out) return Status::Error(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace mlaserve
