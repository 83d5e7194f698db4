// _leanemb.Tables: the binding of the table interface (leanemb/tables.h: create_tables +
// EmbeddingTables) that python/leanemb/ (leanemb.torch) is built on. Every option of
// CollectionOptions / TableOptions / MemorySystemOptions is reachable through plain dicts; the
// binding only converts and never asks how rows are stored (docs/python.md).
//
// Zero-copy contract: the array arguments of forward / backward_update / validate / prefetch and
// the output buffers must already be C-contiguous with the exact dtype (int64 ids and offsets,
// float32 weights, outputs and gradients). The binding reads and writes them in place through
// the buffer protocol and raises TypeError for anything else (it never converts silently; the
// Python layer converts, and counts it, before calling).
//
// Errors: a Status from the library raises ValueError (InvalidArgument), IndexError
// (OutOfRange), FileNotFoundError (NotFound), MemoryError (ResourceExhausted), OSError
// (IoError, DataLoss) or RuntimeError (the rest), with the Status message. The GIL is released
// while the engine computes; calls on one object are serialized by a mutex.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/communicator.h"
#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "leanemb/plan.h"
#include "leanemb/run_dir.h"
#include "leanemb/table_checkpoint.h"
#include "leanemb/tables.h"
#include "tables_py.h"

namespace py = pybind11;

namespace leanemb::python {

namespace {

// {category name: {"current_bytes", "peak_bytes"}} of every memory category in m.
py::dict category_dict(const MemoryStats& m) {
  py::dict d;
  for (int c = 0; c < kNumCategories; ++c) {
    const CategoryStats& cs = m.by_category[static_cast<size_t>(c)];
    py::dict e;
    e["current_bytes"] = cs.current_bytes;
    e["peak_bytes"] = cs.peak_bytes;
    d[py::str(std::string(category_name(static_cast<Category>(c))))] = e;
  }
  return d;
}

[[noreturn]] void raise_status(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kOutOfRange: type = PyExc_IndexError; break;
    case StatusCode::kNotFound: type = PyExc_FileNotFoundError; break;
    case StatusCode::kResourceExhausted: type = PyExc_MemoryError; break;
    case StatusCode::kIoError:
    case StatusCode::kDataLoss: type = PyExc_OSError; break;
    default: break;
  }
  PyErr_SetString(type, s.to_string().c_str());
  throw py::error_already_set();
}

void check(const Status& s) {
  if (!s.ok()) raise_status(s);
}

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(r).value();
}

[[noreturn]] void type_error(const std::string& msg) { throw py::type_error(msg); }

// ---- dict options -------------------------------------------------------------------------------

// Reads keys of a dict, remembering which were used, so that unknown keys are an error.
class Opts {
 public:
  Opts(py::dict d, std::string what) : d_(std::move(d)), what_(std::move(what)) {}
  template <typename T>
  T get(const char* key, T def) {
    used_.insert(key);
    if (!d_.contains(key) || d_[key].is_none()) return def;
    try {
      return d_[key].cast<T>();
    } catch (const py::cast_error&) {
      throw py::type_error(what_ + ": option '" + key + "' has the wrong type (" +
                           std::string(py::str(py::type::of(d_[key]))) + ")");
    }
  }
  void finish() const {
    for (auto item : d_) {
      const std::string k = py::str(item.first);
      if (!used_.count(k)) throw py::value_error(what_ + ": unknown option '" + k + "'");
    }
  }

 private:
  py::dict d_;
  std::string what_;
  std::set<std::string> used_;
};

