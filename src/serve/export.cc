// `leanemb export` (see export.h).
#include "serve/export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "leanemb/json.h"

#include "data/reader.h"
#include "dist/sharded_checkpoint.h"
#include "table/pruned_rows.h"
#include "ctr/ctr_serving.h"
#include "serve/task_registry.h"
#include "leanemb/run_dir.h"
#include "leanemb/dtype.h"

namespace leanemb::serve {

using nlohmann::json;

namespace {

constexpr int64_t kChunkRows = 4096;

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

Result<FilePtr> create_file(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) return io_error("cannot create '" + path + "'");
  return f;
}

Status close_file(FilePtr f, const std::string& path) {
  const bool bad = std::ferror(f.get()) != 0;
  if (std::fclose(f.release()) != 0 || bad) return io_error("cannot write '" + path + "' (disk full?)");
  return Status();
}

Status write_npy(const std::string& path, std::span<const int64_t> shape, std::span<const float> values) {
  LEANEMB_ASSIGN_OR_RETURN(FilePtr f, create_file(path));
  LEANEMB_RETURN_IF_ERROR(write_npy_header(f.get(), shape));
  std::fwrite(values.data(), sizeof(float), values.size(), f.get());
  return close_file(std::move(f), path);
}

// Rows of table t (weights, or state) streamed into an .npy file, kChunkRows at a time.
Status write_table_npy(const EmbeddingTables& tables, int t, bool state, const std::string& path, int64_t* cols) {
  const int64_t rows = tables.options().tables[static_cast<size_t>(t)].num_rows;
  const int64_t w = state ? tables.state_floats_per_row(t) : tables.layout(t).dim;
  *cols = w;
  LEANEMB_ASSIGN_OR_RETURN(FilePtr f, create_file(path));
  const int64_t shape[2] = {rows, w};
  LEANEMB_RETURN_IF_ERROR(write_npy_header(f.get(), shape));
  std::vector<float> buf;
  for (int64_t r = 0; r < rows; r += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r);
    buf.resize(static_cast<size_t>(n * w));
    if (w > 0) LEANEMB_RETURN_IF_ERROR(state ? tables.read_state(t, r, n, buf) : tables.read_rows(t, r, n, buf));
    std::fwrite(buf.data(), sizeof(float), buf.size(), f.get());
  }
  return close_file(std::move(f), path);
}

// "<name>.<i>.weight" [out * in] with "<name>.<i>.bias" [out]: shape [out, in]; else [n].
std::vector<int64_t> dense_shape(const nn::NamedTensor& t, const std::vector<nn::NamedTensor>& all) {
  const auto n = static_cast<int64_t>(t.values.size());
  const std::string suffix = ".weight";
  if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string bias = t.name.substr(0, t.name.size() - suffix.size()) + ".bias";
    for (const auto& b : all)
      if (b.name == bias && !b.values.empty() && n % static_cast<int64_t>(b.values.size()) == 0)
        return {static_cast<int64_t>(b.values.size()), n / static_cast<int64_t>(b.values.size())};
  }
  return {n};
}

Status export_dense(const std::vector<nn::NamedTensor>& params, const std::vector<nn::NamedTensor>& state, bool with_state,
                    const std::string& dir, json* manifest) {
  json list = json::array();
  for (const auto& t : params) {
    const std::vector<int64_t> shape = dense_shape(t, params);
    const std::string file = "dense/" + t.name + ".npy";
    LEANEMB_RETURN_IF_ERROR(write_npy(dir + "/" + file, shape, t.values));
    list.push_back({{"name", t.name}, {"file", file}, {"shape", shape}, {"dtype", "float32"}});
  }
  if (with_state) {
    for (const auto& t : state) {
      const std::string file = "dense/" + t.name + ".opt.npy";
      const int64_t shape[1] = {static_cast<int64_t>(t.values.size())};
      LEANEMB_RETURN_IF_ERROR(write_npy(dir + "/" + file, shape, t.values));
      list.push_back({{"name", t.name}, {"file", file}, {"shape", {shape[0]}}, {"dtype", "float32"}, {"optimizer_state", true}});
    }
  }
  (*manifest)["dense"] = list;
  return Status();
}

