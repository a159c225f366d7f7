#include "model/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace mlaserve {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 2;        // arrays of arrays are skipped, deeper ones refused
// Array elements kept in memory, per array and for the whole file (a tokenizer's arrays are
// ~100-200K each): a value in memory takes up to 8x its bytes in the file (int64 per uint8), so
// what is kept is capped by count; past a cap an array keeps only its length.
constexpr uint64_t kMaxKeptArray = uint64_t(1) << 24;
constexpr uint64_t kMaxKeptElements = uint64_t(1) << 26;

// A cursor over the file's bytes; every read checks what is left first.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  uint64_t position() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <typename T>
  Status Read(T& out, const char* what) {
    if (left() < sizeof(T)) return Truncated(what);
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string& out, const char* what) {
    uint64_t length = 0;
    MLA_RETURN_IF_ERROR(Read(length, what));
    if (length > left()) {
      return Status::Error(source_ + ": " + what + " of " + std::to_string(length) + " bytes runs past the end of the file");
    }
    out.assign(bytes_.data() + pos_, size_t(length));
    pos_ += length;
    return Status::Ok();
  }

  Status Skip(uint64_t n, const char* what) {
    if (n > left()) return Truncated(what);
    pos_ += n;
    return Status::Ok();
  }

  Status Truncated(const char* what) const {
    return Status::Error(source_ + ": the file ends inside " + std::string(what) + " (at byte " + std::to_string(pos_) + ")");
  }

 private:
  std::string_view bytes_;
  const std::string& source_;
  uint64_t pos_ = 0;
};

int ScalarBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    case GgufValueType::kString: return 8;  // at least its length
    case GgufValueType::kArray: return 12;  // at least its element type and count
  }
  return 0;
}

bool KnownValueType(uint32_t t) { return t <= uint32_t(GgufValueType::kF64); }

// Reads one scalar of type t into v's integer / real / text.
Status ReadScalar(Reader& r, GgufValueType t, GgufValue& v, const std::string& key) {
  auto as_int = [&](auto x) -> Status {
    MLA_RETURN_IF_ERROR(r.Read(x, key.c_str()));
    v.integer = int64_t(x);
    return Status::Ok();
  };
  switch (t) {
    case GgufValueType::kU8: return as_int(uint8_t{});
    case GgufValueType::kI8: return as_int(int8_t{});
    case GgufValueType::kU16: return as_int(uint16_t{});
    case GgufValueType::kI16: return as_int(int16_t{});
    case GgufValueType::kU32: return as_int(uint32_t{});
    case GgufValueType::kI32: return as_int(int32_t{});
    case GgufValueType::kI64: return as_int(int64_t{});
    case GgufValueType::kU64: {
      uint64_t x = 0;
      MLA_RETURN_IF_ERROR(r.Read(x, key.c_str()));
      // Above INT64_MAX: kept as a real only (a key nothing reads must not refuse the file).
      v.out_of_range = x > uint64_t(std::numeric_limits<int64_t>::max());
      v.integer = v.out_of_range ? 0 : int64_t(x);
      v.real = double(x);
      return Status::Ok();
    }
    case GgufValueType::kBool: {
      uint8_t x = 0;
      MLA_RETURN_IF_ERROR(r.Read(x, key.c_str()));
      v.integer = x != 0;
      return Status::Ok();
    }
    case GgufValueType::kF32: {
      float x = 0;
      MLA_RETURN_IF_ERROR(r.Read(x, key.c_str()));
      v.real = x;
      return Status::Ok();
    }
    case GgufValueType::kF64: return r.Read(v.real, key.c_str());
    case GgufValueType::kString: return r.ReadString(v.text, key.c_str());
    case GgufValueType::kArray: break;
  }
  return Status::Error("metadata " + key + ": not a scalar type");
}

