// fastText-format text: tokenization, hashing, the vocabulary and the encoded dataset.
#include "text/text_data.h"

#include <algorithm>
#include <fstream>
#include <numeric>

namespace leanemb::text {

namespace {

bool is_separator(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n' || c == '\0';
}

// One line split into words and label names, before any vocabulary lookup.
struct ParsedLine {
  std::vector<std::string_view> tokens;
  std::vector<std::string_view> words;
  std::vector<std::string_view> labels;  // names without the prefix
  bool empty_label = false;
};

void parse_line(std::string_view line, ParsedLine* p) {
  p->tokens.clear();
  p->words.clear();
  p->labels.clear();
  p->empty_label = false;
  split_tokens(line, &p->tokens);
  for (std::string_view t : p->tokens) {
    if (t.substr(0, kLabelPrefix.size()) == kLabelPrefix) {
      if (t.size() == kLabelPrefix.size()) p->empty_label = true;
      p->labels.push_back(t.substr(kLabelPrefix.size()));
    } else {
      p->words.push_back(t);
    }
  }
}

// Calls fn(line, line_no) for every line of a file. Errors: NotFound / IoError.
template <typename Fn>
Status for_each_line(const std::string& path, Fn fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("text data: cannot open '" + path + "'");
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    LEANEMB_RETURN_IF_ERROR(fn(std::string_view(line), line_no));
  }
  if (in.bad()) return io_error("text data: read error in '" + path + "' after line " + std::to_string(line_no));
  return Status();
}

// Sorted by count (descending), ties by first appearance: ids of `names`.
template <typename Id>
void sort_by_count(std::vector<std::string>* names, std::vector<int64_t>* counts,
                   std::unordered_map<std::string, Id>* index) {
  std::vector<size_t> order(names->size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*counts)[a] > (*counts)[b]; });
  std::vector<std::string> n2;
  std::vector<int64_t> c2;
  index->clear();
  for (size_t i : order) {
    (*index)[(*names)[i]] = static_cast<Id>(n2.size());
    n2.push_back(std::move((*names)[i]));
    c2.push_back((*counts)[i]);
  }
  *names = std::move(n2);
  *counts = std::move(c2);
}

}  // namespace

uint32_t fasttext_hash(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) {
    h ^= static_cast<uint32_t>(static_cast<int8_t>(c));  // sign-extended, as fastText
    h *= 16777619u;
  }
  return h;
}

void split_tokens(std::string_view line, std::vector<std::string_view>* out) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_separator(line[i])) ++i;
    const size_t b = i;
    while (i < line.size() && !is_separator(line[i])) ++i;
    if (i > b) out->push_back(line.substr(b, i - b));
  }
}

void add_word_ngrams(std::span<const uint32_t> word_hashes, int max_n, uint64_t buckets, std::vector<int64_t>* out) {
  // fastText keeps the hashes as int32 and widens them to uint64 with sign extension.
  auto widen = [](uint32_t h) { return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(h))); };
  const size_t n = word_hashes.size();
  for (size_t i = 0; i < n; ++i) {
    uint64_t h = widen(word_hashes[i]);
    for (size_t j = i + 1; j < n && j < i + static_cast<size_t>(max_n); ++j) {
      h = h * 116049371u + widen(word_hashes[j]);
      out->push_back(static_cast<int64_t>(h % buckets));
    }
  }
}

int64_t Dictionary::word_id(std::string_view w) const {
  auto it = word_index_.find(std::string(w));
  return it == word_index_.end() ? -1 : it->second;
}

int32_t Dictionary::label_id(std::string_view l) const {
  auto it = label_index_.find(std::string(l));
  return it == label_index_.end() ? -1 : it->second;
}