Status export_tables(const EmbeddingTables& tables, bool with_state, const std::string& dir, json* manifest) {
  json list = json::array();
  for (int t = 0; t < tables.num_tables(); ++t) {
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    const std::string file = "tables/" + to.name + ".npy";
    int64_t cols = 0;
    LEANEMB_RETURN_IF_ERROR(write_table_npy(tables, t, false, dir + "/" + file, &cols));
    json e = {{"name", to.name},
              {"file", file},
              {"shape", {to.num_rows, cols}},
              {"dtype", "float32"},
              {"trained_dtype", std::string(dtype_name(to.dtype))},
              {"optimizer", std::string(optimizer_name(to.optimizer.kind))},
              {"dynamic", to.dynamic.enabled}};
    if (with_state) {
      const std::string sfile = "tables/" + to.name + ".state.npy";
      LEANEMB_RETURN_IF_ERROR(write_table_npy(tables, t, true, dir + "/" + sfile, &cols));
      e["state_file"] = sfile;
      e["state_shape"] = {to.num_rows, cols};
    }
    list.push_back(e);
  }
  (*manifest)["tables"] = list;
  return Status();
}

Status make_dirs(const std::string& dir) {
  std::error_code ec;
  for (const char* sub : {"", "/tables", "/dense"}) {
    std::filesystem::create_directories(dir + sub, ec);
    if (ec) return io_error("cannot create '" + dir + sub + "': " + ec.message());
  }
  return Status();
}

// Copies every row of `from` into `to` (same tables and shapes; `to` rounds them to its dtype).
// With `kept` (one PrunedRows per table), table t of `to` gets only the rows kept[t] lists, in
// order.
Status copy_rows(const EmbeddingTables& from, EmbeddingTables& to, const std::vector<PrunedRows>& kept) {
  std::vector<float> buf, out;
  for (int t = 0; t < from.num_tables(); ++t) {
    const int64_t rows = from.options().tables[static_cast<size_t>(t)].num_rows, dim = from.layout(t).dim;
    const std::vector<int64_t>* k = kept.empty() ? nullptr : &kept[static_cast<size_t>(t)].kept();
    size_t next = 0;  // the next kept row to write (pruned tables)
    for (int64_t r = 0; r < rows; r += kChunkRows) {
      const int64_t n = std::min(kChunkRows, rows - r);
      if (k != nullptr && (next == k->size() || (*k)[next] >= r + n)) continue;  // nothing kept here
      buf.resize(static_cast<size_t>(n * dim));
      LEANEMB_RETURN_IF_ERROR(from.read_rows(t, r, n, buf));
      if (k == nullptr) {
        LEANEMB_RETURN_IF_ERROR(to.write_rows(t, r, n, buf));
        continue;
      }
      const size_t first = next;
      out.clear();
      for (; next < k->size() && (*k)[next] < r + n; ++next) {
        const float* src = buf.data() + static_cast<size_t>(((*k)[next] - r) * dim);
        out.insert(out.end(), src, src + dim);
      }
      LEANEMB_RETURN_IF_ERROR(to.write_rows(t, static_cast<int64_t>(first), static_cast<int64_t>(next - first), out));
    }
  }
  return Status();
}

// Occurrences of every row of every table in one pass over the run's training files, read as
// evaluation reads them (file order, the trainer's schema and id rules).
Result<std::vector<std::vector<int64_t>>> count_ctr_rows(const ctr::CtrConfig& c) {
  LEANEMB_ASSIGN_OR_RETURN(data::ReaderOptions ro, ctr::ctr_reader_options(c, c.train_files, false));
  std::vector<std::vector<int64_t>> counts(ro.schema.sparse.size());
  for (size_t f = 0; f < counts.size(); ++f) counts[f].assign(static_cast<size_t>(ro.schema.sparse[f].num_rows), 0);
  LEANEMB_ASSIGN_OR_RETURN(auto reader, data::DataReader::open(std::move(ro)));
  data::Batch b;
  for (;;) {
    LEANEMB_ASSIGN_OR_RETURN(bool more, reader->next(&b));
    if (!more) break;
    for (size_t f = 0; f < counts.size(); ++f)
      for (int64_t id : b.sparse[f].ids) ++counts[f][static_cast<size_t>(id)];
  }
  return counts;
}

