// `mlaserve batch --model-path ... --dump-hidden-states DIR` (docs/batch.md, "Hidden states"):
// a file per record with the final turn's whole sequence and its rows, equal (within bf16
// rounding) to a forward pass over the same ids; kill -9 mid-run and resume leaves exactly one
// complete file per record, the same as an uninterrupted run's; start-up deletes files of records
// not done and refuses a done record's missing or changed file; bad flags are refused by name.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/float16.h"
#include "engine/sequence_runner.h"
#include "kernels/kernel_choice.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/batch_job.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::ReadTextFile;
using testing::ShellQuote;
using testing::SpawnMlaserve;
using testing::TempDir;
using testing::WaitExit;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";
const std::vector<int> kLayers = {1, 2, 4};  // the bundled model has 4 layers: auto is refused

std::vector<std::string> DumpArgs(const std::string& in, const std::string& out, const std::string& dir, int tokens,
                                  int concurrency) {
  return {"batch", "--input", in, "--output", out, "--model-path", kModel, "--max-new-tokens", std::to_string(tokens),
          "--concurrency", std::to_string(concurrency), "--checkpoint-interval", "0.05", "--progress-interval", "1",
          "--dump-hidden-states", dir, "--hidden-layers", "1,2,4"};
}

std::string Joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + ShellQuote(a);
  return s;
}