Result<Dictionary> Dictionary::build(std::span<const std::string> files, const TextDataOptions& options) {
  if (files.empty()) return invalid_argument("text data: no training files");
  std::unordered_map<std::string, int64_t> wi, li;
  std::vector<std::string> words, labels;
  std::vector<int64_t> wc, lc;
  auto add = [](std::string_view s, std::unordered_map<std::string, int64_t>* idx, std::vector<std::string>* names,
                std::vector<int64_t>* counts) {
    auto [it, fresh] = idx->try_emplace(std::string(s), static_cast<int64_t>(names->size()));
    if (fresh) {
      names->emplace_back(s);
      counts->push_back(0);
    }
    ++(*counts)[static_cast<size_t>(it->second)];
  };
  ParsedLine p;
  int64_t good = 0;
  for (const std::string& f : files) {
    LEANEMB_RETURN_IF_ERROR(for_each_line(f, [&](std::string_view line, int64_t) {
      parse_line(line, &p);
      if (p.labels.empty() || p.words.empty() || p.empty_label) return Status();
      ++good;
      const size_t keep = options.max_len > 0 ? std::min(p.words.size(), static_cast<size_t>(options.max_len)) : p.words.size();
      for (size_t i = 0; i < keep; ++i) add(p.words[i], &wi, &words, &wc);
      add(kEos, &wi, &words, &wc);
      for (std::string_view l : p.labels) add(l, &li, &labels, &lc);
      return Status();
    }));
  }
  if (good == 0) return invalid_argument("text data: no line with a __label__ and a word in the training files");
  Dictionary d;
  // Drop rare words and labels, then sort by count.
  auto prune = [](std::vector<std::string>* names, std::vector<int64_t>* counts, int64_t min_count) {
    size_t k = 0;
    for (size_t i = 0; i < names->size(); ++i)
      if ((*counts)[i] >= min_count) {
        if (k != i) (*names)[k] = std::move((*names)[i]);  // never a self-move (it empties the string)
        (*counts)[k++] = (*counts)[i];
      }
    names->resize(k);
    counts->resize(k);
  };
  prune(&words, &wc, std::max<int64_t>(1, options.min_count));
  prune(&labels, &lc, std::max<int64_t>(1, options.min_count_label));
  if (labels.empty()) return invalid_argument("text data: no label reaches min_count_label " + std::to_string(options.min_count_label));
  d.words_ = std::move(words);
  d.word_counts_ = std::move(wc);
  d.labels_ = std::move(labels);
  d.label_counts_ = std::move(lc);
  sort_by_count(&d.words_, &d.word_counts_, &d.word_index_);
  sort_by_count(&d.labels_, &d.label_counts_, &d.label_index_);
  return d;
}

size_t TextDataset::memory_bytes() const {
  return ids.capacity() * sizeof(int64_t) + offsets.capacity() * sizeof(int64_t) + labels.capacity() * sizeof(int32_t) +
         label_offsets.capacity() * sizeof(int64_t) + tokens.capacity() * sizeof(int32_t);
}

namespace {

// The input rows of `words` (already truncated to max_len) and "</s>", then their n-gram buckets.
void append_word_rows(std::span<const std::string_view> words, const Dictionary& dict, const TextDataOptions& options,
                      std::vector<int64_t>* ids) {
  thread_local std::vector<uint32_t> hashes;
  hashes.clear();
  auto add_word = [&](std::string_view w) {
    const uint32_t h = fasttext_hash(w);
    const int64_t id = dict.word_id(w);
    if (id >= 0) ids->push_back(id);
    hashes.push_back(h);  // out-of-vocabulary words still take part in n-grams (as in fastText)
  };
  for (std::string_view w : words) add_word(w);
  add_word(kEos);
  if (options.word_ngrams > 1) {
    const size_t b = ids->size();
    add_word_ngrams(hashes, options.word_ngrams, static_cast<uint64_t>(options.buckets), ids);
    for (size_t i = b; i < ids->size(); ++i) (*ids)[i] += dict.num_words();
  }
}

}  // namespace

int64_t encode_words(std::string_view line, const Dictionary& dict, const TextDataOptions& options, std::vector<int64_t>* ids) {
  thread_local ParsedLine p;
  parse_line(line, &p);
  if (p.words.empty()) return 0;
  size_t keep = p.words.size();
  if (options.max_len > 0 && keep > static_cast<size_t>(options.max_len)) keep = static_cast<size_t>(options.max_len);
  append_word_rows(std::span<const std::string_view>(p.words).first(keep), dict, options, ids);
  return static_cast<int64_t>(keep);
}