// Occurrences of every input row (words, then n-gram buckets) in the training files as the
// trainer encodes them (text::read_dataset with the rebuilt vocabulary).
Result<std::vector<int64_t>> count_text_rows(const LoadedText& m) {
  LEANEMB_ASSIGN_OR_RETURN(text::TextDataset ds, text::read_dataset(m.config.train_files, m.dict, m.config.data));
  std::vector<int64_t> counts(static_cast<size_t>(m.model->options().input_rows), 0);
  for (int64_t id : ds.ids) ++counts[static_cast<size_t>(id)];
  return counts;
}

size_t table_bytes(const EmbeddingTables& t) {
  size_t b = 0;
  for (int i = 0; i < t.num_tables(); ++i) b += t.layout(i).stride_bytes * static_cast<size_t>(t.options().tables[static_cast<size_t>(i)].num_rows);
  return b;
}

Status refuse_dynamic(const EmbeddingTables& t) {
  for (const TableOptions& to : t.options().tables)
    if (to.dynamic.enabled)
      return invalid_argument("export --serving: table " + to.name + " is dynamic (rows given on admission); a serving export "
                              "needs fixed tables");
  return Status();
}

// The export's output directory must not hold the exported checkpoint: --overwrite would move
// it away from under the export, and without it the directory is refused anyway; say what is
// wrong instead.
Status check_out_dir_outside(const SavedRun& run, const std::string& out_dir) {
  std::error_code ec1, ec2;
  std::filesystem::path out = std::filesystem::weakly_canonical(out_dir, ec1);
  const std::filesystem::path ck = std::filesystem::weakly_canonical(run.checkpoint, ec2);
  if (out.has_parent_path() && out.filename().empty()) out = out.parent_path();  // "dir/": no empty last element
  if (ec1 || ec2) return Status();
  const auto o_end = std::mismatch(out.begin(), out.end(), ck.begin(), ck.end()).first;
  if (o_end == out.end())
    return invalid_argument("export --serving: the output directory '" + out_dir + "' holds the checkpoint being exported (" +
                            run.checkpoint + "); write the export into another directory");
  return Status();
}

}  // namespace

// What a serving export writes besides the tables: the run's blobs, the dense parameters, the
// kept rows of pruned tables and the "serve/format" record, then the checkpoint itself.
struct ServingWriter {
  const SavedRun& run;
  const ServingExportOptions& o;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> blobs;
  json fmt;
  std::string pruned_said;  // the summary's pruning clause ("" without pruning)
  size_t before = 0, after = 0;  // table bytes of the run and of the export

  ServingWriter(const SavedRun& r, const ServingExportOptions& opts)
      : run(r), o(opts), fmt({{"format", kServingFormat}, {"row_dtype", "int8"}, {"source", r.checkpoint}}) {}