std::vector<json> JsonLines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(ReadTextFile(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

// One record's file, read back.
struct Dump {
  std::vector<TokenId> ids;
  std::vector<uint16_t> rows;  // [ids - 1, width] bf16
  int64_t width = 0;
  std::map<std::string, std::string> metadata;
};

Dump ReadDump(const std::string& path) {
  Dump d;
  auto file = Checkpoint::Open(path);
  EXPECT_TRUE(file.ok()) << path << ": " << (file.ok() ? "" : file.error());
  if (!file.ok()) return d;
  const TensorView* ids = (*file)->Find("input_ids");
  const TensorView* rows = (*file)->Find("hidden_states");
  EXPECT_TRUE(ids != nullptr && rows != nullptr) << path;
  if (ids == nullptr || rows == nullptr) return d;
  EXPECT_EQ(ids->dtype, DType::kI32);
  EXPECT_EQ(rows->dtype, DType::kBF16);
  EXPECT_EQ(ids->shape.size(), 1u);
  EXPECT_EQ(rows->shape.size(), 2u);
  d.ids.resize(size_t(ids->numel()));
  std::memcpy(d.ids.data(), ids->data, ids->num_bytes);
  d.rows.resize(size_t(rows->numel()));
  std::memcpy(d.rows.data(), rows->data, rows->num_bytes);
  EXPECT_EQ(rows->shape[0], ids->shape[0] - 1) << path << ": a row per token but the last";
  d.width = rows->shape[1];
  d.metadata = (*file)->metadata();
  return d;
}

// index.jsonl's files by record id, each read back (and checked against the output's turns:
// the final turn's prompt plus its answer is the sequence).
std::map<std::string, Dump> ReadAll(const std::string& dir, const std::string& output) {
  std::map<std::string, Dump> dumps;
  for (const json& entry : JsonLines(dir + "/index.jsonl")) {
    const std::string id = entry["id"];
    EXPECT_EQ(dumps.count(id), 0u) << id << " twice in the index";
    Dump d = ReadDump(dir + "/" + entry["file"].get<std::string>());
    EXPECT_EQ(entry["rows"].get<int64_t>(), int64_t(d.ids.size()) - 1);
    EXPECT_EQ(entry["layers"], json(kLayers));
    EXPECT_EQ(d.metadata["record_id"], id);
    EXPECT_EQ(d.metadata["layers"], "[1,2,4]");
    dumps[id] = std::move(d);
  }
  for (const json& line : JsonLines(output)) {
    const std::string id = line["id"].is_string() ? line["id"].get<std::string>() : line["id"].dump();
    EXPECT_EQ(dumps.count(id), 1u) << id << " has no file";
    if (!dumps.count(id)) continue;
    const json& last = line["turns"].back();
    EXPECT_EQ(int(dumps[id].ids.size()), last["prompt_tokens"].get<int>() + last["completion_tokens"].get<int>())
        << id;
  }
  return dumps;
}

size_t RecordFiles(const std::string& dir, size_t* temp_files = nullptr) {
  size_t files = 0, temps = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    files += name.starts_with("record-") && name.ends_with(".safetensors");
    temps += name.ends_with(".tmp");
  }
  if (temp_files != nullptr) *temp_files = temps;
  return files;
}

TEST(BatchHiddenStates, AFilePerRecordWithTheRowsOfAForwardPass) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", dump = dir.path() + "/hidden";
  const std::string log = dir.path() + "/batch.log";
  std::ofstream(in) << testing::MakeBatchInput(6);  // prompts, chats, two-turn ShareGPT
  ASSERT_EQ(WaitExit(SpawnMlaserve(DumpArgs(in, out, dump, 24, 3), log)), 0) << ReadTextFile(log);
  EXPECT_NE(ReadTextFile(log).find("--dump-hidden-states: radix cache off"), std::string::npos) << ReadTextFile(log);
  const std::map<std::string, Dump> dumps = ReadAll(dump, out);
  ASSERT_EQ(dumps.size(), 6u);
  EXPECT_EQ(RecordFiles(dump), 6u);

  // Each row against a forward pass over the same ids, done here.
  auto model = Model::Load(kModel, ModelOptions{.max_batch_tokens = 512, .max_context = 1024, .deterministic = true,
                                                .capture_layers = kLayers});
  ASSERT_TRUE(model.ok()) << model.error();
  ASSERT_EQ((*model)->captured_width(), 3 * (*model)->config().hidden_size);
  for (const auto& [id, d] : dumps) {
    ASSERT_EQ(d.width, (*model)->captured_width());
    const int rows = int(d.ids.size()) - 1;
    // The table the batch computed with: in process it runs deterministic, and chooses as
    // --kernels auto does (the tests' processes share one measurement, CMakeLists.txt).
    auto kernels = ChooseKernels("auto", /*deterministic=*/true);
    ASSERT_TRUE(kernels.ok());
    auto runner = SequenceRunner::Create(**model, *kernels->kernels, {});
    ASSERT_TRUE(runner.ok());
    ASSERT_TRUE((*runner)->Append(std::span(d.ids).first(size_t(rows))).ok());
    const std::span<const float> want = (*model)->captured_rows(rows);
    for (size_t i = 0; i < want.size(); ++i) {
      const float got = Bf16ToF32(d.rows[i]);
      ASSERT_NEAR(got, want[i], std::ldexp(std::fabs(want[i]), -8) + 1e-30) << id << " value " << i;
    }
  }
}