TableOptions parse_table(const py::dict& d, size_t index) {
  Opts o(d, "table " + std::to_string(index));
  TableOptions t;
  t.name = o.get<std::string>("name", "t" + std::to_string(index));
  t.num_rows = o.get<int64_t>("num_rows", 0);
  t.dim = o.get<int64_t>("dim", 0);
  t.dtype = value_or_raise(parse_dtype(o.get<std::string>("dtype", "fp32"), DTypeUse::kRows));
  t.optimizer.kind = value_or_raise(parse_optimizer(o.get<std::string>("optimizer", "sgd")));
  t.optimizer.learning_rate = o.get<float>("learning_rate", 0.01f);
  t.optimizer.eps = o.get<float>("eps", default_eps(t.optimizer.kind));
  t.optimizer.beta1 = o.get<float>("beta1", 0.9f);
  t.optimizer.beta2 = o.get<float>("beta2", 0.999f);
  t.optimizer.weight_decay = o.get<float>("weight_decay", 0.0f);
  t.optimizer.state_dtype = value_or_raise(parse_dtype(o.get<std::string>("state_dtype", "fp32"), DTypeUse::kOptimizerState));
  const std::string init = o.get<std::string>("init", "uniform");
  if (init == "uniform") t.init.kind = InitKind::kUniform;
  else if (init == "normal") t.init.kind = InitKind::kNormal;
  else if (init == "zeros") t.init.kind = InitKind::kZeros;
  else throw py::value_error("table '" + t.name + "': init must be uniform, normal or zeros, got '" + init + "'");
  t.init.bound = o.get<float>("init_bound", 0.0f);
  t.init.mean = o.get<float>("init_mean", 0.0f);
  t.init.std = o.get<float>("init_std", 1.0f);
  t.frozen = o.get<bool>("frozen", false) || !dtype_traits(t.dtype).trainable;
  t.cache.fraction = o.get<double>("cache_fraction", 0.0);
  t.cache.capacity_rows = o.get<int64_t>("cache_rows", 0);
  const std::string policy = o.get<std::string>("cache_policy", "lru");
  if (policy == "lru") t.cache.policy = CachePolicy::kLru;
  else if (policy == "lfu") t.cache.policy = CachePolicy::kLfu;
  else if (policy == "clock") t.cache.policy = CachePolicy::kClock;
  else throw py::value_error("table '" + t.name + "': cache_policy must be lru, lfu or clock, got '" + policy + "'");
  t.cache.store = value_or_raise(parse_store_kind(o.get<std::string>("cache_store", "host")));
  t.cache.store_path = o.get<std::string>("cache_store_path", "");
  t.cache.direct_io = o.get<bool>("cache_direct_io", true);
  const std::string layout = o.get<std::string>("cache_store_layout", "");  // "": the engine's default
  if (!layout.empty()) t.cache.store_layout = value_or_raise(parse_file_store_layout(layout));
  t.cache.prefetch_nice = o.get<int>("cache_prefetch_nice", 19);
  t.dynamic.enabled = o.get<bool>("dynamic", false);
  t.dynamic.min_count = o.get<uint32_t>("dynamic_min_count", 1);
  t.dynamic.eviction = value_or_raise(parse_eviction_policy(o.get<std::string>("dynamic_eviction", "age")));
  t.dynamic.max_age_steps = o.get<int64_t>("dynamic_max_age_steps", 0);
  t.dynamic.bloom_counters = o.get<uint64_t>("dynamic_bloom_counters", uint64_t{1} << 20);
  t.dynamic.bloom_hashes = o.get<uint32_t>("dynamic_bloom_hashes", 4);
  t.dynamic.partitions = o.get<uint32_t>("dynamic_partitions", 1);
  o.finish();
  return t;
}

FeatureOptions parse_feature(const py::dict& d, size_t index) {
  Opts o(d, "feature " + std::to_string(index));
  FeatureOptions f;
  f.name = o.get<std::string>("name", "f" + std::to_string(index));
  f.table = o.get<int>("table", 0);
  f.pooling = value_or_raise(parse_pooling(o.get<std::string>("pooling", "sum")));
  o.finish();
  return f;
}

// ---- arrays -------------------------------------------------------------------------------------

template <typename T>
const char* dtype_word() {
  if constexpr (std::is_same_v<T, int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else return "uint8";
}

// A C-contiguous array of exactly T, read in place (no conversion).
template <typename T>
std::span<const T> in_span(const py::handle& obj, const std::string& name) {
  if (!py::isinstance<py::array>(obj)) type_error(name + " must be a numpy array (or a CPU tensor's .numpy())");
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>()))
    type_error(name + " must hold " + dtype_word<T>() + ", got " + std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style)) type_error(name + " must be C-contiguous");
  return std::span<const T>(static_cast<const T*>(a.data()), static_cast<size_t>(a.size()));
}

template <typename T>
std::span<T> out_span(const py::handle& obj, const std::string& name) {
  std::span<const T> s = in_span<T>(obj, name);
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.writeable()) type_error(name + " must be writeable");
  return std::span<T>(const_cast<T*>(s.data()), s.size());
}

// A batch borrowed from Python lists (one entry per feature, in feature order).
SparseBatch make_batch(const EmbeddingTables& t, int64_t batch_size, const py::list& ids, const py::list& offsets,
                       const py::list& weights) {
  const size_t nf = static_cast<size_t>(t.num_features());
  if (ids.size() != nf || offsets.size() != nf || weights.size() != nf)
    throw py::value_error("batch: expected one ids, offsets and weights entry per feature (" + std::to_string(nf) +
                          "), got " + std::to_string(ids.size()) + ", " + std::to_string(offsets.size()) + ", " +
                          std::to_string(weights.size()));
  SparseBatch b;
  b.batch_size = batch_size;
  for (size_t f = 0; f < nf; ++f) {
    const std::string fname = t.options().features[f].name;
    FeatureInput in;
    in.ids = in_span<int64_t>(ids[f], "ids of feature '" + fname + "'");
    in.offsets = in_span<int64_t>(offsets[f], "offsets of feature '" + fname + "'");
    if (!weights[f].is_none()) in.weights = in_span<float>(weights[f], "weights of feature '" + fname + "'");
    b.features.push_back(in);
  }
  return b;
}