  Status add_run_blobs() {
    for (const char* name : {"train/state", "train/config"}) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, run.reader->read_blob(name));
      blobs.emplace_back(name, std::move(b));
    }
    return Status();
  }
  void add_dense(const std::vector<nn::NamedTensor>& params) {
    for (const auto& t : params) {
      const auto* p = reinterpret_cast<const uint8_t*>(t.values.data());
      blobs.emplace_back("dense/param/" + t.name, std::vector<uint8_t>(p, p + t.values.size() * sizeof(float)));
    }
  }
  // Pruning: the kept rows of each table from its counts; their lists as blobs and in fmt.
  std::vector<PrunedRows> keep(const std::vector<std::vector<int64_t>>& counts, const EmbeddingTables& from) {
    std::vector<PrunedRows> out;
    json tables = json::array();
    size_t index_bytes = 0;
    int64_t rows_all = 0, kept_all = 0;
    for (size_t t = 0; t < counts.size(); ++t) {
      std::vector<int64_t> kept;
      for (size_t r = 0; r < counts[t].size(); ++r)
        if (counts[t][r] >= o.prune_min_count) kept.push_back(static_cast<int64_t>(r));
      const std::string& name = from.options().tables[t].name;
      const auto* p = reinterpret_cast<const uint8_t*>(kept.data());
      blobs.emplace_back("serve/kept/" + name, std::vector<uint8_t>(p, p + kept.size() * sizeof(int64_t)));
      tables.push_back({{"table", name}, {"rows", static_cast<int64_t>(counts[t].size())}, {"kept", static_cast<int64_t>(kept.size())}});
      rows_all += static_cast<int64_t>(counts[t].size());
      kept_all += static_cast<int64_t>(kept.size());
      out.emplace_back(std::move(kept));
      index_bytes += out.back().bytes();
    }
    fmt["prune_min_count"] = o.prune_min_count;
    fmt["pruned_tables"] = tables;
    fmt["kept_index_bytes"] = index_bytes;
    pruned_said = "; pruned rows seen < " + std::to_string(o.prune_min_count) + " times in the training files: " +
                  std::to_string(rows_all) + " -> " + std::to_string(kept_all) + " rows, kept-row index " + format_bytes(index_bytes);
    return out;
  }
  // The serving tables copied from the run's, sized, and saved with the blobs.
  Result<std::string> save(const EmbeddingTables& from, EmbeddingTables& to, const std::vector<PrunedRows>& kept) {
    LEANEMB_RETURN_IF_ERROR(copy_rows(from, to, kept));
    before = table_bytes(from);
    after = table_bytes(to);
    const std::string f = dump_json(fmt);
    blobs.emplace_back("serve/format", std::vector<uint8_t>(f.begin(), f.end()));
    std::vector<CheckpointBlob> sb;
    for (const auto& [name, bytes] : blobs) sb.push_back({name, bytes});
    TablesSaveOptions so;
    so.keep_last = 1;
    LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, to.save(o.out_dir, run.step, sb, so));
    return info.path;
  }
};

// The CTR model's serving copy: int8 frozen rows, resident, pruned when asked.
Result<std::string> export_ctr_serving(ServingWriter& w) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_ctr(w.run, w.o.sets));
  LEANEMB_RETURN_IF_ERROR(refuse_dynamic(m->model->embeddings()));
  model::CtrModelOptions mo = m->model->options();
  make_serving(&mo.row_dtype, &mo.row_optimizer);
  mo.frozen_tables = true;
  mo.row_cache = TableCacheOptions{};  // resident: the serving copy is small
  if (w.o.prune_min_count > 0) {
    LEANEMB_ASSIGN_OR_RETURN(auto counts, count_ctr_rows(m->config));
    mo.pruned_rows = w.keep(counts, m->model->embeddings());
    for (size_t f = 0; f < mo.pruned_rows.size(); ++f) mo.table_rows[f] = std::max<int64_t>(1, mo.pruned_rows[f].num_kept());
  }
  LEANEMB_ASSIGN_OR_RETURN(auto serving, model::CtrModel::create(mo, m->memory.get()));
  w.add_dense(m->model->dense_parameters());
  return w.save(m->model->embeddings(), serving->embeddings(), mo.pruned_rows);
}

// The text model's serving copy, with the reader position (it records the model's shape).
Result<std::string> export_text_serving(ServingWriter& w) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_text(w.run, w.o.sets));
  LEANEMB_RETURN_IF_ERROR(refuse_dynamic(m->model->tables()));
  text::TextModelOptions mo = m->model->options();
  make_serving(&mo.dtype, &mo.row_optimizer);
  mo.frozen = true;
  std::vector<PrunedRows> pr;
  if (w.o.prune_min_count > 0) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<int64_t> counts, count_text_rows(*m));
    pr = w.keep({counts}, m->model->tables());
    mo.pruned = true;
    mo.pruned_rows = pr[0];
    mo.input_rows = std::max<int64_t>(1, pr[0].num_kept());
  }
  LEANEMB_ASSIGN_OR_RETURN(auto serving, text::TextModel::create(mo, m->memory.get()));
  w.add_dense(m->model->dense_parameters());
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> pos, w.run.reader->read_blob("train/reader"));  // the model's shape
  w.blobs.emplace_back("train/reader", std::move(pos));
  return w.save(m->model->tables(), serving->tables(), pr);
}