// The dump loads in PyTorch (tools/train/load_hidden_states.py, the snippet docs/batch.md shows)
// and its rows agree with the PyTorch reference forward (tools/train/modeling.py, fp32) within
// bf16 rounding, but for rare rows after a near-tie in MoE routing (the script's statistical
// check; it prints the figures).
TEST(BatchHiddenStates, LoadsInPyTorchAndMatchesTheReferenceForward) {
  if (testing::RunCommand("/usr/bin/python3 -c 'import torch, numpy'").exit_code != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with torch and numpy (tools/train/setup.sh)";
  }
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", dump = dir.path() + "/hidden";
  std::ofstream(in) << testing::MakeBatchInput(6);
  const std::string log = dir.path() + "/batch.log";
  ASSERT_EQ(WaitExit(SpawnMlaserve(DumpArgs(in, out, dump, 40, 3), log)), 0) << ReadTextFile(log);
  const auto r = testing::RunCommand("cd " + ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/tools/train") +
                                     " && /usr/bin/python3 load_hidden_states.py " + ShellQuote(dump) +
                                     " --reference " + ShellQuote(kModel) + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("6 records"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shapes ok"), std::string::npos) << r.out;
  std::fprintf(stderr, "[pytorch reference] %s", r.out.c_str());
}

TEST(BatchHiddenStates, KilledAndResumedEndsWithOneCompleteFilePerRecord) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  std::ofstream(in) << testing::MakeBatchInput(16);
  const int kTokens = 120, kConcurrency = 4;
  const std::string ref = dir.path() + "/ref.jsonl", ref_dump = dir.path() + "/ref-hidden";
  ASSERT_EQ(WaitExit(SpawnMlaserve(DumpArgs(in, ref, ref_dump, kTokens, kConcurrency), dir.path() + "/ref.log")), 0)
      << ReadTextFile(dir.path() + "/ref.log");

  const std::string out = dir.path() + "/out.jsonl", dump = dir.path() + "/hidden", log = dir.path() + "/out.log";
  int kills = 0;
  for (int run = 0; run < 2; ++run) {
    const size_t before = std::filesystem::exists(dump) ? RecordFiles(dump) : 0;
    const pid_t pid = SpawnMlaserve(DumpArgs(in, out, dump, kTokens, kConcurrency), log);
    // Killed once this run has written a record's file, while other records are in flight.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((!std::filesystem::exists(dump) || RecordFiles(dump) <= before) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill(pid, SIGKILL);
    kills += WaitExit(pid) == 128 + SIGKILL;
  }
  ASSERT_EQ(kills, 2) << ReadTextFile(log);
  ASSERT_EQ(WaitExit(SpawnMlaserve(DumpArgs(in, out, dump, kTokens, kConcurrency), log)), 0) << ReadTextFile(log);

  size_t temps = 0;
  EXPECT_EQ(RecordFiles(dump, &temps), 16u);
  EXPECT_EQ(temps, 0u);
  const std::map<std::string, Dump> got = ReadAll(dump, out), want = ReadAll(ref_dump, ref);
  ASSERT_EQ(got.size(), 16u);
  ASSERT_EQ(want.size(), 16u);
  // Deterministic inference: a record resumed from its checkpoint re-prefills its tokens and
  // gets the rows an uninterrupted run wrote.
  for (const auto& [id, d] : want) {
    EXPECT_EQ(got.at(id).ids, d.ids) << id;
    EXPECT_TRUE(got.at(id).rows == d.rows) << id;
  }
  std::fprintf(stderr, "[hidden kill] %d kills\n%s", kills, ReadTextFile(log).c_str());
}

TEST(BatchHiddenStates, StartUpDeletesStrayFilesAndRefusesMissingOrChangedOnes) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", dump = dir.path() + "/hidden";
  std::ofstream(in) << testing::MakeBatchInput(3);
  const std::string args = Joined(DumpArgs(in, out, dump, 8, 2));
  ASSERT_EQ(testing::RunMlaserve(args).exit_code, 0);
  ASSERT_EQ(RecordFiles(dump), 3u);
  const std::string first = dump + "/" + JsonLines(dump + "/index.jsonl")[0]["file"].get<std::string>();
  const std::string bytes = ReadTextFile(first);

  // A file no done record owns (as a kill between its rename and the done commit leaves) and a
  // temp file: deleted at start-up.
  std::ofstream(dump + "/record-000000099.safetensors") << bytes;
  std::ofstream(dump + "/.record-000000098.safetensors.tmp") << "partial";
  std::ofstream(dump + "/notes.tmp") << "a user's file";  // not a name the dump writes: kept
  auto rerun = testing::RunMlaserve(args);
  EXPECT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_NE(rerun.err.find("3 record files checked, 2 removed"), std::string::npos) << rerun.err;
  EXPECT_NE(rerun.out.find("nothing to do"), std::string::npos) << rerun.out;
  size_t temps = 0;
  EXPECT_EQ(RecordFiles(dump, &temps), 3u);
  EXPECT_EQ(temps, 1u);  // notes.tmp
  EXPECT_TRUE(std::filesystem::exists(dump + "/notes.tmp"));

  // Another job (another --output) on the same directory is refused before it touches a file.
  const std::string other_out = dir.path() + "/other.jsonl";
  std::vector<std::string> other_job = DumpArgs(in, other_out, dump, 8, 2);
  auto refused = testing::RunMlaserve(Joined(other_job));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("holds the hidden states of the job writing"), std::string::npos) << refused.err;
  EXPECT_EQ(RecordFiles(dump), 3u);

  // A done record's file changed (same size) or missing: refused, naming it.
  std::string changed = bytes;
  changed[changed.size() - 1] ^= 1;
  std::ofstream(first, std::ios::binary | std::ios::trunc) << changed;
  rerun = testing::RunMlaserve(args);
  EXPECT_EQ(rerun.exit_code, 2);
  EXPECT_NE(rerun.err.find("does not have the content the progress DB recorded"), std::string::npos) << rerun.err;
  std::filesystem::remove(first);
  rerun = testing::RunMlaserve(args);
  EXPECT_EQ(rerun.exit_code, 2);
  EXPECT_NE(rerun.err.find("is missing"), std::string::npos) << rerun.err;
  // Restored, the job is whole again.
  std::ofstream(first, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(testing::RunMlaserve(args).exit_code, 0);
  // The layers are the job's settings: other layers, or no dump, on the same job are refused.
  std::vector<std::string> other = DumpArgs(in, out, dump, 8, 2);
  other.back() = "1,2,3";
  rerun = testing::RunMlaserve(Joined(other));
  EXPECT_EQ(rerun.exit_code, 2);
  EXPECT_NE(rerun.err.find("other settings"), std::string::npos) << rerun.err;
  other.resize(other.size() - 4);  // without --dump-hidden-states DIR --hidden-layers ...
  rerun = testing::RunMlaserve(Joined(other));
  EXPECT_EQ(rerun.exit_code, 2);
  EXPECT_NE(rerun.err.find("other settings"), std::string::npos) << rerun.err;
}

