#include "model/gguf_writer.h"

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

Status GgufWriter::Write(const std::string& path) const {
  std::string head;
  Put<uint32_t>(head, 0x46554747);  // "GGUF"
  Put<uint32_t>(head, 3);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, num_metadata_);
  head += metadata_;
  uint64_t offset = 0;
  auto aligned = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  for (const Tensor& t : tensors_) {
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
  for (const Tensor& t : tensors_) {
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
