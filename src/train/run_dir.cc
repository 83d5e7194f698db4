// RunDir: lock, consent and resume point of a run's output directory. See run_dir.h.
#include "leanemb/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <span>

#include "leanemb/json.h"

#include "ckpt/directory.h"
#include "leanemb/env.h"
#include "ckpt/format.h"
#include "dist/communicator.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/checkpoint.h"

namespace leanemb::train {

namespace {

constexpr char kLockName[] = "LOCK";
constexpr char kMetricsName[] = "metrics.jsonl";
constexpr char kShardsName[] = "shards";

std::string errno_text(int err) { return std::strerror(err); }

std::string local_time_stamp(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The holder's lines of a lock file, on one line: "pid 12 on host h since 2024-06-01 18:47:00".
std::string describe_holder(int fd) {
  char buf[512] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "holder unknown";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

// ---- DirLock ------------------------------------------------------------------------------------

Result<std::unique_ptr<DirLock>> DirLock::acquire(const std::string& dir) {
  const std::string path = ckpt::join_path(dir, kLockName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open the lock file '" + path + "': " + errno_text(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = describe_holder(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      return failed_precondition("output directory '" + dir + "' is in use by another leanemb run (" + holder +
                                 "); wait for it to end or choose another --out");
    return io_error("cannot lock '" + path + "': " + errno_text(err));
  }
  const std::string who = "pid " + std::to_string(::getpid()) + " on host " + host_name() + " since " +
                          local_time_stamp("%Y-%m-%d %H:%M:%S") + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot write the lock file '" + path + "': " + errno_text(err));
  }
  return std::unique_ptr<DirLock>(new DirLock(fd, path));
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

// ---- RunDir -------------------------------------------------------------------------------------

namespace {

// What an earlier run left in the directory.
struct Inventory {
  std::vector<ckpt::CheckpointRef> steps;  // checkpoints/step-<N>, complete or not
  bool shards = false;                     // shards/ (sharded checkpoints)
  bool metrics = false;                    // metrics.jsonl
  bool empty() const { return steps.empty() && !shards && !metrics; }
};

Result<Inventory> take_inventory(ckpt::Env* env, const std::string& out) {
  Inventory inv;
  LEANEMB_ASSIGN_OR_RETURN(inv.steps, ckpt::list_checkpoints(out, env));
  inv.shards = env->file_exists(ckpt::join_path(out, kShardsName));
  inv.metrics = ckpt::posix_env()->file_exists(ckpt::join_path(out, kMetricsName));  // always a real file
  return inv;
}

std::string describe(const Inventory& inv) {
  std::vector<std::string> parts;
  if (!inv.steps.empty()) {
    std::string s = std::to_string(inv.steps.size()) + " checkpoint director" + (inv.steps.size() == 1 ? "y" : "ies") + " (";
    s += inv.steps.size() == 1 ? "step " + std::to_string(inv.steps[0].step)
                               : "steps " + std::to_string(inv.steps.front().step) + " to " + std::to_string(inv.steps.back().step);
    parts.push_back(s + ")");
  }
  if (inv.shards) parts.push_back("sharded checkpoint files (shards/)");
  if (inv.metrics) parts.push_back(kMetricsName);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

class Mover {
 public:
  Mover(ckpt::Env* env, std::string out, std::vector<std::string>* moved) : env_(env), out_(std::move(out)), moved_(moved) {}
  // Renames `from` to <into>/<name> (or name-2, ...; into is created under out when missing)
  // and makes both directory entries durable.
  Status move(const std::string& from, const std::string& into, const std::string& name, ckpt::Env* env = nullptr) {
    env = env ? env : env_;
    if (!env->file_exists(into)) {
      LEANEMB_RETURN_IF_ERROR(env->create_dir(into));
      LEANEMB_RETURN_IF_ERROR(env->sync_dir(out_));
    }
    const std::string to = ckpt::free_path(env, into, name);
    LEANEMB_RETURN_IF_ERROR(env->rename(from, to));
    LEANEMB_RETURN_IF_ERROR(env->sync_dir(into));
    LEANEMB_RETURN_IF_ERROR(env->sync_dir(ckpt::parent_dir(from)));
    moved_->push_back(from + " -> " + to);
    return Status();
  }
  // Everything of an earlier run into <out>/replaced-<time>/.
  Status replace_all(const Inventory& inv) {
    if (inv.empty()) return Status();
    const std::string into = ckpt::free_path(env_, out_, "replaced-" + local_time_stamp("%Y%m%d-%H%M%S"));
    const std::string ck = ckpt::checkpoints_dir(out_);
    // checkpoints/ holding only leftovers (.tmp of a killed run) stays: the next commit cleans it.
    if (!inv.steps.empty()) LEANEMB_RETURN_IF_ERROR(move(ck, into, "checkpoints"));
    if (inv.shards) LEANEMB_RETURN_IF_ERROR(move(ckpt::join_path(out_, kShardsName), into, kShardsName));
    if (inv.metrics) LEANEMB_RETURN_IF_ERROR(move(ckpt::join_path(out_, kMetricsName), into, kMetricsName, ckpt::posix_env()));
    return Status();
  }
  // A checkpoint directory that failed its checks into <out>/corrupt/ (and its shards, if any).
  Status set_aside(const ckpt::CheckpointRef& ref) {
    LEANEMB_ASSIGN_OR_RETURN(std::string to, ckpt::set_aside_checkpoint_dir(env_, out_, ref.path));
    moved_->push_back(ref.path + " -> " + to);
    const std::string name = ckpt::step_dir_name(ref.step);
    const std::string shard = ckpt::join_path(ckpt::join_path(out_, kShardsName), name);
    if (env_->file_exists(shard)) LEANEMB_RETURN_IF_ERROR(move(shard, ckpt::join_path(out_, "corrupt"), "shards-" + name));
    return Status();
  }

 private:
  ckpt::Env* env_;
  std::string out_;
  std::vector<std::string>* moved_;
};

// Why checkpoint `ref` cannot be resumed from (OK: it can); *sharded says which kind it is.
Status check_checkpoint(ckpt::Env* env, const ckpt::CheckpointRef& ref, bool* sharded) {
  auto r = ckpt::CheckpointReader::open(ref.path, env);
  if (!r.ok()) return r.status();
  *sharded = (*r)->find("sharded/layout") != nullptr;
  if (*sharded) return dist::verify_sharded_checkpoint(ref.path, env, true);
  // Blocks checked; linked files by size only (open): hashing them reads the whole store.
  return (*r)->verify(/*hash_linked_files=*/false).status();
}

// Keeps the lines of metrics.jsonl whose step is <= `step` (a line without a step is kept):
// written to a temporary file, synced, renamed over the old one.
Status trim_metrics(const std::string& out, int64_t step) {
  const std::string path = ckpt::join_path(out, kMetricsName);
  std::ifstream in(path);
  if (!in) return Status();
  std::string kept, line;
  size_t dropped = 0;
  while (std::getline(in, line)) {
    const auto j = parse_json_or_discarded(line);
    // A line that is not JSON was cut short (a write that failed: disk full, a kill while
    // appending): dropped, or the lines this run appends would follow it.
    if (j.is_discarded() && !line.empty()) {
      std::fprintf(stderr, "leanemb: note: %s: dropping a line cut short (%zu bytes; a write that did not complete)\n",
                   path.c_str(), line.size());
      ++dropped;
      continue;
    }
    if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > step) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped == 0) return Status();
  ckpt::Env* env = ckpt::posix_env();
  const std::string tmp = path + ".tmp";
  LEANEMB_ASSIGN_OR_RETURN(auto f, env->new_writable_file(tmp));
  LEANEMB_RETURN_IF_ERROR(f->append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kept.data()), kept.size())));
  LEANEMB_RETURN_IF_ERROR(f->sync());
  LEANEMB_RETURN_IF_ERROR(f->close());
  LEANEMB_RETURN_IF_ERROR(env->rename(tmp, path));
  return env->sync_dir(out);
}

}  // namespace

Result<std::unique_ptr<RunDir>> RunDir::open(const RunDirOptions& o) {
  if (o.resume && o.overwrite) return invalid_argument("--resume and --overwrite contradict each other: give one");
  if (o.start_fresh && !o.resume) return invalid_argument("--start-fresh applies to --resume only");
  if (o.resume && !o.writer.empty()) return invalid_argument(o.writer + " cannot resume a run directory");
  auto say = [&](const std::string& s) {
    if (o.say) o.say(s);
    else std::fprintf(stderr, "leanemb: note: %s\n", s.c_str());
  };
  ckpt::Env* env = ckpt::env_or_default(o.env);
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return io_error("cannot create output directory '" + o.out_dir + "': " + ec.message());
  std::unique_ptr<RunDir> rd(new RunDir());
  LEANEMB_ASSIGN_OR_RETURN(rd->lock_, DirLock::acquire(o.out_dir));
  LEANEMB_ASSIGN_OR_RETURN(Inventory inv, take_inventory(env, o.out_dir));
  Mover mover(env, o.out_dir, &rd->moved_);
  auto report_moves = [&] {
    for (const std::string& m : rd->moved_) say("moved " + m);
  };
  if (!o.resume) {
    if (!inv.empty() && !o.overwrite && o.writer.empty())
      return invalid_argument("output directory '" + o.out_dir + "' holds an earlier run's " + describe(inv) +
                              "; a fresh run would replace them: give --resume to continue that run, --overwrite to "
                              "move them aside (into " + o.out_dir + "/replaced-<time>/), or another --out");
    if (!inv.empty() && !o.overwrite)
      return invalid_argument(o.writer + ": output directory '" + o.out_dir + "' holds " + describe(inv) +
                              " that this process did not write (a training run's or an earlier export's); writing there "
                              "could replace them: give " + o.overwrite_flag + " to move them aside (into " + o.out_dir +
                              "/replaced-<time>/), or another output directory");
    LEANEMB_RETURN_IF_ERROR(mover.replace_all(inv));
    report_moves();
    return rd;
  }
  // --resume: the newest valid checkpoint; newer invalid ones are set aside, never deleted.
  std::vector<std::pair<ckpt::CheckpointRef, Status>> bad;
  for (auto it = inv.steps.rbegin(); it != inv.steps.rend(); ++it) {
    bool sharded = false;
    const Status s = check_checkpoint(env, *it, &sharded);
    if (s.code() == StatusCode::kIoError) return Status(s.code(), "--resume: checking " + it->path + ": " + s.message());
    if (!s.ok()) {
      bad.emplace_back(*it, s);
      continue;
    }
    rd->resume_ = {it->path, sharded, it->step};
    break;
  }
  if (rd->resume_.dir.empty() && !bad.empty() && !o.start_fresh) {
    std::string msg = "--resume: none of the " + std::to_string(bad.size()) + " checkpoint directories under '" +
                      ckpt::checkpoints_dir(o.out_dir) + "' is valid (left untouched):";
    for (const auto& [ref, s] : bad) msg += " " + ref.path + ": " + s.to_string() + ";";
    return data_loss(msg + " --start-fresh moves them into " + o.out_dir + "/corrupt/ and trains from step 0");
  }
  for (const auto& [ref, s] : bad) {
    std::fprintf(stderr, "leanemb: warning: checkpoint %s is not valid (%s); moving it into %s/corrupt/\n", ref.path.c_str(),
                 s.to_string().c_str(), o.out_dir.c_str());
    LEANEMB_RETURN_IF_ERROR(mover.set_aside(ref));
  }
  // Older directories with a missing or broken manifest: set aside too (a commit's cleanup
  // would otherwise count them as leftovers).
  for (const ckpt::CheckpointRef& ref : inv.steps) {
    if (ref.step >= rd->resume_.step) continue;
    const Status s = ckpt::CheckpointReader::open(ref.path, env).status();
    if (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kDataLoss) continue;
    std::fprintf(stderr, "leanemb: warning: checkpoint %s is not valid (%s); moving it into %s/corrupt/\n", ref.path.c_str(),
                 s.to_string().c_str(), o.out_dir.c_str());
    LEANEMB_RETURN_IF_ERROR(mover.set_aside(ref));
  }
  if (rd->resume_.dir.empty()) {
    // Starting at step 0: what the earlier run logged is moved aside with the rest.
    LEANEMB_ASSIGN_OR_RETURN(Inventory rest, take_inventory(env, o.out_dir));
    LEANEMB_RETURN_IF_ERROR(mover.replace_all(rest));
  } else {
    LEANEMB_RETURN_IF_ERROR(trim_metrics(o.out_dir, rd->resume_.step));
  }
  report_moves();
  return rd;
}

RunDir::~RunDir() = default;

Result<ResumePoint> open_run_dir(const RunDirOptions& options, dist::Communicator* comm, std::unique_ptr<RunDir>* held) {
  const bool multi = comm != nullptr && comm->size() > 1;
  Status mine;
  if (!multi || comm->rank() == 0) {
    auto rd = RunDir::open(options);
    if (rd.ok()) *held = std::move(rd).value();
    else mine = rd.status();
  }
  if (!multi) {
    if (!mine.ok()) return mine;
    return (*held)->resume_point();
  }
  // Every rank learns rank 0's verdict, then its resume point.
  std::vector<uint8_t> msg;
  if (comm->rank() == 0) {
    const nlohmann::json j = mine.ok() ? nlohmann::json{{"ok", true}, {"dir", (*held)->resume_point().dir},
                                                        {"sharded", (*held)->resume_point().sharded},
                                                        {"step", (*held)->resume_point().step}}
                                       : nlohmann::json{{"ok", false}, {"code", static_cast<int>(mine.code())}, {"message", mine.message()}};
    const std::string s = dump_json(j);
    msg.assign(s.begin(), s.end());
  }
  uint8_t len_bytes[8] = {};
  uint64_t len = msg.size();
  std::memcpy(len_bytes, &len, 8);
  LEANEMB_RETURN_IF_ERROR(comm->broadcast(std::span<uint8_t>(len_bytes, 8), 0));
  std::memcpy(&len, len_bytes, 8);
  msg.resize(len);
  LEANEMB_RETURN_IF_ERROR(comm->broadcast(std::span<uint8_t>(msg), 0));
  const auto j = parse_json_or_discarded(msg.data(), msg.size());
  if (j.is_discarded() || !j.is_object()) return internal_error("dist: a bad run-directory message from rank 0");
  if (!j.value("ok", false)) {
    if (comm->rank() == 0) return mine;
    return Status(static_cast<StatusCode>(j.value("code", static_cast<int>(StatusCode::kInternal))),
                  "rank 0: " + j.value("message", std::string()));
  }
  return ResumePoint{j.value("dir", std::string()), j.value("sharded", false), j.value("step", int64_t{-1})};
}

}  // namespace leanemb::train
