// Hidden states out of the batch tool (`batch --model-path ... --dump-hidden-states DIR`), the
// training data of an EAGLE-3 drafter, captured by the engine during the generation run itself
// (docs/batch.md, "Hidden states"). Per record, DIR/record-<seq>.safetensors holds the rows of its
// final turn's whole sequence (that turn's prompt, which holds the earlier turns, then its
// answer): `hidden_states` BF16 [n - 1, C * H] (the residual stream entering each of the C
// captured layers, concatenated in layer order: SpecForge's aux hidden states; the last token is
// never run, so it has no row) and `input_ids` I32 [n]. DIR/index.jsonl maps record ids to files.
//
// Exactly once: a record's file is written whole (temp file, fsync, rename, fsync of DIR) before
// the done commit, which stores its name, size and hash in the progress DB (table hidden_dumps),
// so a done record always has its file. At start-up (Open) files of records not done (a kill
// between the rename and the commit) and temp files are deleted, and every done record's file
// must be there with the size and hash the DB recorded, or the run is refused. DIR belongs to one
// job (DIR/.owner holds its output path, locked while a run writes): another job's DIR is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batch/progress_db.h"
#include "core/function_ref.h"
#include "core/status.h"
#include "core/types.h"

namespace mlaserve::batch {

// --hidden-layers: "auto" (SGLang's EAGLE-3 default [2, L/2, L-3], L = num_hidden_layers, as
// set_eagle3_layers_to_capture chooses) or "i,j,k". Index i is the residual stream entering
// decoder layer i (num_hidden_layers: the last layer's output, before the final norm). Strictly
// increasing and in [0, L], else an error naming the indices.
Result<std::vector<int>> ResolveHiddenLayers(std::string_view flag, int num_hidden_layers);
std::string JoinLayers(std::span<const int> layers);  // "2,4,6"

// A sequence's captured rows, keyed by position and kept in bf16. Rows delivered again (a
// retracted request re-prefills) overwrite the same positions.
class CapturedRows {
 public:
  // Empties it for rows of `width` floats; reserves room for max_positions rows, so that Add
  // does not allocate while the engine delivers.
  void Reset(int width, int max_positions);
  // rows [k, width], the positions first_position.. of the sequence.
  void Add(int first_position, std::span<const float> rows);
  int width() const { return width_; }
  bool Covers(int num_positions) const;  // every position in [0, num_positions) has its row
  // [num_positions, width] in bf16 bits (Covers(num_positions) must hold).
  std::span<const uint16_t> Rows(int num_positions) const {
    return std::span(bf16_).first(size_t(num_positions) * size_t(width_));
  }

 private:
  int width_ = 0;
  std::vector<uint16_t> bf16_;  // [positions, width]
  std::vector<uint8_t> have_;   // [positions] 1 once the row arrived
};

// What a run writes into DIR and stores beside the done record.
struct DumpSettings {
  std::string dir;
  std::string owner;  // the job's --output, absolute: DIR/.owner names it, and no other job may use DIR
  std::vector<int> layers;
  int hidden_size = 0;
  std::string model_path;  // metadata
};

class HiddenStateDump {
 public:
  // Creates DIR if needed and reconciles it with the DB (above); rewrites DIR/index.jsonl.
  // `log` gets one line about what was found.
  static Result<std::unique_ptr<HiddenStateDump>> Open(DumpSettings settings, ProgressDb& db,
                                                       FunctionRef<void(const std::string&)> log);

  // Writes record `seq`'s file (atomically, durably) and returns what the done commit stores.
  // ids: the final turn's whole sequence, n >= 2; rows must cover [0, n - 1).
  Result<HiddenDumpFile> Write(int64_t seq, const std::string& id, std::span<const TokenId> ids,
                               const CapturedRows& rows) const;

  // DIR/index.jsonl from the DB (temp file, rename): one line per record with a file, in input
  // order: {"id", "file", "rows", "layers", "hidden_size", "bytes", "hash"}.
  Status WriteIndex();

  const DumpSettings& settings() const { return settings_; }

 private:
  HiddenStateDump(DumpSettings settings, ProgressDb& db) : settings_(std::move(settings)), db_(db) {}
  // DIR/.owner: locked for the run (a second run on DIR is refused) and holding the owning
  // job's output path (another job's DIR is refused, so reconciling never deletes its files).
  Status ClaimDirectory();
  Status Reconcile(FunctionRef<void(const std::string&)> log);

  DumpSettings settings_;
  ProgressDb& db_;
  int owner_fd_ = -1;  // DIR/.owner, flock()ed while open

 public:
  ~HiddenStateDump();
  HiddenStateDump(const HiddenStateDump&) = delete;
  HiddenStateDump& operator=(const HiddenStateDump&) = delete;
};

}  // namespace mlaserve::batch