TEST(BatchHiddenStates, BadFlagsAreRefusedByName) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl", out = dir.path() + "/out.jsonl", dump = dir.path() + "/hidden";
  std::ofstream(in) << testing::MakeBatchInput(1);
  const std::string base = "batch --input " + ShellQuote(in) + " --output " + ShellQuote(out);
  const std::string local = base + " --model-path " + ShellQuote(kModel) + " --dump-hidden-states " + ShellQuote(dump);
  const std::pair<std::string, std::string> cases[] = {
      // SGLang's default [2, L/2, L-3] is [2, 2, 1] for 4 layers.
      {local + " --hidden-layers auto", "auto is SGLang's EAGLE-3 default [2, L/2, L-3] = [2,2,1]"},
      {local, "[2,2,1]"},  // auto is the default
      {local + " --hidden-layers 2,1", "strictly increasing"},
      {local + " --hidden-layers 1,5", "layer 5 is outside [0, 4]"},
      {local + " --hidden-layers 1,x", "'x' is not a layer index"},
      {local + " --hidden-layers 1,2,4 --tp-size 2", "not supported with tensor parallelism"},
      {base + " --endpoint http://127.0.0.1:9 --dump-hidden-states " + ShellQuote(dump),
       "--dump-hidden-states needs the in-process engine"},
      {base + " --model-path " + ShellQuote(kModel) + " --hidden-layers 1,2,3", "--hidden-layers needs --dump-hidden-states"},
      {local + " --hidden-layers 1,2,3 --speculative-algorithm EAGLE3 --speculative-draft-model-path " +
           ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla-eagle3"),
       "cannot be combined with --speculative-algorithm EAGLE3"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = testing::RunMlaserve(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out)) << "a refused run wrote nothing";
}

}  // namespace
}  // namespace mlaserve