Result<std::string> export_serving(const SavedRun& run, const ServingExportOptions& o) {
  if (run.serving) return invalid_argument(run.checkpoint + " is a serving export already");
  if (o.prune_min_count < 0) return invalid_argument("prune_min_count must be >= 0, got " + std::to_string(o.prune_min_count));
  LEANEMB_RETURN_IF_ERROR(check_out_dir_outside(run, o.out_dir));
  // writers_own_their_dirs: the export holds out_dir's lock (a running `leanemb train` there
  // refuses it) and never replaces work it did not write unless told to (moved aside then).
  train::RunDirOptions ro;
  ro.out_dir = o.out_dir;
  ro.overwrite = o.overwrite;
  ro.say = o.say;
  ro.writer = "export --serving";
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<train::RunDir> owned, train::RunDir::open(ro));
  ServingWriter w(run, o);
  LEANEMB_RETURN_IF_ERROR(w.add_run_blobs());
  LEANEMB_ASSIGN_OR_RETURN(const TaskEntry* task, find_task(run.task));
  LEANEMB_ASSIGN_OR_RETURN(const std::string path, task->export_serving(w));
  return "serving export of " + run.checkpoint + " (step " + std::to_string(run.step) + "): int8 rows, no optimizer state; tables " +
         format_bytes(w.before) + " -> " + format_bytes(w.after) + w.pruned_said + "; written to " + path + " (leanemb predict --run " +
         o.out_dir + ")\n";
}

Status write_npy_header(std::FILE* f, std::span<const int64_t> shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  if (shape.size() == 1) dict.pop_back();  // "(n,)"
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + padding + '\n': a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 65535) return invalid_argument("npy header too long");
  const auto len = static_cast<uint16_t>(dict.size());
  const unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(len & 0xff),
                                  static_cast<unsigned char>(len >> 8)};
  std::fwrite(head, 1, sizeof head, f);
  std::fwrite(dict.data(), 1, dict.size(), f);
  return std::ferror(f) ? io_error("cannot write an .npy header") : Status();
}

Result<std::string> export_ctr_arrays(const SavedRun& run, const ExportOptions& o, json* manifest_out) {
  json& manifest = *manifest_out;
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_ctr(run, o.sets, o.with_state));
  const ctr::CtrConfig& c = m->config;
  LEANEMB_RETURN_IF_ERROR(export_tables(m->model->embeddings(), o.with_state, o.out_dir, &manifest));
  LEANEMB_RETURN_IF_ERROR(export_dense(m->model->dense_parameters(), m->model->dense_optimizer_state(), o.with_state, o.out_dir, &manifest));
  json features = json::array();
  for (const FeatureOptions& f : m->model->embeddings().options().features)
    features.push_back({{"name", f.name}, {"table", m->model->embeddings().options().tables[static_cast<size_t>(f.table)].name}});
  manifest["features"] = features;
  manifest["id_hashing"] = {
      {"rule", "a categorical value (1-16 hex digits = a uint64 v) hashes to XXH3_64bits_withSeed(8 little-endian bytes of v, "
               "seed = the feature's index, 0-based); its row is hash % rows of the feature's table (dynamic tables: the "
               "IdMap of the checkpoint gives the row). docs/data.md"},
      {"num_dense", c.num_dense}, {"num_sparse", c.num_sparse},
      {"dense_transform", "log(1 + max(x, 0))"}};
  manifest["model"] = {{"embedding_dim", c.embedding_dim}, {"bottom_mlp", c.bottom_mlp}, {"top_mlp", c.top_mlp},
                       {"interaction", c.interaction == nn::InteractionKind::kDot ? "dot" : "cat"}};
  return std::to_string(m->model->embeddings().num_tables()) + " tables, " +
         std::to_string(m->model->dense_parameters().size()) + " dense parameters";
}

