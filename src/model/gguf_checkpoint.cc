// Checkpoint::AddGgufFile: a deepseek2 GGUF file's tensors as the Hugging Face checkpoint's
// (model/gguf_model.h has the names). Tensors are views into the mapped file, in their stored
// bytes: a GGUF shape is the reverse of the torch shape, with the same row-major bytes. A stacked
// expert tensor [experts][rows][cols] becomes one view per expert. Only the split kv_b layout
// (attn_k_b, attn_v_b) is rearranged at load, into kv_b_proj's rows, in shared anonymous memory
// the checkpoint owns (a few MB per layer). A tensor type mlaserve does not compute is refused,
// naming the type and the tensors that use it.
#include <cstring>
#include <map>

#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/safetensors.h"

namespace mlaserve {
namespace {

std::optional<DType> DTypeOfGgml(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    default: return std::nullopt;
  }
}

std::vector<int64_t> TorchShape(const std::vector<int64_t>& ne) { return {ne.rbegin(), ne.rend()}; }

}  // namespace

Status Checkpoint::AddGgufFile(const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  const MappedFile& file = **mapped;
  auto parsed = ParseGguf(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), path);
  if (!parsed.ok()) return parsed.status();
  const std::byte* data = file.data() + parsed->data_offset;
  std::map<std::string, std::vector<std::string>> unsupported;  // type name -> tensors
  struct SplitKv {
    const GgufTensorInfo* k_b = nullptr;
    const GgufTensorInfo* v_b = nullptr;
  };
  std::map<int, SplitKv> split_kv;
  auto add = [&](TensorView view) -> Status {
    if (tensors_.count(view.name)) return Status::Error(path + ": tensor '" + view.name + "' appears twice");
    total_tensor_bytes_ += view.num_bytes;
    tensors_.emplace(view.name, std::move(view));
    return Status::Ok();
  };
  for (const GgufTensorInfo& t : parsed->tensors) {
    const std::optional<DType> dtype = DTypeOfGgml(t.type);
    if (!dtype) {
      unsupported[GgmlTraits(t.type).name].push_back(t.name);
      continue;
    }
    const std::optional<HfTensorName> hf = HfNameOfGgufTensor(t.name);
    TensorView view{.name = t.name, .dtype = *dtype, .shape = TorchShape(t.ne), .data = data + t.offset,
                    .num_bytes = size_t(t.num_bytes), .file = path};
    if (!hf) {
      MLA_RETURN_IF_ERROR(add(std::move(view)));  // kept under its own name (e.g. an MTP layer's)
    } else if (!hf->name.empty()) {
      view.name = hf->name;
      MLA_RETURN_IF_ERROR(add(std::move(view)));
    } else if (!hf->kv_part.empty()) {
      (hf->kv_part == "k_b" ? split_kv[hf->layer].k_b : split_kv[hf->layer].v_b) = &t;
    } else {
      // [experts][rows][cols]: one view per expert.
      if (t.ne.size() != 3) return Status::Error(path + ": tensor " + t.name + " is not 3-D [experts, rows, cols]");
      const size_t expert_bytes = size_t(t.num_bytes / uint64_t(t.ne[2]));
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        MLA_RETURN_IF_ERROR(add(TensorView{
            .name = "model.layers." + std::to_string(hf->layer) + ".mlp.experts." + std::to_string(e) + "." +
                    hf->expert_projection + ".weight",
            .dtype = *dtype, .shape = {t.ne[1], t.ne[0]}, .data = data + t.offset + size_t(e) * expert_bytes,
            .num_bytes = expert_bytes, .file = path}));
      }
    }
  }
  if (!unsupported.empty()) {
    std::string message = path + ": tensor types mlaserve does not compute yet (supported: F32, F16, BF16):";
    for (const auto& [type, names] : unsupported) {
      message += " " + type + " (" + std::to_string(names.size()) + " tensors: " + names[0] +
                 (names.size() > 1 ? ", " + names[1] : "") + (names.size() > 2 ? ", ..." : "") + ")";
    }
    return Status::Error(message);
  }
  // The split layout: kv_b_proj[h * (nope + v) + j][c] = j < nope ? k_b[h][c][j] : v_b[h][j - nope][c].
  for (const auto& [layer, kv] : split_kv) {
    const std::string name = "model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight";
    if (tensors_.count(name)) continue;  // the file has the combined tensor too
    if (kv.k_b == nullptr || kv.v_b == nullptr) {
      return Status::Error(path + ": layer " + std::to_string(layer) + " has only one of attn_k_b and attn_v_b");
    }
    const GgufTensorInfo &k = *kv.k_b, &v = *kv.v_b;  // ne: k [nope, kv_lora, heads], v [kv_lora, v, heads]
    if (k.ne.size() != 3 || v.ne.size() != 3 || k.ne[2] != v.ne[2] || k.ne[1] != v.ne[0] || k.type != v.type) {
      return Status::Error(path + ": layer " + std::to_string(layer) +
                           ": attn_k_b and attn_v_b do not fit together as [heads, kv_lora, nope] and [heads, v, kv_lora]");
    }
    const int64_t nope = k.ne[0], lora = k.ne[1], heads = k.ne[2], vdim = v.ne[1];
    const size_t elem = size_t(DTypeBytes(*DTypeOfGgml(k.type)));
    const size_t bytes = size_t(heads * (nope + vdim) * lora) * elem;
    auto owned = MappedFile::SharedAnonymous(bytes);
    if (!owned.ok()) return owned.status();
    std::byte* out = (*owned)->mutable_data();
    const std::byte* kb = data + k.offset;
    const std::byte* vb = data + v.offset;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < nope; ++j) {
        std::byte* row = out + size_t((h * (nope + vdim) + j) * lora) * elem;
        for (int64_t c = 0; c < lora; ++c) {
          std::memcpy(row + size_t(c) * elem, kb + size_t((h * lora + c) * nope + j) * elem, elem);
        }
      }
      std::memcpy(out + size_t((h * (nope + vdim) + nope) * lora) * elem, vb + size_t(h * vdim * lora) * elem,
                  size_t(vdim * lora) * elem);
    }
    MLA_RETURN_IF_ERROR(add(TensorView{.name = name, .dtype = *DTypeOfGgml(k.type), .shape = {heads * (nope + vdim), lora},
                                       .data = out, .num_bytes = bytes, .file = path + " (attn_k_b + attn_v_b)"}));
    files_.push_back(std::move(owned).value());
  }
  files_.push_back(std::move(mapped).value());
  return Status::Ok();
}

}  // namespace mlaserve
