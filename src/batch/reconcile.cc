#include "batch/reconcile.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace mlaserve::batch {
namespace {

using nlohmann::json;

Result<std::string> ReadRange(const std::string& path, int64_t offset, int64_t length) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size_t(length), '\0');
  if (!in.seekg(offset) || !in.read(bytes.data(), std::streamsize(length))) {
    return Status::Error(path + ": cannot read " + std::to_string(length) + " bytes at " + std::to_string(offset));
  }
  return bytes;
}

// Whether the mark's last line is in the file, whole and unchanged.
Status CheckMark(const std::string& path, const OutputMark& mark) {
  if (mark.end == 0) return Status::Ok();
  auto bytes = ReadRange(path, mark.last_offset, mark.end - mark.last_offset);
  if (bytes.ok() && !bytes->empty() && bytes->back() == '\n' &&
      Hash64(std::string_view(*bytes).substr(0, bytes->size() - 1)) == mark.last_hash) {
    return Status::Ok();
  }
  return Status::Error(path + ": the line at byte " + std::to_string(mark.last_offset) +
                       " is not the one its progress DB wrote (the file was replaced or edited); restore it, or "
                       "delete " + path + ".progress.db to rebuild the DB from the file");
}

}  // namespace

std::string SettingsDifference(const json& s, const OutputSettings& want, bool check_model) {
  if (!s.is_object()) return "no settings";
  auto differs = [&](const char* key, const json& value) -> std::string {
    if (!s.contains(key)) return std::string(key) + " missing";
    if (s[key] != value) return std::string(key) + " " + s[key].dump() + ", this run " + value.dump();
    return "";
  };
  for (std::string d : {differs("max_new_tokens", want.max_new_tokens), differs("temperature", want.temperature),
                        differs("top_p", want.top_p), differs("seed", want.seed),
                        check_model ? differs("model", want.model) : std::string()}) {
    if (!d.empty()) return d;
  }
  // Absent in output made without --reasoning-parser.
  const json parser = want.reasoning_parser ? json(chat::ReasoningFormatName(*want.reasoning_parser)) : json();
  const json strip = want.reasoning_parser ? json(want.strip_reasoning) : json();
  for (const auto& [key, value] : {std::pair<const char*, json>{"reasoning_parser", parser}, {"strip_reasoning", strip}}) {
    const json has = s.contains(key) ? s[key] : json();
    if (has != value) return std::string(key) + " " + has.dump() + ", this run " + value.dump();
  }
  return "";
}

Result<ReconcileReport> Reconcile(OutputWriter& writer, ProgressDb& db, const ReconcileOptions& options) {
  ReconcileReport report;
  const std::string& path = writer.path();
  auto mark = db.Mark();
  if (!mark.ok()) return mark.status();
  if (writer.size() < mark->end) {
    // The file lost lines the DB had as written: keep the prefix the DB knows whole.
    auto within = db.LastWrittenWithin(writer.size());
    if (!within.ok()) return within.status();
    MLA_RETURN_IF_ERROR(CheckMark(path, *within));
    MLA_RETURN_IF_ERROR(writer.Truncate(within->end));
    auto lost = db.ForgetWrittenFrom(within->end, *within);
    if (!lost.ok()) return lost.status();
    report.lost = *lost;
    *mark = *within;
  }
  MLA_RETURN_IF_ERROR(CheckMark(path, *mark));

  // The tail past the mark, line by line.
  std::ifstream in(path, std::ios::binary);
  if (!in.seekg(mark->end)) return Status::Error(path + ": cannot seek");
  std::vector<WrittenLine> found;
  int64_t offset = mark->end, mismatched = 0;
  std::string first_mismatch;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) {  // no '\n': a kill during an append; cut it (its record is written again)
      report.truncated_bytes = int64_t(line.size());
      break;
    }
    const std::string where = path + ": byte " + std::to_string(offset);
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
      return Status::Error(where + ": not an output line of mlaserve batch");
    }
    const std::string id = j["id"].get<std::string>();
    auto row = db.Find(id);
    if (!row.ok()) return row.status();
    if (!*row) return Status::Error(where + ": id '" + id + "' is not a record of this input");
    if ((*row)->state == RecordState::kWritten) return Status::Error(where + ": id '" + id + "' appears twice");
    if ((*row)->state == RecordState::kDone) {
      ++report.noted;
    } else {
      ++report.adopted;
      if (const std::string d = SettingsDifference(j.value("settings", json()), options.settings, options.check_model);
          !d.empty()) {
        if (mismatched++ == 0) first_mismatch = "id '" + id + "': " + d;
      }
    }
    found.push_back({.seq = (*row)->seq, .offset = offset, .length = int64_t(line.size()), .hash = Hash64(line)});
    offset += int64_t(line.size()) + 1;
    ++report.tail_lines;
  }
  if (mismatched > 0 && !options.accept_existing) {
    return Status::Error(path + ": " + std::to_string(mismatched) + " line(s) that the progress DB does not have " +
                         "were made with other settings than this run's (first: " + first_mismatch +
                         "); rerun with those settings, remove those lines, or give --accept-existing to keep them");
  }
  report.accepted_other_settings = mismatched;
  std::vector<int64_t> seqs;
  for (const WrittenLine& w : found) seqs.push_back(w.seq);
  std::sort(seqs.begin(), seqs.end());
  if (std::adjacent_find(seqs.begin(), seqs.end()) != seqs.end()) {
    return Status::Error(path + ": a record's line appears twice past byte " + std::to_string(mark->end));
  }
  if (report.truncated_bytes > 0) MLA_RETURN_IF_ERROR(writer.Truncate(offset));
  MLA_RETURN_IF_ERROR(db.MarkWritten(found));
  return report;
}

}  // namespace mlaserve::batch
