#include "batch/output_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/read_file.h"

namespace mlaserve::batch {

Result<std::unique_ptr<OutputWriter>> OutputWriter::Open(const std::string& path, bool ordered,
                                                         const std::vector<std::string>& ids) {
  std::unique_ptr<OutputWriter> w(new OutputWriter());
  w->ordered_ = ordered;
  w->ids_ = ids;
  w->pending_.resize(ids.size());
  w->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  if (::flock(w->fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::Error(path + ": another mlaserve batch run is writing this output");
  }
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  // A kill during an append leaves a line without its '\n': cut it (its record is done in the
  // DB and is written again below).
  const size_t keep = text->empty() ? 0 : text->rfind('\n') == std::string::npos ? 0 : text->rfind('\n') + 1;
  if (keep < text->size()) {
    w->truncated_bytes_ = text->size() - keep;
    if (::ftruncate(w->fd_, off_t(keep)) != 0) return Status::Error(path + ": cannot truncate: " + std::strerror(errno));
    text->resize(keep);
  }
  size_t pos = 0;
  int line_no = 0;
  while (pos < text->size()) {
    const size_t end = text->find('\n', pos);
    const std::string line = text->substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
      return Status::Error(path + ":" + std::to_string(line_no) + ": not an output line of mlaserve batch");
    }
    const std::string id = j["id"].get<std::string>();
    if (!w->existing_.emplace(id, line).second) {
      return Status::Error(path + ":" + std::to_string(line_no) + ": id '" + id + "' appears twice");
    }
    ++w->lines_;
  }
  if (::lseek(w->fd_, 0, SEEK_END) < 0) return Status::Error(path + ": cannot seek");
  return w;
}

OutputWriter::~OutputWriter() {
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
}

Status OutputWriter::Append(const std::string& line) {
  const std::string bytes = line + "\n";
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(std::string("output: write failed: ") + std::strerror(errno));
    done += size_t(n);
  }
  if (::fdatasync(fd_) != 0) return Status::Error(std::string("output: fdatasync failed: ") + std::strerror(errno));
  ++lines_;
  return Status::Ok();
}

Status OutputWriter::Offer(size_t index, std::optional<std::string> line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= ids_.size()) return Status::Error("output: record index out of range");
  if (existing_.count(ids_[index])) line.reset();  // already in the file: never again
  if (!ordered_) return line ? Append(*line) : Status::Ok();
  pending_[index] = std::move(line);
  while (next_ < ids_.size() && pending_[next_].has_value()) {
    if (pending_[next_]->has_value()) MLA_RETURN_IF_ERROR(Append(**pending_[next_]));
    pending_[next_].reset();
    ++next_;
  }
  return Status::Ok();
}

size_t OutputWriter::num_in_file() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

}  // namespace mlaserve::batch
