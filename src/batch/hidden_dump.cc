#include "batch/hidden_dump.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "batch/input_file.h"
#include "batch/records.h"
#include "core/float16.h"
#include "core/function_ref.h"
#include "model/eagle3_draft.h"
#include "model/safetensors_writer.h"

namespace mlaserve::batch {
namespace {

using nlohmann::json;

constexpr std::string_view kFilePrefix = "record-";
constexpr std::string_view kFileSuffix = ".safetensors";
constexpr std::string_view kTempSuffix = ".tmp";

std::string FileName(int64_t seq) {
  char name[64];
  std::snprintf(name, sizeof name, "record-%09lld.safetensors", (long long)seq);
  return name;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// fsync of a file or directory by path.
Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return Status::Error(Errno("cannot open " + path));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::Error(Errno("fsync " + path));
  return Status::Ok();
}

// Writes `text` to path atomically (temp file, fsync, rename, fsync of its directory).
Status WriteFileAtomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string temp = dir + "/." + name + std::string(kTempSuffix), path = dir + "/" + name;
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return Status::Error("cannot write " + temp);
  }
  MLA_RETURN_IF_ERROR(SyncPath(temp, false));
  if (std::rename(temp.c_str(), path.c_str()) != 0) return Status::Error(Errno("rename " + temp));
  return SyncPath(dir, true);
}

}  // namespace

Result<std::vector<int>> ResolveHiddenLayers(std::string_view flag, int num_hidden_layers) {
  const int L = num_hidden_layers;
  std::vector<int> layers;
  if (flag == "auto") {
    // SGLang's set_eagle3_layers_to_capture with no layer ids: [2, L // 2, L - 3], indices of
    // the layer whose input is captured (the residual stream entering it), as here.
    layers = Eagle3DefaultCaptureLayers(L);
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i] < 0 || layers[i] > L || (i > 0 && layers[i] <= layers[i - 1])) {
        return Status::Error("--hidden-layers auto is SGLang's EAGLE-3 default [2, L/2, L-3] = [" + JoinLayers(layers) +
                             "] for this model's " + std::to_string(L) +
                             " layers, which repeats, misorders or leaves [0, " + std::to_string(L) +
                             "]: give the indices (--hidden-layers i,j,k, strictly increasing)");
      }
    }
    return layers;
  }
  size_t pos = 0;
  while (pos <= flag.size()) {
    const size_t comma = std::min(flag.find(',', pos), flag.size());
    const std::string piece(flag.substr(pos, comma - pos));
    char* end = nullptr;
    const long value = std::strtol(piece.c_str(), &end, 10);
    if (piece.empty() || end == nullptr || *end != '\0') {
      return Status::Error("--hidden-layers: '" + piece + "' is not a layer index (give auto or i,j,k)");
    }
    if (value < 0 || value > L) {
      return Status::Error("--hidden-layers: layer " + piece + " is outside [0, " + std::to_string(L) +
                           "] (index i is the input of decoder layer i; " + std::to_string(L) +
                           ": the last layer's output)");
    }
    if (!layers.empty() && int(value) <= layers.back()) {
      return Status::Error("--hidden-layers: layer " + piece + " after " + std::to_string(layers.back()) +
                           ": the indices must be strictly increasing");
    }
    layers.push_back(int(value));
    pos = comma + 1;
  }
  return layers;
}

std::string JoinLayers(std::span<const int> layers) {
  std::string out;
  for (int l : layers) out += (out.empty() ? "" : ",") + std::to_string(l);
  return out;
}

void CapturedRows::Reset(int width, int max_positions) {
  width_ = width;
  bf16_.clear();
  have_.clear();
  bf16_.reserve(size_t(std::max(0, max_positions)) * size_t(width));
  have_.reserve(size_t(std::max(0, max_positions)));
}

void CapturedRows::Add(int first_position, std::span<const float> rows) {
  if (width_ <= 0 || rows.empty()) return;
  const size_t count = rows.size() / size_t(width_);
  const size_t end = size_t(first_position) + count;
  if (have_.size() < end) {
    have_.resize(end, 0);
    bf16_.resize(end * size_t(width_));
  }
  uint16_t* out = bf16_.data() + size_t(first_position) * size_t(width_);
  for (size_t i = 0; i < rows.size(); ++i) out[i] = F32ToBf16(rows[i]);
  std::fill(have_.begin() + std::ptrdiff_t(first_position), have_.begin() + std::ptrdiff_t(end), uint8_t(1));
}

