#include "batch/input_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>
#include <vector>

namespace mlaserve::batch {
namespace {

constexpr size_t kReadBytes = 1 << 20;
constexpr size_t kIndexBatch = 8192;  // rows per DB transaction in the first pass

bool IsBlank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

// Reads `path` in full 1 MiB blocks (the last one shorter); on_chunk sees each in order.
Status ForEachChunk(const std::string& path, FunctionRef<Status(std::string_view chunk)> on_chunk) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::vector<char> buf(kReadBytes);
  for (bool eof = false; !eof;) {
    size_t filled = 0;
    while (filled < buf.size()) {
      const ssize_t n = ::read(fd, buf.data() + filled, buf.size() - filled);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(fd);
        return Status::Error(path + ": read failed: " + std::strerror(errno));
      }
      if (n == 0) {
        eof = true;
        break;
      }
      filled += size_t(n);
    }
    if (filled == 0) break;
    if (Status s = on_chunk(std::string_view(buf.data(), filled)); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace

Result<uint64_t> HashFile(const std::string& path) {
  uint64_t hash = 0;
  MLA_RETURN_IF_ERROR(ForEachChunk(path, [&](std::string_view chunk) {
    hash = Hash64(chunk, hash);
    return Status::Ok();
  }));
  return hash;
}

Status ForEachLine(const std::string& path,
                   FunctionRef<Status(int line_no, int64_t offset, std::string_view line)> on_line) {
  std::string carry;  // a line split across reads
  int64_t carry_offset = 0, offset = 0;
  int line_no = 0;
  const Status read = ForEachChunk(path, [&](std::string_view chunk) -> Status {
    size_t pos = 0;
    while (pos < chunk.size()) {
      const size_t end = chunk.find('\n', pos);
      if (end == std::string_view::npos) {
        if (carry.empty()) carry_offset = offset + int64_t(pos);
        carry.append(chunk.substr(pos));
        break;
      }
      const std::string_view piece = chunk.substr(pos, end - pos);
      if (!carry.empty()) {
        carry.append(piece);
        MLA_RETURN_IF_ERROR(on_line(++line_no, carry_offset, carry));
        carry.clear();
      } else {
        MLA_RETURN_IF_ERROR(on_line(++line_no, offset + int64_t(pos), piece));
      }
      pos = end + 1;
    }
    offset += int64_t(chunk.size());
    return Status::Ok();
  });
  MLA_RETURN_IF_ERROR(read);
  if (!carry.empty()) MLA_RETURN_IF_ERROR(on_line(++line_no, carry_offset, carry));
  return Status::Ok();
}

void CountRecord(const Record& record, InputSummary& summary) {
  ++summary.num_records;
  ++summary.shapes[int(record.shape)];
  summary.answers += int64_t(record.answer_slots.size());
}

Result<InputSummary> IndexInput(const std::string& path, ProgressDb& db) {
  MLA_RETURN_IF_ERROR(db.BeginIndex());
  InputSummary summary;
  std::vector<IndexedRecord> batch;
  std::vector<InputProblem> problems;
  std::vector<Record> counted;  // shape and answer slots of the batch's records (no text)
  auto flush = [&]() -> Status {
    auto duplicates = db.AddRecords(batch);
    if (!duplicates.ok()) return duplicates.status();
    size_t d = 0;  // duplicates come back in batch order
    for (size_t i = 0; i < batch.size(); ++i) {
      if (d < duplicates->size() && (*duplicates)[d].line_no == batch[i].line_no) {
        problems.push_back(std::move((*duplicates)[d++]));
      } else {
        CountRecord(counted[i], summary);
      }
    }
    batch.clear();
    counted.clear();
    if (problems.empty()) return Status::Ok();
    summary.num_problems += int64_t(problems.size());
    MLA_RETURN_IF_ERROR(db.AddProblems(problems));
    problems.clear();
    return Status::Ok();
  };
  const Status read = ForEachLine(path, [&](int line_no, int64_t offset, std::string_view line) -> Status {
    if (IsBlank(line)) return Status::Ok();
    ++summary.num_lines;
    auto record = ParseRecordLine(line, line_no);
    if (!record.ok()) {
      problems.push_back({line_no, "", record.error()});
      return Status::Ok();
    }
    batch.push_back({.id = record->id, .line_no = line_no, .offset = offset, .length = int64_t(line.size()),
                     .hash = Hash64(line)});
    counted.push_back({.shape = record->shape, .answer_slots = std::move(record->answer_slots)});
    return batch.size() >= kIndexBatch ? flush() : Status::Ok();
  });
  if (!read.ok()) return read;
  MLA_RETURN_IF_ERROR(flush());
  MLA_RETURN_IF_ERROR(db.FinishIndex(summary));
  return summary;
}

Result<InputSummary> CheckInput(const std::string& path, FunctionRef<void(const InputProblem&)> on_problem) {
  InputSummary summary;
  DuplicateIds seen;
  const Status read = ForEachLine(path, [&](int line_no, int64_t, std::string_view line) -> Status {
    if (IsBlank(line)) return Status::Ok();
    ++summary.num_lines;
    auto record = ParseRecordLine(line, line_no);
    if (!record.ok()) {
      ++summary.num_problems;
      on_problem({line_no, "", record.error()});
    } else if (auto problem = seen.Check(record->id, line_no)) {
      ++summary.num_problems;
      on_problem(*problem);
    } else {
      CountRecord(*record, summary);
    }
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return summary;
}

Result<std::unique_ptr<InputFile>> InputFile::Open(const std::string& path) {
  std::unique_ptr<InputFile> f(new InputFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  return f;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Record> InputFile::Read(const RecordProgress& p) const {
  std::string line(size_t(p.in_length), '\0');
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::pread(fd_, line.data() + done, line.size() - done, off_t(p.in_offset) + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(path_ + ": cannot read line " + std::to_string(p.line_no));
    done += size_t(n);
  }
  if (Hash64(line) != p.in_hash) {
    return Status::Error(path_ + ":" + std::to_string(p.line_no) + ": the input changed while the job ran");
  }
  return ParseRecordLine(line, p.line_no);
}

}  // namespace mlaserve::batch
