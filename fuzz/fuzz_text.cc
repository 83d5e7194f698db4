// libFuzzer harness: fastText-format text (text/text_data.h): tokenization, the vocabulary pass,
// encoding with word n-grams and max_len, malformed-line accounting.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "text/text_data.h"

using namespace leanemb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> files = {fuzz::write_input(data, size, ".txt")};
  text::TextDataOptions o;
  o.word_ngrams = 3;
  o.buckets = 101;
  o.max_len = 6;
  o.min_count = 1;
  o.malformed.max_rate = 1.0;
  o.malformed.max_warnings = 0;
  auto dict = text::Dictionary::build(files, o);
  if (!dict.ok()) return 0;
  text::TextDataStats stats;
  auto ds = text::read_dataset(files, dict.value(), o, &stats);
  if (!ds.ok()) return 0;
  // Every id is an input row of the model and every label one of the vocabulary's.
  const int64_t rows = dict->num_words() + o.buckets;
  for (int64_t id : ds->ids)
    if (id < 0 || id >= rows) __builtin_trap();
  for (int32_t l : ds->labels)
    if (l < 0 || l >= dict->num_labels()) __builtin_trap();
  return 0;
}