py::dict stats_dict(const MemoryStats& m) {
  py::dict d;
  d["tier"] = std::string(tier_name(m.tier));
  d["categories"] = category_dict(m);
  d["current_bytes"] = m.current_bytes;
  d["peak_bytes"] = m.peak_bytes;
  d["budget_bytes"] = m.budget_bytes;
  return d;
}

// ---- MPI ----------------------------------------------------------------------------------------

// MPI's lifetime in a Python process: mpi_init() initializes it once (dist::MpiRuntime); at
// interpreter exit (atexit) every sharded Tables still alive is closed (its collection and
// communicator destroyed) and then MPI is finalized, so that mpirun sees a clean exit whether
// or not Python ran the objects' destructors.
class PyTables;
std::unique_ptr<dist::MpiRuntime>& mpi_runtime() {
  static std::unique_ptr<dist::MpiRuntime> rt;
  return rt;
}
std::set<PyTables*>& live_sharded() {
  static std::set<PyTables*> s;
  return s;
}

py::dict mpi_init() {
  auto& rt = mpi_runtime();
  if (!rt) rt = value_or_raise(dist::MpiRuntime::init(nullptr, nullptr));
  py::dict d;
  d["rank"] = rt->world_rank();
  d["world_size"] = rt->world_size();
  d["owns_mpi"] = rt->owns_mpi();
  return d;
}

void mpi_finalize();  // below: closes the live sharded tables first

// ---- Tables -------------------------------------------------------------------------------------

class PyTables {
 public:
  PyTables(const py::list& tables, const py::list& features, const py::dict& collection,
           const py::dict& distribution) {
    CollectionOptions o;
    for (size_t i = 0; i < tables.size(); ++i) o.tables.push_back(parse_table(tables[i].cast<py::dict>(), i));
    for (size_t i = 0; i < features.size(); ++i) o.features.push_back(parse_feature(features[i].cast<py::dict>(), i));
    Opts c(collection, "collection");
    const std::string bc = c.get<std::string>("bounds_check", "error");
    if (bc == "error") o.bounds_check = BoundsCheckMode::kError;
    else if (bc == "skip") o.bounds_check = BoundsCheckMode::kSkip;
    else throw py::value_error("bounds_check must be 'error' or 'skip', got '" + bc + "'");
    o.seed = c.get<uint64_t>("seed", 0);
    o.num_threads = c.get<int>("num_threads", 0);
    if (o.num_threads < 0) throw py::value_error("num_threads must be >= 0 (0 = OpenMP's default)");
    o.use_reference_kernels = c.get<bool>("use_reference_kernels", false);
    MemorySystemOptions mo;
    mo.device_budget_bytes = c.get<size_t>("device_budget_bytes", 0);
    mo.host_budget_bytes = c.get<size_t>("host_budget_bytes", 0);
    mo.placement = value_or_raise(parse_placement(c.get<std::string>("placement", "")));
    c.finish();
    DistributionOptions dist;
    Opts d(distribution, "distribution");
    const std::string comm = d.get<std::string>("comm", "");
    dist.sharding = value_or_raise(parse_sharding_kind(d.get<std::string>("sharding", "row_modulo")));
    const std::string assign = d.get<std::string>("table_assign", "round_robin");
    if (assign == "round_robin") dist.table_assign = TableAssign::kRoundRobin;
    else if (assign == "by_size") dist.table_assign = TableAssign::kBySize;
    else throw py::value_error("table_assign must be 'round_robin' or 'by_size', got '" + assign + "'");
    dist.forward_payload = value_or_raise(parse_dtype(d.get<std::string>("forward_payload", "fp32"), DTypeUse::kPayload));
    dist.backward_payload = value_or_raise(parse_dtype(d.get<std::string>("backward_payload", "fp32"), DTypeUse::kPayload));
    dist.wide_ids = d.get<bool>("wide_ids", false);
    dist::CommOptions co;
    co.timeout_ms = d.get<int64_t>("timeout_ms", 60000);
    d.finish();
    if (!comm.empty() && comm != "mpi") throw py::value_error("distribution comm must be 'mpi' (or absent), got '" + comm + "'");
    mem_ = value_or_raise(MemorySystem::create(mo));
    if (comm == "mpi") {
      mpi_init();
      std::optional<Result<std::unique_ptr<dist::Communicator>>> c;
      {
        py::gil_scoped_release nogil;
        c.emplace(dist::make_communicator("mpi", co));
      }
      comm_ = value_or_raise(std::move(*c));
      dist.comm = comm_.get();
    }
    std::optional<Result<std::unique_ptr<EmbeddingTables>>> r;
    {
      py::gil_scoped_release nogil;
      r.emplace(create_tables(o, mem_.get(), dist));
    }
    t_ = value_or_raise(std::move(*r));
    if (comm_) live_sharded().insert(this);
  }

  ~PyTables() { close(); }