// `kept`: array elements kept so far in the file (kMaxKeptElements).
Status ReadValue(Reader& r, GgufValueType t, GgufValue& v, const std::string& key, const std::string& source, int depth,
                 uint64_t& kept) {
  v.type = t;
  if (t != GgufValueType::kArray) return ReadScalar(r, t, v, key);
  if (depth >= kMaxArrayDepth) return Status::Error(source + ": metadata " + key + ": arrays nested too deep");
  uint32_t element = 0;
  MLA_RETURN_IF_ERROR(r.Read(element, key.c_str()));
  if (!KnownValueType(element)) {
    return Status::Error(source + ": metadata " + key + ": unknown array element type " + std::to_string(element));
  }
  v.element_type = GgufValueType(element);
  MLA_RETURN_IF_ERROR(r.Read(v.length, key.c_str()));
  // Every element takes at least ScalarBytes: a count the file cannot hold is refused before
  // anything is reserved for it.
  if (v.length > r.left() / uint64_t(ScalarBytes(v.element_type))) {
    return Status::Error(source + ": metadata " + key + ": an array of " + std::to_string(v.length) +
                         " elements runs past the end of the file");
  }
  const bool keep = v.length <= kMaxKeptArray && v.length <= kMaxKeptElements - kept &&
                    v.element_type != GgufValueType::kArray && depth == 0;
  if (keep) kept += v.length;
  if (!keep && v.element_type != GgufValueType::kString && v.element_type != GgufValueType::kArray) {
    return r.Skip(v.length * uint64_t(ScalarBytes(v.element_type)), key.c_str());
  }
  for (uint64_t i = 0; i < v.length; ++i) {
    GgufValue element_value;  // (an inner array, depth 1, keeps nothing)
    MLA_RETURN_IF_ERROR(ReadValue(r, v.element_type, element_value, key, source, depth + 1, kept));
    if (!keep) continue;
    switch (v.element_type) {
      case GgufValueType::kString: v.strings.push_back(std::move(element_value.text)); break;
      case GgufValueType::kF32: case GgufValueType::kF64: v.reals.push_back(element_value.real); break;
      case GgufValueType::kArray: break;  // kept as a length only
      default: v.integers.push_back(element_value.integer); break;
    }
  }
  return Status::Ok();
}

const char* TypeDescription(const GgufValue& v) { return GgufValueTypeName(v.type); }

}  // namespace

GgmlTypeTraits GgmlTraits(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::kF32: return {"F32", 1, 4};
    case GgmlType::kF16: return {"F16", 1, 2};
    case GgmlType::kQ4_0: return {"Q4_0", 32, 18};
    case GgmlType::kQ4_1: return {"Q4_1", 32, 20};
    case GgmlType::kQ5_0: return {"Q5_0", 32, 22};
    case GgmlType::kQ5_1: return {"Q5_1", 32, 24};
    case GgmlType::kQ8_0: return {"Q8_0", kQ8_0Values, kQ8_0Bytes};
    case GgmlType::kQ8_1: return {"Q8_1", 32, 36};
    case GgmlType::kQ2_K: return {"Q2_K", 256, 84};
    case GgmlType::kQ3_K: return {"Q3_K", 256, 110};
    case GgmlType::kQ4_K: return {"Q4_K", 256, 144};
    case GgmlType::kQ5_K: return {"Q5_K", 256, 176};
    case GgmlType::kQ6_K: return {"Q6_K", 256, 210};
    case GgmlType::kQ8_K: return {"Q8_K", 256, 292};
    case GgmlType::kIQ2_XXS: return {"IQ2_XXS", 256, 66};
    case GgmlType::kIQ2_XS: return {"IQ2_XS", 256, 74};
    case GgmlType::kIQ3_XXS: return {"IQ3_XXS", 256, 98};
    case GgmlType::kIQ1_S: return {"IQ1_S", 256, 50};
    case GgmlType::kIQ4_NL: return {"IQ4_NL", 32, 18};
    case GgmlType::kIQ3_S: return {"IQ3_S", 256, 110};
    case GgmlType::kIQ2_S: return {"IQ2_S", 256, 82};
    case GgmlType::kIQ4_XS: return {"IQ4_XS", 256, 136};
    case GgmlType::kI8: return {"I8", 1, 1};
    case GgmlType::kI16: return {"I16", 1, 2};
    case GgmlType::kI32: return {"I32", 1, 4};
    case GgmlType::kI64: return {"I64", 1, 8};
    case GgmlType::kF64: return {"F64", 1, 8};
    case GgmlType::kIQ1_M: return {"IQ1_M", 256, 56};
    case GgmlType::kBF16: return {"BF16", 1, 2};
    case GgmlType::kTQ1_0: return {"TQ1_0", 256, 54};
    case GgmlType::kTQ2_0: return {"TQ2_0", 256, 66};
    case GgmlType::kMXFP4: return {"MXFP4", 32, 17};
  }
  return {};
}