bool CapturedRows::Covers(int num_positions) const {
  if (num_positions < 0 || size_t(num_positions) > have_.size()) return false;
  return std::all_of(have_.begin(), have_.begin() + num_positions, [](uint8_t h) { return h != 0; });
}

Result<std::unique_ptr<HiddenStateDump>> HiddenStateDump::Open(DumpSettings settings, ProgressDb& db,
                                                               FunctionRef<void(const std::string&)> log) {
  std::error_code ec;
  std::filesystem::create_directories(settings.dir, ec);
  if (ec) return Status::Error("--dump-hidden-states: cannot create " + settings.dir + ": " + ec.message());
  std::unique_ptr<HiddenStateDump> dump(new HiddenStateDump(std::move(settings), db));
  MLA_RETURN_IF_ERROR(dump->ClaimDirectory());
  MLA_RETURN_IF_ERROR(dump->Reconcile(log));
  MLA_RETURN_IF_ERROR(dump->WriteIndex());
  return dump;
}

HiddenStateDump::~HiddenStateDump() {
  if (owner_fd_ >= 0) ::close(owner_fd_);  // also releases the flock
}

Status HiddenStateDump::ClaimDirectory() {
  const std::string path = settings_.dir + "/.owner";
  owner_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (owner_fd_ < 0) return Status::Error(Errno("--dump-hidden-states: cannot open " + path));
  if (::flock(owner_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::Error("--dump-hidden-states: " + settings_.dir + " is in use by another batch run");
  }
  std::string owner(4096, '\0');
  const ssize_t got = ::pread(owner_fd_, owner.data(), owner.size(), 0);
  if (got < 0) return Status::Error(Errno("--dump-hidden-states: cannot read " + path));
  owner.resize(size_t(got));
  if (owner.empty()) {  // a new directory: this job's from now on
    const std::string text = settings_.owner;
    if (::pwrite(owner_fd_, text.data(), text.size(), 0) != ssize_t(text.size()) || ::fsync(owner_fd_) != 0) {
      return Status::Error(Errno("--dump-hidden-states: cannot write " + path));
    }
    return SyncPath(settings_.dir, true);
  }
  if (owner != settings_.owner) {
    return Status::Error("--dump-hidden-states: " + settings_.dir + " holds the hidden states of the job writing " +
                         owner + ", not of " + settings_.owner + ": use another directory");
  }
  return Status::Ok();
}

Status HiddenStateDump::Reconcile(FunctionRef<void(const std::string&)> log) {
  const std::string& dir = settings_.dir;
  auto dumps = db_.HiddenDumps();
  if (!dumps.ok()) return dumps.status();
  // A record the DB sent back to pending (its output line lost) has its file generated again.
  std::map<std::string, const HiddenDumpRow*> kept;  // file name -> its done record
  int removed = 0, verified = 0;
  for (const HiddenDumpRow& d : *dumps) {
    if (d.state == RecordState::kDone || d.state == RecordState::kWritten) {
      kept.emplace(d.file.file, &d);
      continue;
    }
    MLA_RETURN_IF_ERROR(db_.ForgetHiddenDump(d.seq));
    if (std::remove((dir + "/" + d.file.file).c_str()) == 0) ++removed;
  }
  // Files no done record owns: temp files, and a record's file renamed just before a kill
  // took the process ahead of its done commit.
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return Status::Error(Errno("cannot list " + dir));
  std::vector<std::string> stray;
  while (const dirent* e = ::readdir(listing)) {
    const std::string name = e->d_name;
    // Only names this class writes: record files, and temp files "." + record file or index.
    const bool record = name.starts_with(kFilePrefix) && name.ends_with(kFileSuffix);
    const bool temp = name.ends_with(kTempSuffix) &&
                      ((name.starts_with("." + std::string(kFilePrefix)) &&
                        name.substr(0, name.size() - kTempSuffix.size()).ends_with(kFileSuffix)) ||
                       name == ".index.jsonl" + std::string(kTempSuffix));
    const bool ours = record || temp;
    if (ours && !kept.count(name)) stray.push_back(name);
  }
  ::closedir(listing);
  for (const std::string& name : stray) {
    if (std::remove((dir + "/" + name).c_str()) != 0) return Status::Error(Errno("cannot delete " + dir + "/" + name));
    ++removed;
  }
  if (!stray.empty()) MLA_RETURN_IF_ERROR(SyncPath(dir, true));
  for (const auto& [name, d] : kept) {
    const std::string path = dir + "/" + name;
    const std::string what = "--dump-hidden-states: record '" + d->id + "' is done, ";
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return Status::Error(what + "but its hidden-state file " + path +
                           " is missing: restore the directory, or use a new --output and directory");
    }
    if (int64_t(st.st_size) != d->file.bytes) {
      return Status::Error(what + "but " + path + " has " + std::to_string(st.st_size) + " bytes, not the " +
                           std::to_string(d->file.bytes) + " the progress DB recorded");
    }
    auto hash = HashFile(path);
    if (!hash.ok()) return hash.status();
    if (*hash != d->file.hash) {
      return Status::Error(what + "but " + path + " does not have the content the progress DB recorded (hash " +
                           Hex64(*hash) + ", recorded " + Hex64(d->file.hash) + ")");
    }
    ++verified;
  }
  // Every done record has its file (the DB's done commit stores it); a done record without one
  // was made by a run without --dump-hidden-states, or adopted from the output's lines.
  auto counts = db_.Counts();
  if (!counts.ok()) return counts.status();
  const int64_t done = counts->done + counts->written;
  if (done != int64_t(kept.size())) {
    return Status::Error("--dump-hidden-states: " + std::to_string(done - int64_t(kept.size())) + " of " +
                         std::to_string(done) +
                         " done records have no hidden-state file (their lines were adopted from the output, or "
                         "written without --dump-hidden-states): use a new --output for a dump of every record");
  }
  log("hidden states: " + dir + ": layers [" + JoinLayers(settings_.layers) + "], " + std::to_string(verified) +
      " record files checked" + (removed > 0 ? ", " + std::to_string(removed) + " removed (records not done)" : ""));
  return Status::Ok();
}

