// The batch tool's input reader (batch/input_file.cc, records.cc): the input is a JSONL file
// (written to /dev/shm: the reader takes a path). The --dry-run check walks it; every record that
// parses is then read back by offset, as a worker reads it, and must parse again the same way.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "batch/input_file.h"
#include "batch/records.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace batch = mlaserve::batch;
  const std::string path = mlaserve::fuzz::WriteScratchFile("input.jsonl", mlaserve::fuzz::AsText(data, size));
  (void)batch::CheckInput(path, [](const batch::InputProblem& problem) { (void)problem.reason.size(); });
  std::vector<batch::RecordProgress> rows;
  const mlaserve::Status read =
      batch::ForEachLine(path, [&](int line_no, int64_t offset, std::string_view line) -> mlaserve::Status {
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) return mlaserve::Status::Ok();  // blank
        auto record = batch::ParseRecordLine(line, line_no);
        if (record.ok()) {
          rows.push_back({.id = record->id, .line_no = line_no, .in_offset = offset,
                          .in_length = int64_t(line.size()), .in_hash = batch::Hash64(line)});
        }
        return mlaserve::Status::Ok();
      });
  if (!read.ok()) __builtin_trap();  // a file in /dev/shm is always readable
  if (!batch::HashFile(path).ok()) __builtin_trap();
  auto input = batch::InputFile::Open(path);
  if (!input.ok()) __builtin_trap();
  for (const batch::RecordProgress& row : rows) {
    auto record = (*input)->Read(row);
    if (!record.ok() || record->id != row.id) __builtin_trap();
  }
  return 0;
}