  // Destroys the collection, then its communicator and memory system (idempotent); later calls
  // raise RuntimeError.
  void close() {
    live_sharded().erase(this);
    owned_.clear();  // releases the output directories' locks
    t_.reset();  // before the communicator and the memory system it uses
    comm_.reset();
    mem_.reset();
  }

  int rank() const { return T().rank(); }
  int world_size() const { return T().world_size(); }

  int num_tables() const { return T().num_tables(); }
  int num_features() const { return T().num_features(); }
  int64_t pooled_dim() const { return T().pooled_dim(); }
  int64_t pooled_offset(int f) const {
    check_feature(f);
    return T().pooled_offset(f);
  }
  int64_t step() const { return T().step(); }
  void set_step(int64_t s) {
    if (s < 0) throw py::value_error("step must be >= 0");
    std::lock_guard<std::mutex> lock(mu_);
    T().set_step(s);
  }

  py::dict layout(int table) const {
    check_table(table);
    const RowLayout& l = T().layout(table);
    py::dict d;
    d["dim"] = l.dim;
    d["dtype"] = std::string(dtype_name(l.weight_dtype));
    d["optimizer"] = std::string(optimizer_name(l.optimizer.kind));
    d["state_dtype"] = std::string(dtype_name(l.optimizer.state_dtype));
    d["learning_rate"] = l.optimizer.learning_rate;
    d["weight_bytes"] = l.weight_bytes;
    d["state_bytes"] = l.state_bytes;
    d["stride_bytes"] = l.stride_bytes;
    d["state_floats_per_row"] = T().state_floats_per_row(table);
    d["num_rows"] = T().options().tables[static_cast<size_t>(table)].num_rows;
    d["frozen"] = T().options().tables[static_cast<size_t>(table)].frozen;
    d["dynamic"] = T().options().tables[static_cast<size_t>(table)].dynamic.enabled;
    d["cached"] = T().options().tables[static_cast<size_t>(table)].cache.enabled();
    return d;
  }

  void set_learning_rate(int table, float lr) {
    std::lock_guard<std::mutex> lock(mu_);
    check(T().set_learning_rate(table, lr));
  }

  void validate(int64_t batch_size, const py::list& ids, const py::list& offsets, const py::list& weights) const {
    const SparseBatch b = make_batch(T(), batch_size, ids, offsets, weights);
    check(locked_without_gil([&] { return T().validate(b); }));
  }

  // mode: "train" (a backward_update of the batch may follow) or "eval" (lookup only:
  // ForwardMode::kEval, dynamic tables admit and count nothing).
  void forward(int64_t batch_size, const py::list& ids, const py::list& offsets, const py::list& weights,
               const py::object& pooled_out, const py::list& seq_out, const std::string& mode) {
    if (mode != "train" && mode != "eval") check(invalid_argument("forward: mode must be 'train' or 'eval', got '" + mode + "'"));
    const ForwardMode fm = mode == "eval" ? ForwardMode::kEval : ForwardMode::kTrain;
    const SparseBatch b = make_batch(T(), batch_size, ids, offsets, weights);
    std::span<float> pooled;
    if (!pooled_out.is_none()) pooled = out_span<float>(pooled_out, "pooled output");
    std::vector<std::span<float>> seq;
    for (size_t i = 0; i < seq_out.size(); ++i) seq.push_back(out_span<float>(seq_out[i], "sequence output " + std::to_string(i)));
    check(locked_without_gil([&] { return T().forward(b, pooled, seq, fm); }));
  }

  py::dict backward_update(int64_t batch_size, const py::list& ids, const py::list& offsets, const py::list& weights,
                           const py::object& grad_pooled, const py::list& grad_seq, float grad_multiplier,
                           bool check_finite, float max_abs_grad) {
    const SparseBatch b = make_batch(T(), batch_size, ids, offsets, weights);
    std::span<const float> pooled;
    if (!grad_pooled.is_none()) pooled = in_span<float>(grad_pooled, "pooled gradient");
    std::vector<std::span<const float>> seq;
    for (size_t i = 0; i < grad_seq.size(); ++i) seq.push_back(in_span<float>(grad_seq[i], "sequence gradient " + std::to_string(i)));
    UpdateOptions u;
    u.grad_multiplier = grad_multiplier;
    u.check_finite = check_finite;
    u.max_abs_grad = max_abs_grad;
    Result<UpdateReport> r = locked_without_gil([&] { return T().backward_update(b, pooled, seq, u); });
    const UpdateReport rep = value_or_raise(std::move(r));
    py::dict d;
    d["skipped_nonfinite"] = rep.skipped_nonfinite;
    d["skipped_huge_grad"] = rep.skipped_huge_grad;
    d["unique_rows"] = rep.unique_rows;
    d["lookups"] = rep.lookups;
    return d;
  }

