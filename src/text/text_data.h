// Text data in fastText's supervised format, read as fastText 0.9.2 reads it.
//
// A line is a sequence of tokens; `__label__X` tokens are labels, every other token a word.
// Tokens are separated by the bytes fastText separates them by (' ', '\t', '\v', '\f', '\r',
// '\n', '\0'); each line ends with the end-of-sentence word "</s>", which is in the vocabulary
// like any word. Words are hashed with fastText's 32-bit FNV-1a (bytes sign-extended, as
// fastText does), and the word n-grams of a line (2..word_ngrams consecutive words, out-of-
// vocabulary words included) are hashed into `buckets` rows with fastText's rule
//   h = hash(w_i); for j in i+1 .. i+n-1: h = h * 116049371 + hash(w_j); bucket = h mod buckets
// so a leanemb model and a fastText model see the same inputs for the same data.
//
// The model's input rows: [0, num_words) the vocabulary's words (sorted by count, most frequent
// first; ties by first appearance), [num_words, num_words + buckets) the n-gram buckets.
//
// Malformed lines are skipped, counted by kind and reported with file and line through a
// data::MalformedTracker (max rate as in the CTR reader, docs/data.md): a line with words but
// no label (no_label), a `__label__` token with an empty name (empty_label), a line with labels
// but no word (no_words). Blank lines are skipped and counted, not malformed (fastText skips
// them too). At evaluation, a line whose labels are all unknown to the training vocabulary is
// skipped and counted (fastText's `test` skips it as well).
//
// Ownership: plain values. Thread safety: const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "leanemb/data_malformed.h"
#include "leanemb/status.h"

namespace leanemb::text {

inline constexpr std::string_view kEos = "</s>";
inline constexpr std::string_view kLabelPrefix = "__label__";

// fastText's Dictionary::hash: 32-bit FNV-1a over the bytes, each sign-extended from int8.
uint32_t fasttext_hash(std::string_view s);
// Appends the tokens of `line` (no trailing "</s>") to `out` as views into `line`.
void split_tokens(std::string_view line, std::vector<std::string_view>* out);
// Appends the bucket (in [0, buckets)) of every word n-gram of n = 2..max_n over the word
// hashes of one line, in fastText's order (for each start i, increasing length).
// REQUIRES: buckets >= 1.
void add_word_ngrams(std::span<const uint32_t> word_hashes, int max_n, uint64_t buckets, std::vector<int64_t>* out);

struct TextDataOptions {
  int64_t min_count = 1;        // words seen fewer times in the training files are dropped
  int64_t min_count_label = 1;  // labels seen fewer times are dropped (their lines too)
  int word_ngrams = 1;          // longest word n-gram (1 = words only; fastText's -wordNgrams)
  int64_t buckets = 2000000;    // n-gram hash buckets (fastText's -bucket); unused when word_ngrams == 1
  int64_t max_len = 0;          // keep the first max_len words of a line (0 = all); n-grams over those
  data::MalformedPolicy malformed;  // max_rate, warnings
};

// Counts of one read (training files: the vocabulary pass and the encoding pass count once).
struct TextDataStats {
  int64_t lines = 0;             // non-blank lines examined
  int64_t blank_lines = 0;
  int64_t examples = 0;          // lines kept
  int64_t malformed = 0;         // by kind in by_kind
  int64_t no_label = 0, empty_label = 0, no_words = 0;
  int64_t unknown_labels = 0;    // label tokens not in the vocabulary (dropped from their line)
  int64_t skipped_unknown = 0;   // lines dropped because none of their labels is known
  int64_t truncated_words = 0;   // words dropped by max_len
  int64_t tokens = 0;            // tokens of kept lines, labels and "</s>" included (fastText's count)
  std::string first_malformed;   // "FILE:LINE: reason"
};

// The vocabulary of the training files: words with at least min_count occurrences, labels.
class Dictionary {
 public:
  // Reads every training file once, counting the words and labels of well-formed lines
  // (malformed lines are reported by read_dataset, which reads the files again).
  // Errors: NotFound / IoError for a file; InvalidArgument when no line has a label and a word.
  static Result<Dictionary> build(std::span<const std::string> files, const TextDataOptions& options);

  int64_t num_words() const { return static_cast<int64_t>(words_.size()); }
  int32_t num_labels() const { return static_cast<int32_t>(labels_.size()); }
  int64_t word_id(std::string_view w) const;  // -1 when not in the vocabulary
  int32_t label_id(std::string_view l) const;  // -1 when unknown; l without the prefix
  const std::string& word(int64_t id) const { return words_[static_cast<size_t>(id)]; }
  const std::string& label(int32_t id) const { return labels_[static_cast<size_t>(id)]; }  // without prefix
  int64_t word_count(int64_t id) const { return word_counts_[static_cast<size_t>(id)]; }
  int64_t label_count(int32_t id) const { return label_counts_[static_cast<size_t>(id)]; }
  // Input rows of a model over this vocabulary: num_words + buckets (no buckets without n-grams).
  int64_t input_rows(const TextDataOptions& o) const { return num_words() + (o.word_ngrams > 1 ? o.buckets : 0); }

 private:
  std::vector<std::string> words_, labels_;
  std::vector<int64_t> word_counts_, label_counts_;
  std::unordered_map<std::string, int64_t> word_index_;
  std::unordered_map<std::string, int32_t> label_index_;
};

// Encoded examples, CSR: example i has input rows ids[offsets[i] .. offsets[i+1]) (its words
// in order, then its n-gram buckets as num_words + bucket) and labels
// labels[label_offsets[i] .. label_offsets[i+1]) (at least one; duplicates removed, in order).
struct TextDataset {
  std::vector<int64_t> ids;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> labels;
  std::vector<int64_t> label_offsets{0};
  std::vector<int32_t> tokens;  // [examples] fastText's token count of the line (lr schedule)
  int64_t num_examples() const { return static_cast<int64_t>(offsets.size()) - 1; }
  size_t memory_bytes() const;
};

// Encodes one line (no newline) with the dictionary. Returns false for a line to skip; the
// reason is counted in `stats` (malformed kinds through `tracker`, which may fail the read).
// Exposed for tests; read_dataset uses it.
Result<bool> encode_line(std::string_view line, const Dictionary& dict, const TextDataOptions& options,
                         std::string_view file, int64_t line_no, data::MalformedTracker* tracker,
                         TextDataStats* stats, TextDataset* out);

// The input rows of one line's words as encode_line encodes them (labels ignored, max_len
// applied, "</s>" and the n-gram buckets added), appended to `ids`: what `leanemb predict`
// feeds the model. Returns the number of words kept; 0 (nothing appended) for a line without
// a word.
int64_t encode_words(std::string_view line, const Dictionary& dict, const TextDataOptions& options, std::vector<int64_t>* ids);

// Reads and encodes files. Errors: NotFound / IoError; InvalidArgument above the malformed rate.
Result<TextDataset> read_dataset(std::span<const std::string> files, const Dictionary& dict,
                                 const TextDataOptions& options, TextDataStats* stats = nullptr);

}  // namespace leanemb::text