Result<HiddenDumpFile> HiddenStateDump::Write(int64_t seq, const std::string& id, std::span<const TokenId> ids,
                                              const CapturedRows& rows) const {
  const int n = int(ids.size());
  if (n < 2 || !rows.Covers(n - 1)) {
    return Status::Error("record '" + id + "': hidden states missing for some of its " + std::to_string(n) +
                         " positions");
  }
  const int64_t width = rows.width();
  const std::string name = FileName(seq), path = settings_.dir + "/" + name;
  const std::string temp = settings_.dir + "/." + name + std::string(kTempSuffix);
  {
    SafetensorsWriter w(temp);
    w.Declare("hidden_states", DType::kBF16, {n - 1, width});
    w.Declare("input_ids", DType::kI32, {n});
    w.SetMetadata("record_id", id);
    w.SetMetadata("layers", "[" + JoinLayers(settings_.layers) + "]");
    w.SetMetadata("hidden_size", std::to_string(settings_.hidden_size));
    w.SetMetadata("model_path", settings_.model_path);
    w.SetMetadata("format", "mlaserve batch hidden states: row p = the residual stream entering each layer at "
                            "position p, layers concatenated");
    MLA_RETURN_IF_ERROR(w.Begin());
    const std::span<const uint16_t> bf16 = rows.Rows(n - 1);
    MLA_RETURN_IF_ERROR(w.Write(bf16.data(), bf16.size_bytes()));
    static_assert(sizeof(TokenId) == 4);
    MLA_RETURN_IF_ERROR(w.Write(ids.data(), ids.size_bytes()));
    MLA_RETURN_IF_ERROR(w.Finish());
  }
  MLA_RETURN_IF_ERROR(SyncPath(temp, false));
  auto hash = HashFile(temp);
  if (!hash.ok()) return hash.status();
  struct stat st;
  if (::stat(temp.c_str(), &st) != 0) return Status::Error(Errno("stat " + temp));
  if (std::rename(temp.c_str(), path.c_str()) != 0) return Status::Error(Errno("rename " + temp));
  MLA_RETURN_IF_ERROR(SyncPath(settings_.dir, true));
  return HiddenDumpFile{.file = name, .rows = n - 1, .bytes = int64_t(st.st_size), .hash = *hash};
}

Status HiddenStateDump::WriteIndex() {
  auto dumps = db_.HiddenDumps();
  if (!dumps.ok()) return dumps.status();
  std::string text;
  for (const HiddenDumpRow& d : *dumps) {
    if (d.state != RecordState::kDone && d.state != RecordState::kWritten) continue;
    text += json{{"id", d.id},
                 {"file", d.file.file},
                 {"rows", d.file.rows},
                 {"layers", settings_.layers},
                 {"hidden_size", settings_.hidden_size},
                 {"bytes", d.file.bytes},
                 {"hash", Hex64(d.file.hash)}}
                .dump() +
            "\n";
  }
  return WriteFileAtomically(settings_.dir, "index.jsonl", text);
}

}  // namespace mlaserve::batch
