#include "launch/train/text_samples.h"

#include <filesystem>

#include "models/generation.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

std::string tokenizer_spec(const Config& cfg) {
  if (!cfg.log.sample_tokenizer.empty()) return cfg.log.sample_tokenizer;
  std::error_code ec;
  const fs::path folder_tokenizer = fs::path(cfg.model.init_from) / "tokenizer.json";
  if (!cfg.model.init_from.empty() && fs::is_regular_file(folder_tokenizer, ec)) return folder_tokenizer.string();
  return "byte";
}

}  // namespace

TextSamples::TextSamples(const Config& cfg, Device device, DType dtype) : cfg_(cfg), device_(device), dtype_(dtype) {
  const std::string spec = tokenizer_spec(cfg);
  try {
    tokenizer_ = data::make_tokenizer(spec);
  } catch (const Error& e) {
    TETRA_FAIL(Config, "log.sample_tokenizer: ", spec, ": ", e.what());
  }
  std::vector<uint32_t> ids;
  if (const auto bos = tokenizer_->document_tokens().bos)
    if (const auto id = tokenizer_->token_id(*bos)) ids.push_back(*id);
  tokenizer_->encode(cfg.log.sample_prompt, ids);
  for (uint32_t id : ids) {
    if (id >= static_cast<uint32_t>(cfg.model.vocab_size))
      TETRA_FAIL(Config, "log.sample_prompt: token ", id, " of tokenizer ", spec, " is outside model.vocab_size = ",
                 cfg.model.vocab_size);
    prompt_.push_back(static_cast<int32_t>(id));
  }
  if (prompt_.empty() || static_cast<int64_t>(prompt_.size()) >= cfg.model.seq_len)
    TETRA_FAIL(Config, "log.sample_prompt: ", prompt_.size(), " tokens; a sample needs 1 to model.seq_len − 1 = ",
               cfg.model.seq_len - 1);
}

bool TextSamples::due(int64_t step) const {
  const int every = cfg_.log.sample_every;
  return every > 0 && (step + 1) % every == 0;
}

void TextSamples::print(Model& model, int64_t step, std::ostream& out) const {
  GenerationOptions options;
  options.max_new_tokens = cfg_.log.sample_tokens;
  std::vector<int32_t> all = prompt_;
  const std::vector<int32_t> more = generate(model, prompt_, cfg_.model.seq_len, options, device_, dtype_);
  all.insert(all.end(), more.begin(), more.end());
  out << "sample at step " << step + 1 << ": " << tokenizer_->decode_escaped(all.data(), static_cast<int64_t>(all.size()))
      << std::endl;
}

}  // namespace tetra::launch