Result<bool> encode_line(std::string_view line, const Dictionary& dict, const TextDataOptions& options,
                         std::string_view file, int64_t line_no, data::MalformedTracker* tracker,
                         TextDataStats* stats, TextDataset* out) {
  thread_local ParsedLine p;
  parse_line(line, &p);
  if (p.tokens.empty()) {
    ++stats->blank_lines;
    return false;
  }
  ++stats->lines;
  tracker->stats().lines = stats->lines;
  auto malformed = [&](data::MalformedKind kind, int64_t* count, const std::string& why) -> Result<bool> {
    ++*count;
    ++stats->malformed;
    LEANEMB_RETURN_IF_ERROR(tracker->on_malformed(file, line_no, kind, why));
    if (stats->first_malformed.empty()) stats->first_malformed = tracker->stats().first_malformed;
    return false;
  };
  if (p.empty_label) return malformed(data::MalformedKind::kEmptyLabel, &stats->empty_label, "a __label__ token without a name");
  if (p.labels.empty()) return malformed(data::MalformedKind::kNoLabel, &stats->no_label, "no __label__ token");
  if (p.words.empty()) return malformed(data::MalformedKind::kNoWords, &stats->no_words, "labels but no word");
  // Labels first: a line without a known label adds nothing.
  const size_t label_begin = out->labels.size();
  for (std::string_view l : p.labels) {
    const int32_t id = dict.label_id(l);
    if (id < 0) {
      ++stats->unknown_labels;
      continue;
    }
    if (std::find(out->labels.begin() + static_cast<std::ptrdiff_t>(label_begin), out->labels.end(), id) == out->labels.end())
      out->labels.push_back(id);
  }
  if (out->labels.size() == label_begin) {
    ++stats->skipped_unknown;
    return false;
  }
  out->label_offsets.push_back(static_cast<int64_t>(out->labels.size()));
  size_t keep = p.words.size();
  if (options.max_len > 0 && keep > static_cast<size_t>(options.max_len)) {
    stats->truncated_words += static_cast<int64_t>(keep) - options.max_len;
    keep = static_cast<size_t>(options.max_len);
  }
  append_word_rows(std::span<const std::string_view>(p.words).first(keep), dict, options, &out->ids);
  out->offsets.push_back(static_cast<int64_t>(out->ids.size()));
  const int64_t ntok = static_cast<int64_t>(keep + p.labels.size() + 1);
  out->tokens.push_back(static_cast<int32_t>(std::min<int64_t>(ntok, INT32_MAX)));
  stats->tokens += ntok;
  ++stats->examples;
  return true;
}

Result<TextDataset> read_dataset(std::span<const std::string> files, const Dictionary& dict,
                                 const TextDataOptions& options, TextDataStats* stats) {
  if (options.word_ngrams < 1) return invalid_argument("text data: word_ngrams must be >= 1");
  if (options.word_ngrams > 1 && options.buckets < 1) return invalid_argument("text data: buckets must be >= 1 with word n-grams");
  TextDataStats local;
  TextDataStats* st = stats ? stats : &local;
  data::MalformedTracker tracker(options.malformed);
  TextDataset ds;
  for (const std::string& f : files) {
    int64_t last = 0;
    LEANEMB_RETURN_IF_ERROR(for_each_line(f, [&](std::string_view line, int64_t line_no) -> Status {
      last = line_no;
      auto r = encode_line(line, dict, options, f, line_no, &tracker, st, &ds);
      return r.ok() ? Status() : r.status();
    }));
    LEANEMB_RETURN_IF_ERROR(tracker.on_file_end(f, last));
  }
  if (ds.num_examples() == 0)
    return invalid_argument("text data: no usable line in " + files.front() + (files.size() > 1 ? " (and others)" : ""));
  return ds;
}

}  // namespace leanemb::text
