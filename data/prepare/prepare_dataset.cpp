// `tetra data prepare`: inputs -> documents (DocumentSource, in order) -> token ids (TokenizePool,
// in parallel, results in order) -> a TokenWriter. At most 2 batches per worker are in flight, so
// memory is bounded by the batches, not by the input.
#include <filesystem>
#include <thread>

#include "data/data_spec.h"
#include "data/data_tools.h"
#include "data/formats/token_writer.h"
#include "data/prepare/document_source.h"
#include "data/prepare/jsonl_text.h"
#include "data/prepare/tokenize_pool.h"
#include "data/tokenizers/tokenizer.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

constexpr size_t kBatchBytes = size_t{1} << 20;  // text per batch handed to a worker

// The inputs in order: each path as given, each glob's matches sorted by name.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) TETRA_FAIL(Usage, "data prepare: no input files given (--input FILE...)");
  std::vector<std::string> files;
  for (const std::string& p : inputs) {
    if (is_glob(p)) {
      for (std::string& f : glob_sorted(p, "data prepare --input")) files.push_back(std::move(f));
    } else {
      files.push_back(p);
    }
  }
  return files;
}

// The id of the document token `flag` asks for: `given` ("none", a token, or unset: `own`, the
// tokenizer's). `required`: a tokenizer without its own token needs the flag (end of document).
std::optional<uint32_t> document_token(const Tokenizer& tok, const char* flag, const std::optional<std::string>& given,
                                       const std::optional<std::string>& own, bool required) {
  if (given && *given == "none") return std::nullopt;
  const std::optional<std::string> token = given ? given : own;
  if (!token) {
    // "byte" has no special tokens (256 ids, all bytes): its documents are delimited by /doc_offsets only.
    if (!required || tok.name() == "byte") return std::nullopt;
    TETRA_FAIL(Usage, "data prepare: tokenizer ", tok.name(), " names no end-of-document token (no eos_token in a "
               "tokenizer_config.json beside it); pass ", flag, " TOKEN (e.g. ", flag, " '<|endoftext|>') or ", flag,
               " none");
  }
  const std::optional<uint32_t> id = tok.token_id(*token);
  if (!id)
    TETRA_FAIL(Usage, "data prepare: ", flag, " '", *token, "' is not a token of tokenizer ", tok.name(),
               given ? "; give a token of its vocabulary, or none" : " (named by its config); pass " +
               std::string(flag) + " TOKEN or none");
  return id;
}

std::string token_text(const std::optional<uint32_t>& id) { return id ? "id " + std::to_string(*id) : "none"; }

std::string human_bytes(uintmax_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

void prepare_dataset(const PrepareOptions& options, std::ostream& log) {
  std::unique_ptr<Tokenizer> tok = make_tokenizer(options.tokenizer);
  prepare_dataset(options, *tok, log);
}

void prepare_dataset(const PrepareOptions& o, const Tokenizer& tok, std::ostream& log) {
  if (o.format != "text" && o.format != "jsonl")
    TETRA_FAIL(Usage, "data prepare: --format ", o.format, " is not one of text, jsonl");
  if (o.workers < 0) TETRA_FAIL(Usage, "data prepare: --workers ", o.workers, " must be positive");
  const int workers = o.workers > 0 ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  const DocumentTokens own = tok.document_tokens();
  const std::optional<uint32_t> eos = document_token(tok, "--eos", o.eos, own.eos, true);
  const std::optional<uint32_t> bos = document_token(tok, "--bos", o.bos, own.bos, false);
  const std::vector<std::string> files = expand_inputs(o.inputs);
  std::unique_ptr<TokenWriter> writer =
      make_token_writer(o.out_format, o.out, {tok.name(), tok.file_sha256(), tok.vocab_size()});

  DocumentSource source(files, o.format == "jsonl" ? InputFormat::Jsonl : InputFormat::Text);
  const bool jsonl = o.format == "jsonl";
  TokenizePool pool(workers, [&](const std::vector<RawDocument>& docs, TokenizedBatch& out) {
    // Room for about one id per byte up front: an encode that reserves exactly what it appends
    // would otherwise reallocate the batch's ids once per document.
    size_t bytes = 0;
    for (const RawDocument& d : docs) bytes += d.text.size() + 2;
    out.ids.reserve(bytes);
    for (const RawDocument& d : docs) {
      const std::string text = jsonl ? jsonl_text(d.text, o.field, files[static_cast<size_t>(d.file)], d.line) : "";
      const std::string_view body = jsonl ? std::string_view(text) : std::string_view(d.text);
      if (body.empty()) {  // only JSONL can give one: an empty plain file fails in DocumentSource
        ++out.skipped_empty;
        continue;
      }
      const size_t start = out.ids.size();
      if (bos) out.ids.push_back(*bos);
      tok.encode(body, out.ids);
      if (eos) out.ids.push_back(*eos);
      out.lengths.push_back(static_cast<int64_t>(out.ids.size() - start));
    }
  });
  int64_t skipped = 0;
  auto write = [&](const TokenizedBatch& b) {
    const uint32_t* p = b.ids.data();
    for (int64_t n : b.lengths) {
      writer->add_document(p, n);
      p += n;
    }
    skipped += b.skipped_empty;
  };
  std::vector<RawDocument> batch;
  while (source.next_batch(batch, kBatchBytes)) {
    while (pool.in_flight() >= 2 * static_cast<size_t>(workers)) write(pool.take_next());
    pool.submit(std::move(batch));
  }
  while (pool.in_flight() > 0) write(pool.take_next());
  writer->commit();

  log << "prepared " << writer->describe_outputs() << ": " << files.size() << " file" << (files.size() == 1 ? "" : "s")
      << ", " << source.bytes_read() << " bytes -> " << writer->documents() << " documents, " << writer->tokens()
      << " tokens (" << (writer->token_bytes() == 2 ? "uint16" : "uint32") << ", tokenizer " << tok.name()
      << ", vocab " << tok.vocab_size() << ", eos " << token_text(eos) << ", bos " << token_text(bos) << ")";
  if (skipped > 0) log << ", " << skipped << " empty documents skipped";
  std::error_code ec;
  const uintmax_t bytes = o.out_format == "hdf5" ? std::filesystem::file_size(o.out, ec) : 0;
  if (o.out_format == "hdf5") log << ", file " << (ec ? std::string("?") : human_bytes(bytes));
  log << ", " << workers << " worker" << (workers == 1 ? "" : "s") << std::endl;
}

}  // namespace tetra::data