  void prefetch(int64_t batch_size, const py::list& ids, const py::list& offsets, const py::list& weights) {
    const SparseBatch b = make_batch(T(), batch_size, ids, offsets, weights);
    check(locked_without_gil([&] { return T().prefetch(b); }));
  }

  void flush() {
    check(locked_without_gil([&] { return T().flush(); }));
  }

  // Rows [begin, begin + count) as float32 [count, dim] (dequantized).
  py::array_t<float> read_rows(int table, int64_t begin, int64_t count) const {
    check_table(table);
    return read_array<float>(count, T().layout(table).dim,
                             [&](std::span<float> o) { return T().read_rows(table, begin, count, o); });
  }

  void write_rows(int table, int64_t begin, const py::object& rows) {
    check_table(table);
    std::span<const float> in = in_span<float>(rows, "rows");
    const int64_t dim = T().layout(table).dim;
    if (in.size() % static_cast<size_t>(dim) != 0)
      throw py::value_error("rows: size " + std::to_string(in.size()) + " is not a multiple of dim " + std::to_string(dim));
    check(locked_without_gil([&] { return T().write_rows(table, begin, static_cast<int64_t>(in.size()) / dim, in); }));
  }

  py::array_t<float> read_state(int table, int64_t begin, int64_t count) const {
    check_table(table);
    const int64_t k = T().state_floats_per_row(table);
    if (k == 0 || count == 0) return py::array_t<float>({count, k});
    return read_array<float>(count, k, [&](std::span<float> o) { return T().read_state(table, begin, count, o); });
  }

  // State a table keeps outside its rows (SM3's column accumulators): [dim] fp32, or empty.
  py::array_t<float> column_state(int table) const {
    check_table(table);
    const std::span<const float> c = std::as_const(*T().local_shard().local).column_state(table);
    py::array_t<float> a(static_cast<py::ssize_t>(c.size()));
    if (!c.empty()) std::copy(c.begin(), c.end(), a.mutable_data());
    return a;
  }
  void set_column_state(int table, const py::array_t<float, py::array::c_style | py::array::forcecast>& in) {
    check_table(table);
    check(locked_without_gil([&]() -> Status {
      const std::span<float> c = T().local_shard().local->column_state(table);
      if (static_cast<size_t>(in.size()) != c.size())
        return invalid_argument("column state of table " + std::to_string(table) + ": " + std::to_string(in.size()) +
                                " values, expected " + std::to_string(c.size()));
      std::copy(in.data(), in.data() + in.size(), c.begin());
      return Status();
    }));
  }

  py::array_t<uint8_t> read_raw_rows(int table, int64_t begin, int64_t count) const {
    check_table(table);
    return read_array<uint8_t>(count, static_cast<int64_t>(T().layout(table).stride_bytes),
                               [&](std::span<uint8_t> o) { return T().read_raw_rows(table, begin, count, o); });
  }

  void write_raw_rows(int table, int64_t begin, const py::object& rows) {
    check_table(table);
    std::span<const uint8_t> in = in_span<uint8_t>(rows, "raw rows");
    const size_t stride = T().layout(table).stride_bytes;
    if (in.size() % stride != 0)
      throw py::value_error("raw rows: size " + std::to_string(in.size()) + " is not a multiple of the row stride " +
                            std::to_string(stride));
    check(locked_without_gil([&] { return T().write_raw_rows(table, begin, static_cast<int64_t>(in.size() / stride), in); }));
  }

  // {"device": stats, "host": stats} of this collection's memory system.
  py::dict memory_stats() const {
    const auto st = M().stats();
    py::dict d;
    d["device"] = stats_dict(st[0]);
    d["host"] = stats_dict(st[1]);
    return d;
  }
  std::string memory_summary() const { return M().memory_summary(); }
  std::string placement() const { return M().placement().to_string(); }

  py::dict cache_stats(int table) const {
    const RowCacheStats c = value_or_raise(T().cache_stats(table));
    py::dict d;
    d["capacity_rows"] = c.capacity_rows;
    d["resident_rows"] = c.resident_rows;
    d["lookups"] = c.lookups;
    d["hits"] = c.hits;
    d["misses"] = c.misses;
    d["prefetched_rows"] = c.prefetched_rows;
    d["prefetches_taken"] = c.prefetches_taken;
    d["evictions"] = c.evictions;
    d["writebacks"] = c.writebacks;
    d["bytes_read"] = c.bytes_read;
    d["bytes_written"] = c.bytes_written;
    d["hit_rate"] = c.hit_rate();
    d["index_bytes"] = c.index_bytes;
    return d;
  }

  py::dict dynamic_stats(int table) const {
    const DynamicTableStats s = value_or_raise(T().dynamic_stats(table));
    py::dict d;
    d["admitted"] = s.admitted;
    d["readmitted"] = s.readmitted;
    d["rejected_min_count"] = s.rejected_min_count;
    d["rejected_capacity"] = s.rejected_capacity;
    d["evicted"] = s.evicted;
    d["expired"] = s.expired;
    d["live_rows"] = s.live_rows;
    d["held_bytes"] = s.held_bytes;
    return d;
  }

