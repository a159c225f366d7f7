#include "batch/output_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mlaserve::batch {

Result<std::unique_ptr<OutputWriter>> OutputWriter::Open(const std::string& path, bool ordered) {
  std::unique_ptr<OutputWriter> w(new OutputWriter());
  w->path_ = path;
  w->ordered_ = ordered;
  w->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  if (::flock(w->fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::Error(path + ": another mlaserve batch run is writing this output");
  }
  const off_t end = ::lseek(w->fd_, 0, SEEK_END);
  if (end < 0) return Status::Error(path + ": cannot seek");
  w->end_ = int64_t(end);
  return w;
}

OutputWriter::~OutputWriter() {
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
}

int64_t OutputWriter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

Status OutputWriter::Truncate(int64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (::ftruncate(fd_, off_t(size)) != 0 || ::lseek(fd_, off_t(size), SEEK_SET) < 0) {
    return Status::Error(path_ + ": cannot truncate: " + std::strerror(errno));
  }
  end_ = size;
  return Status::Ok();
}

Status OutputWriter::Append(int64_t seq, const std::string& line) {
  const std::string bytes = line + "\n";
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(std::string("output: write failed: ") + std::strerror(errno));
    done += size_t(n);
  }
  if (::fdatasync(fd_) != 0) return Status::Error(std::string("output: fdatasync failed: ") + std::strerror(errno));
  const WrittenLine written{.seq = seq, .offset = end_, .length = int64_t(line.size()), .hash = Hash64(line)};
  end_ += int64_t(bytes.size());
  ++lines_written_;
  return on_written_ ? on_written_(written) : Status::Ok();
}

void OutputWriter::Expect(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ordered_) expected_.push_back(seq);
}

Status OutputWriter::Offer(int64_t seq, std::optional<std::string> line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ordered_) return line ? Append(seq, *line) : Status::Ok();
  finished_[seq] = std::move(line);
  while (!expected_.empty()) {
    auto it = finished_.find(expected_.front());
    if (it == finished_.end()) break;
    if (it->second) MLA_RETURN_IF_ERROR(Append(it->first, *it->second));
    finished_.erase(it);
    expected_.pop_front();
  }
  return Status::Ok();
}

int64_t OutputWriter::lines_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_written_;
}

}  // namespace mlaserve::batch
