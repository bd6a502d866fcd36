// `tetra data inspect` (prepare lives in data/prepare/prepare_dataset.cpp).
#include "data/data_tools.h"

#include <algorithm>
#include <vector>

#include "data/token_dataset.h"
#include "data/tokenizers/tokenizer.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

constexpr int64_t kScanTokens = int64_t{1} << 20;  // tokens read per step of the vocabulary scan

// Distinct ids and the largest id over every token of the file.
void print_vocabulary_used(TokenDataset& d, std::ostream& out) {
  std::vector<int32_t> ids(static_cast<size_t>(std::min(kScanTokens, d.size())));
  std::vector<bool> seen;
  int64_t distinct = 0, max_id = -1;
  for (int64_t at = 0; at < d.size(); at += kScanTokens) {
    const int64_t n = std::min(kScanTokens, d.size() - at);
    d.read(at, n, ids.data());  // ids are >= 0 here: read() rejects the rest
    for (int64_t i = 0; i < n; ++i) {
      const size_t id = static_cast<size_t>(ids[static_cast<size_t>(i)]);
      if (id >= seen.size()) seen.resize(std::max(id + 1, 2 * seen.size()), false);
      if (!seen[id]) {
        seen[id] = true;
        ++distinct;
      }
      max_id = std::max<int64_t>(max_id, static_cast<int64_t>(id));
    }
  }
  out << "ids used:   " << distinct << " distinct, max " << max_id;
  if (d.vocab_size() > 0) out << " (vocab_size " << d.vocab_size() << ")";
  out << "\n";
}

}  // namespace

void inspect_dataset(const std::string& path, std::ostream& out, const std::string& tokenizer) {
  std::unique_ptr<TokenDataset> d = TokenDataset::open(path);
  // A named tokenizer is made first: a bad spec fails before the scan of every token.
  const std::string spec = !tokenizer.empty() ? tokenizer : d->tokenizer() == "byte" ? "byte" : "";
  std::unique_ptr<Tokenizer> tok = spec.empty() ? nullptr : make_tokenizer(spec);
  out << "format:     " << d->format() << "\n";
  out << "path:       " << d->path() << "\n";
  if (d->data_path() != d->path()) out << "data file:  " << d->data_path() << "\n";
  out << "tokens:     " << d->size() << "\n";
  out << "dtype:      " << dtype_name(d->token_dtype()) << "\n";
  if (d->vocab_size() > 0)
    out << "vocab_size: " << d->vocab_size() << "\n";
  else
    out << "vocab_size: unknown (not stored in this format; GPT-2 shards use 50257, Llama 3 128256)\n";
  out << "tokenizer:  " << (d->tokenizer().empty() ? "unknown" : d->tokenizer());
  if (!d->tokenizer_sha256().empty()) out << " (file sha256 " << d->tokenizer_sha256() << ")";
  out << "\n";
  int64_t first_doc = d->size();  // tokens of the first document (the whole file when not recorded)
  if (d->num_documents() > 0) {
    const std::vector<int64_t> docs = d->doc_offsets();  // also validates them
    out << "documents:  " << docs.size() << "\n";
    if (docs.size() > 1) first_doc = docs[1];
  } else {
    out << "documents:  not recorded\n";
  }
  if (d->contiguous_offset() >= 0)
    out << "layout:     contiguous, tokens at byte " << d->contiguous_offset() << "\n";
  else
    out << "layout:     decoded on the host (no direct reads by file offset)\n";
  print_vocabulary_used(*d, out);

  const int64_t n = std::min<int64_t>(32, d->size());
  std::vector<int32_t> ids(static_cast<size_t>(n));
  d->read(0, n, ids.data());
  out << "first " << n << " tokens:";
  for (int32_t id : ids) out << " " << id;
  out << "\n";
  if (tok) {
    const int64_t m = std::min<int64_t>(first_doc, 64);
    std::vector<int32_t> start(static_cast<size_t>(m));
    d->read(0, m, start.data());
    out << "document 0: \"" << tok->decode_escaped(start.data(), m) << "\"" << (m < first_doc ? " ..." : "")
        << " (" << m << " of its " << first_doc << " tokens, decoded by " << tok->name() << ")\n";
  }
  out.flush();
}

}  // namespace tetra::data