  int64_t dynamic_row(int table, int64_t raw_id) const { return value_or_raise(T().dynamic_row(table, raw_id)); }

  // Crash-safe checkpoint <out_dir>/checkpoints/step-<step> (EmbeddingTables::save).
  // writers_own_their_dirs: the first save into out_dir opens it as a train::RunDir (its lock,
  // held until close(); a directory holding checkpoints, shards/ or metrics.jsonl that this
  // object did not write is refused unless `overwrite`, which moves them aside) and later saves
  // into it write on: the commit's cleanup then only ever removes this object's checkpoints.
  // Sharded: collective (rank 0 holds the lock; every rank learns its verdict).
  // incremental: only the rows changed since the previous save or load (IncrementalOptions; a
  // sharded collection: each rank's shard chain); the first such save starts tracking.
  // link_store_rows: tables over a log-layout file store are kept by hard links of the store's
  // files (IncrementalOptions::link_store_rows).
  std::string save(const std::string& out_dir, int64_t step, int keep_last, bool overwrite, bool incremental, int full_every,
                   double max_delta_fraction, bool link_store_rows) {
    TablesSaveOptions so;
    so.keep_last = keep_last;
    so.incremental = {incremental, full_every, max_delta_fraction, link_store_rows};
    Result<TablesSaveInfo> r = locked_without_gil([&]() -> Result<TablesSaveInfo> {
      LEANEMB_RETURN_IF_ERROR(own_dir(out_dir, overwrite));
      EmbeddingCollection* local = T().local_shard().local;  // a sharded collection's: this rank's rows
      if (incremental && local != nullptr) LEANEMB_RETURN_IF_ERROR(local->track_changes());
      return T().save(out_dir, step, {}, so);
    });
    return value_or_raise(std::move(r)).path;
  }

  // Loads checkpoint directory `dir` (a step-<N> directory); sets the step counter to
  // `collection_step` (>= 0) and returns the step set.
  int64_t load(const std::string& dir, int64_t collection_step) {
    TablesLoadOptions lo;
    lo.collection_step = collection_step;
    Result<int64_t> r = locked_without_gil([&] { return T().load(dir, lo); });
    return value_or_raise(std::move(r));
  }

  // The embedding digest (32 hex digits; docs/dist.md "Digest"): equal for the same rows, state
  // and step whatever the world size and sharding (dist::tables_digest; sharded: collective).
  std::string digest() {
    return value_or_raise(locked_without_gil([&] { return dist::tables_digest(T()); }));
  }

  void release_step_buffers() {
    std::lock_guard<std::mutex> lock(mu_);
    T().release_step_buffers();
  }

 private:
  // fn() with the GIL released (other Python threads run meanwhile) and mu_ held (one call into
  // the collection at a time); its result. A collective call may wait on the other ranks here.
  template <typename Fn>
  auto locked_without_gil(Fn&& fn) const -> decltype(fn()) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return fn();
  }

  // A new [count, per_row] array filled by read(its elements), called as locked_without_gil.
  template <typename E, typename Read>
  py::array_t<E> read_array(int64_t count, int64_t per_row, Read&& read) const {
    py::array_t<E> out({count, per_row});
    std::span<E> o(out.mutable_data(), static_cast<size_t>(count * per_row));
    check(locked_without_gil([&] { return read(o); }));
    return out;
  }

  void check_table(int t) const {
    if (t < 0 || t >= T().num_tables())
      throw py::index_error("table " + std::to_string(t) + " out of range [0, " + std::to_string(T().num_tables()) + ")");
  }
  void check_feature(int f) const {
    if (f < 0 || f >= T().num_features())
      throw py::index_error("feature " + std::to_string(f) + " out of range [0, " + std::to_string(T().num_features()) + ")");
  }

  MemorySystem& M() const {
    T();
    return *mem_;
  }
  // The collection; RuntimeError once closed.
  EmbeddingTables& T() const {
    if (!t_) throw std::runtime_error("leanemb Tables: closed (MPI was finalized at exit, or close() was called)");
    return *t_;
  }

  // Claims out_dir for save() once (see there). Called with mu_ held.
  Status own_dir(const std::string& out_dir, bool overwrite) {
    std::error_code ec;
    std::string key = std::filesystem::weakly_canonical(out_dir, ec).string();
    if (ec) key = out_dir;
    if (owned_.count(key)) return Status();
    train::RunDirOptions ro;
    ro.out_dir = out_dir;
    ro.overwrite = overwrite;
    ro.writer = "module.save()";
    ro.overwrite_flag = "overwrite=True";
    std::unique_ptr<train::RunDir> held;
    LEANEMB_RETURN_IF_ERROR(train::open_run_dir(ro, comm_.get(), &held).status());
    owned_[key] = std::move(held);  // null on ranks other than 0: the claim is still this object's
    return Status();
  }

  std::unique_ptr<MemorySystem> mem_;
  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<EmbeddingTables> t_;
  // The directories save() owns (canonical path -> its RunDir, holding the lock).
  std::map<std::string, std::unique_ptr<train::RunDir>> owned_;
  mutable std::mutex mu_;
};