const char* GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: return "uint8";
    case GgufValueType::kI8: return "int8";
    case GgufValueType::kU16: return "uint16";
    case GgufValueType::kI16: return "int16";
    case GgufValueType::kU32: return "uint32";
    case GgufValueType::kI32: return "int32";
    case GgufValueType::kF32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "uint64";
    case GgufValueType::kI64: return "int64";
    case GgufValueType::kF64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  if (out_of_range) return false;
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kU16: case GgufValueType::kI16:
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kU64: case GgufValueType::kI64:
    case GgufValueType::kBool:
      return true;
    default:
      return false;
  }
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

Result<int64_t> GgufFile::Integer(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata " + key + " is missing");
  if (!v->is_integer()) return Status::Error("metadata " + key + " is a " + TypeDescription(*v) + ", not an integer");
  return v->integer;
}

Result<double> GgufFile::Real(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata " + key + " is missing");
  if (v->is_real()) return v->real;
  if (v->is_integer()) return double(v->integer);
  return Status::Error("metadata " + key + " is a " + TypeDescription(*v) + ", not a number");
}

Result<std::string> GgufFile::Text(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::Error("metadata " + key + " is missing");
  if (v->type != GgufValueType::kString) return Status::Error("metadata " + key + " is a " + TypeDescription(*v) + ", not a string");
  return v->text;
}

std::optional<int64_t> GgufFile::OptionalInteger(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr || !v->is_integer()) return std::nullopt;
  return v->integer;
}

std::optional<double> GgufFile::OptionalReal(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_real()) return v->real;
  if (v->is_integer()) return double(v->integer);
  return std::nullopt;
}