Result<std::string> export_text_arrays(const SavedRun& run, const ExportOptions& o, json* manifest_out) {
  json& manifest = *manifest_out;
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_text(run, o.sets, o.with_state));
  const EmbeddingTables& tables = m->model->tables();
  LEANEMB_RETURN_IF_ERROR(export_tables(tables, o.with_state, o.out_dir, &manifest));
  LEANEMB_RETURN_IF_ERROR(export_dense(m->model->dense_parameters(), m->model->dense_optimizer_state(), o.with_state, o.out_dir, &manifest));
  // Word vectors: the rows of the vocabulary's words, in fastText's .vec text format.
  const std::string vec = o.out_dir + "/words.vec";
  LEANEMB_ASSIGN_OR_RETURN(FilePtr f, create_file(vec));
  const int64_t words = m->dict.num_words(), dim = tables.layout(0).dim;
  std::fprintf(f.get(), "%lld %lld\n", static_cast<long long>(words), static_cast<long long>(dim));
  std::vector<float> buf;
  for (int64_t r = 0; r < words; r += kChunkRows) {
    const int64_t n = std::min(kChunkRows, words - r);
    buf.resize(static_cast<size_t>(n * dim));
    LEANEMB_RETURN_IF_ERROR(tables.read_rows(0, r, n, buf));
    for (int64_t i = 0; i < n; ++i) {
      std::fputs(m->dict.word(r + i).c_str(), f.get());
      for (int64_t d = 0; d < dim; ++d) std::fprintf(f.get(), " %.5g", static_cast<double>(buf[static_cast<size_t>(i * dim + d)]));
      std::fputc('\n', f.get());
    }
  }
  LEANEMB_RETURN_IF_ERROR(close_file(std::move(f), vec));
  json labels = json::array();
  for (int32_t l = 0; l < m->dict.num_labels(); ++l) labels.push_back("__label__" + m->dict.label(l));
  manifest["labels"] = labels;  // the rows of the output layer, in order
  manifest["words_vec"] = "words.vec";
  manifest["id_hashing"] = {
      {"rule", "rows [0, words) are the vocabulary's words in words.vec's order; with word_ngrams > 1, rows [words, words + "
               "buckets) are fastText's word n-gram buckets (docs/text.md)"},
      {"words", words}, {"word_ngrams", m->config.data.word_ngrams}, {"buckets", m->config.data.buckets}};
  return std::to_string(words) + " word vectors (words.vec), the input table, " +
         std::to_string(m->model->dense_parameters().size()) + " dense parameters";
}

Result<std::string> export_model(const SavedRun& run, const ExportOptions& o) {
  LEANEMB_RETURN_IF_ERROR(make_dirs(o.out_dir));
  // writers_own_their_dirs: the export holds out_dir's lock while it writes (a running `leanemb
  // train` or another export there refuses it, and it refuses them). It replaces only its own
  // files (manifest.json, *.npy, words.vec), so there is no consent check as for --serving.
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<train::DirLock> lock, train::DirLock::acquire(o.out_dir));
  json manifest = {{"format", "leanemb-export-1"}, {"task", run.task}, {"checkpoint", run.checkpoint}, {"step", run.step},
                   {"npy", "NumPy format 1.0, little-endian float32, C order"}};
  LEANEMB_ASSIGN_OR_RETURN(const TaskEntry* task, find_task(run.task));
  LEANEMB_ASSIGN_OR_RETURN(const std::string said, task->export_arrays(run, o, &manifest));
  const std::string mpath = o.out_dir + "/manifest.json";
  std::ofstream mf(mpath);
  mf << dump_json(manifest, 2) << "\n";
  mf.close();  // flushes: a full disk shows here, not in the destructor
  if (!mf) return io_error("cannot write '" + mpath + "'");
  return "exported " + said + (o.with_state ? " with optimizer state" : "") + " of " + run.checkpoint + " (step " +
         std::to_string(run.step) + ") to " + o.out_dir + " (manifest.json lists every file)\n";
}

}  // namespace leanemb::serve