void mpi_finalize() {
  const std::set<PyTables*> live = live_sharded();
  for (PyTables* t : live) t->close();
  mpi_runtime().reset();
}

// ---- checkpoints on disk ------------------------------------------------------------------------

py::dict checkpoint_verify(const std::string& dir) {
  const ckpt::VerifyReport r = value_or_raise(dist::verify_tables_checkpoint(dir));  // every shard too
  py::dict d;
  d["step"] = r.step;
  d["num_entries"] = r.num_entries;
  d["entry_bytes"] = r.entry_bytes;
  d["num_files"] = r.num_files;
  d["num_blocks"] = r.num_blocks;
  d["num_shards"] = r.num_shards;
  d["format_version"] = r.format_version;
  d["checkpoint_id"] = r.checkpoint_id;
  return d;
}

std::string checkpoint_digest(const std::string& dir) { return value_or_raise(ckpt::digest(dir)); }

int64_t checkpoint_step(const std::string& dir) {
  auto r = value_or_raise(ckpt::CheckpointReader::open(dir));
  return r->step();
}

// The newest complete checkpoint directory under <out_dir>/checkpoints.
std::string latest_checkpoint(const std::string& out_dir) {
  return value_or_raise(dist::find_latest_tables_checkpoint(out_dir)).ref.path;
}

// ---- planner ------------------------------------------------------------------------------------

py::dict tier_dict(const plan::TierPrediction& t) {
  py::dict d;
  py::dict cats;
  for (int c = 0; c < kNumCategories; ++c)
    cats[py::str(std::string(category_name(static_cast<Category>(c))))] = t.peak[static_cast<size_t>(c)];
  d["peak_by_category"] = cats;
  d["peak_bytes"] = t.peak_bytes;
  d["budget_bytes"] = t.budget_bytes;
  d["peak_phase"] = t.peak_phase;
  return d;
}

// The memory model's prediction for an embedding-only workload (plan::predict_tables_memory: the
// tables and their lookups; the model downstream is not counted).
py::dict predict_memory(const py::list& tables, int64_t batch_size, const py::dict& options) {
  plan::TablesWorkload w;
  w.batch_size = batch_size;
  for (size_t i = 0; i < tables.size(); ++i) {
    Opts o(tables[i].cast<py::dict>(), "plan table " + std::to_string(i));
    plan::TableSpec s;
    std::string default_name = "t";  // (not "t" + to_string(i): a GCC 12 -Wrestrict false positive at -O3)
    default_name += std::to_string(i);
    s.name = o.get<std::string>("name", std::move(default_name));
    s.num_rows = o.get<int64_t>("num_rows", 0);
    s.dim = o.get<int64_t>("dim", 0);
    s.pooling = value_or_raise(parse_pooling(o.get<std::string>("pooling", "sum")));
    s.max_ids_per_sample = o.get<int64_t>("max_ids_per_sample", 1);
    s.mean_ids_per_sample = o.get<double>("mean_ids_per_sample", static_cast<double>(s.max_ids_per_sample));
    s.expected_unique_rows = o.get<double>("expected_unique_rows", -1.0);
    s.zipf = o.get<double>("zipf", 0.0);
    o.finish();
    w.tables.push_back(s);
  }
  Opts o(options, "plan options");
  w.row_dtype = value_or_raise(parse_dtype(o.get<std::string>("dtype", "fp32"), DTypeUse::kRows));
  w.row_optimizer.kind = value_or_raise(parse_optimizer(o.get<std::string>("optimizer", "sgd")));
  w.row_optimizer.state_dtype = value_or_raise(parse_dtype(o.get<std::string>("state_dtype", "fp32"), DTypeUse::kOptimizerState));
  w.placement = value_or_raise(parse_placement(o.get<std::string>("placement", "")));
  w.cache_fraction = o.get<double>("cache_fraction", 1.0);
  w.num_threads = o.get<int>("num_threads", 0);
  const std::string estimate = o.get<std::string>("estimate", "expected");
  o.finish();
  plan::Estimate e = plan::Estimate::kExpected;
  if (estimate == "worst_case") e = plan::Estimate::kWorstCase;
  else if (estimate != "expected") throw py::value_error("estimate must be 'expected' or 'worst_case'");
  const plan::Prediction p = value_or_raise(plan::predict_tables_memory(w, e));
  py::dict d;
  d["device"] = tier_dict(p.device());
  d["host"] = tier_dict(p.host());
  d["table_bytes"] = p.table_bytes;
  d["ids_per_step"] = p.ids_per_step;
  d["unique_per_step"] = p.unique_per_step;
  d["host_link_bytes_per_step"] = p.host_link_bytes_per_step;
  return d;
}

}  // namespace