Result<GgufFile> ParseGguf(std::string_view bytes, const std::string& source) {
  Reader r(bytes, source);
  GgufFile f;
  uint32_t magic = 0;
  MLA_RETURN_IF_ERROR(r.Read(magic, "the magic"));
  if (magic != kMagic) return Status::Error(source + ": not a GGUF file (it does not start with \"GGUF\")");
  MLA_RETURN_IF_ERROR(r.Read(f.version, "the version"));
  if (f.version == 1) return Status::Error(source + ": GGUF version 1 (32-bit counts) is not supported; convert it again");
  if (f.version != 2 && f.version != 3) {
    return Status::Error(source + ": GGUF version " + std::to_string(f.version) +
                         " (this reader knows 2 and 3; a big-endian file reads as a huge version)");
  }
  uint64_t num_tensors = 0, num_metadata = 0;
  MLA_RETURN_IF_ERROR(r.Read(num_tensors, "the tensor count"));
  MLA_RETURN_IF_ERROR(r.Read(num_metadata, "the metadata count"));
  // A key/value takes at least 8 + 1 + 4 + 1 bytes, a tensor info 8 + 1 + 4 + 8 + 4 + 8.
  if (num_metadata > r.left() / 14) {
    return Status::Error(source + ": " + std::to_string(num_metadata) + " metadata entries cannot fit in the file");
  }
  if (num_tensors > r.left() / 33) {
    return Status::Error(source + ": " + std::to_string(num_tensors) + " tensors cannot fit in the file");
  }
  uint64_t kept_elements = 0;
  for (uint64_t i = 0; i < num_metadata; ++i) {
    std::string key;
    MLA_RETURN_IF_ERROR(r.ReadString(key, "a metadata key"));
    uint32_t type = 0;
    MLA_RETURN_IF_ERROR(r.Read(type, "a metadata type"));
    if (!KnownValueType(type)) return Status::Error(source + ": metadata " + key + ": unknown value type " + std::to_string(type));
    GgufValue v;
    MLA_RETURN_IF_ERROR(ReadValue(r, GgufValueType(type), v, key, source, 0, kept_elements));
    if (!f.metadata.emplace(key, std::move(v)).second) return Status::Error(source + ": metadata " + key + " appears twice");
  }
  if (const GgufValue* a = f.Find("general.alignment")) {
    if (a->type != GgufValueType::kU32 || a->integer == 0 || (a->integer & (a->integer - 1)) != 0) {
      return Status::Error(source + ": general.alignment must be a uint32 power of two");
    }
    f.alignment = uint64_t(a->integer);
  }
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo t;
    MLA_RETURN_IF_ERROR(r.ReadString(t.name, "a tensor name"));
    uint32_t n_dims = 0;
    MLA_RETURN_IF_ERROR(r.Read(n_dims, "a tensor's dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Status::Error(source + ": tensor " + t.name + " has " + std::to_string(n_dims) + " dimensions (1 to 4)");
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      MLA_RETURN_IF_ERROR(r.Read(ne, "a tensor's shape"));
      if (ne == 0 || ne > (uint64_t(1) << 48) || elements > std::numeric_limits<uint64_t>::max() / ne) {
        return Status::Error(source + ": tensor " + t.name + ": dimension " + std::to_string(d) + " of " +
                             std::to_string(ne) + " elements is empty or too large");
      }
      elements *= ne;
      t.ne.push_back(int64_t(ne));
    }
    MLA_RETURN_IF_ERROR(r.Read(t.type, "a tensor's type"));
    MLA_RETURN_IF_ERROR(r.Read(t.offset, "a tensor's offset"));
    const GgmlTypeTraits traits = GgmlTraits(t.type);
    if (traits.name == nullptr) {
      return Status::Error(source + ": tensor " + t.name + ": unknown ggml type " + std::to_string(t.type));
    }
    if (t.ne[0] % traits.block_elements != 0) {
      return Status::Error(source + ": tensor " + t.name + ": its rows of " + std::to_string(t.ne[0]) +
                           " elements are not whole " + traits.name + " blocks of " +
                           std::to_string(traits.block_elements));
    }
    const uint64_t blocks = elements / uint64_t(traits.block_elements);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(traits.block_bytes)) {
      return Status::Error(source + ": tensor " + t.name + " is too large");
    }
    t.num_bytes = blocks * uint64_t(traits.block_bytes);
    if (t.offset % f.alignment != 0) {
      return Status::Error(source + ": tensor " + t.name + ": offset " + std::to_string(t.offset) +
                           " is not a multiple of the alignment " + std::to_string(f.alignment));
    }
    f.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  f.data_offset = (r.position() + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > bytes.size()) {
    if (!f.tensors.empty()) return Status::Error(source + ": the file ends before its data section");
    f.data_offset = bytes.size();
  }
  const uint64_t data_bytes = bytes.size() - f.data_offset;
  std::vector<const GgufTensorInfo*> by_offset;
  std::map<std::string_view, int> names;
  for (const GgufTensorInfo& t : f.tensors) {
    if (!names.emplace(t.name, 0).second) return Status::Error(source + ": tensor " + t.name + " appears twice");
    if (t.offset > data_bytes || t.num_bytes > data_bytes - t.offset) {
      return Status::Error(source + ": tensor " + t.name + " (" + std::to_string(t.num_bytes) + " bytes at " +
                           std::to_string(t.offset) + ") runs past the end of the file (truncated?)");
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->num_bytes > by_offset[i]->offset) {
      return Status::Error(source + ": tensors " + by_offset[i - 1]->name + " and " + by_offset[i]->name + " overlap");
    }
  }
  return f;
}

}  // namespace mlaserve