void bind_tables(py::module_& m) {
  py::class_<PyTables>(m, "Tables", "The table interface (leanemb/tables.h) over plain option dicts.")
      .def(py::init<const py::list&, const py::list&, const py::dict&, const py::dict&>(), py::arg("tables"),
           py::arg("features"), py::arg("collection") = py::dict(), py::arg("distribution") = py::dict())
      .def_property_readonly("rank", &PyTables::rank)
      .def_property_readonly("world_size", &PyTables::world_size)
      .def("close", &PyTables::close)
      .def_property_readonly("num_tables", &PyTables::num_tables)
      .def_property_readonly("num_features", &PyTables::num_features)
      .def_property_readonly("pooled_dim", &PyTables::pooled_dim)
      .def_property_readonly("step", &PyTables::step)
      .def("set_step", &PyTables::set_step, py::arg("step"))
      .def("pooled_offset", &PyTables::pooled_offset, py::arg("feature"))
      .def("layout", &PyTables::layout, py::arg("table"))
      .def("set_learning_rate", &PyTables::set_learning_rate, py::arg("table"), py::arg("lr"))
      .def("validate", &PyTables::validate, py::arg("batch_size"), py::arg("ids"), py::arg("offsets"), py::arg("weights"))
      .def("forward", &PyTables::forward, py::arg("batch_size"), py::arg("ids"), py::arg("offsets"), py::arg("weights"),
           py::arg("pooled_out"), py::arg("seq_out"), py::arg("mode") = "train")
      .def("backward_update", &PyTables::backward_update, py::arg("batch_size"), py::arg("ids"), py::arg("offsets"),
           py::arg("weights"), py::arg("grad_pooled"), py::arg("grad_seq"), py::arg("grad_multiplier") = 1.0f,
           py::arg("check_finite") = true, py::arg("max_abs_grad") = UpdateOptions{}.max_abs_grad)
      .def("prefetch", &PyTables::prefetch, py::arg("batch_size"), py::arg("ids"), py::arg("offsets"), py::arg("weights"))
      .def("flush", &PyTables::flush)
      .def("read_rows", &PyTables::read_rows, py::arg("table"), py::arg("begin"), py::arg("count"))
      .def("write_rows", &PyTables::write_rows, py::arg("table"), py::arg("begin"), py::arg("rows"))
      .def("read_state", &PyTables::read_state, py::arg("table"), py::arg("begin"), py::arg("count"))
      .def("column_state", &PyTables::column_state, py::arg("table"))
      .def("set_column_state", &PyTables::set_column_state, py::arg("table"), py::arg("values"))
      .def("read_raw_rows", &PyTables::read_raw_rows, py::arg("table"), py::arg("begin"), py::arg("count"))
      .def("write_raw_rows", &PyTables::write_raw_rows, py::arg("table"), py::arg("begin"), py::arg("rows"))
      .def("memory_stats", &PyTables::memory_stats)
      .def("memory_summary", &PyTables::memory_summary)
      .def("placement", &PyTables::placement)
      .def("cache_stats", &PyTables::cache_stats, py::arg("table"))
      .def("dynamic_stats", &PyTables::dynamic_stats, py::arg("table"))
      .def("dynamic_row", &PyTables::dynamic_row, py::arg("table"), py::arg("raw_id"))
      .def("save", &PyTables::save, py::arg("out_dir"), py::arg("step"), py::arg("keep_last") = 3, py::arg("overwrite") = false,
           py::arg("incremental") = false, py::arg("full_every") = 8, py::arg("max_delta_fraction") = 0.5,
           py::arg("link_store_rows") = true)
      .def("load", &PyTables::load, py::arg("dir"), py::arg("collection_step") = -1)
      .def("digest", &PyTables::digest)
      .def("release_step_buffers", &PyTables::release_step_buffers);
  m.def("checkpoint_verify", &checkpoint_verify, py::arg("dir"));
  m.def("checkpoint_digest", &checkpoint_digest, py::arg("dir"));
  m.def("checkpoint_step", &checkpoint_step, py::arg("dir"));
  m.def("latest_checkpoint", &latest_checkpoint, py::arg("out_dir"));
  m.def("mpi_available", &dist::mpi_available);
  m.def("mpi_init", &mpi_init, "Initializes MPI once (MPI_Init_thread unless already initialized): {rank, world_size, owns_mpi}.");
  m.def("mpi_finalize", &mpi_finalize, "Closes the live sharded Tables, then finalizes MPI (registered with atexit).");
  py::module_::import("atexit").attr("register")(py::cpp_function(&mpi_finalize));
  m.def("predict_memory", &predict_memory, py::arg("tables"), py::arg("batch_size"), py::arg("options") = py::dict());
}

}  // namespace leanemb::python
