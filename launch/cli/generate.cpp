// `tetra generate MODEL (--prompt TEXT [--tokenizer T] | --prompt-ids 1,2,3) [--max-new-tokens N]
// [--greedy | --temperature X --top-k K --top-p P --seed S] [--json] [--device cpu|cuda|auto]`:
// the continuation of a prompt by a model file (launch/cli/generation_model.h), with a key/value
// cache (models/generation.h), on the CPU in fp32 or on one GPU in bf16. Prints the text (or the ids
// without a tokenizer), or with --json one line {"ids": [prompt and new ids], "text": ..., ...}.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "data/tokenizers/tokenizer.h"
#include "launch/cli/commands.h"
#include "launch/cli/generation_model.h"
#include "models/generation.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      TETRA_FAIL(Usage, "--prompt-ids ", text, ": '", item, "' is not a token id (give ids ≥ 0 separated by commas: ",
                 "1,2,3)");
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

Sampling sampling_of(const GenerateCommand& c) {
  const bool sampled = c.temperature || c.top_k || c.top_p || c.seed;
  if (c.greedy && sampled)
    TETRA_FAIL(Usage, "--greedy with --temperature, --top-k, --top-p or --seed: choose greedy decoding or sampling");
  Sampling s;
  s.greedy = !sampled;
  s.temperature = c.temperature.value_or(1.0);
  s.top_k = c.top_k.value_or(0);
  s.top_p = c.top_p.value_or(1.0);
  s.seed = c.seed.value_or(0);
  if (!(s.temperature > 0) || !std::isfinite(s.temperature))
    TETRA_FAIL(Usage, "--temperature ", s.temperature, ": must be > 0 (use --greedy for the most likely tokens)");
  if (s.top_k < 0) TETRA_FAIL(Usage, "--top-k ", s.top_k, ": must be ≥ 0 (0 keeps every token)");
  if (!(s.top_p > 0 && s.top_p <= 1)) TETRA_FAIL(Usage, "--top-p ", s.top_p, ": must be in (0, 1]");
  return s;
}

Device device_of(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda" || name == "auto") {
    if (cuda_available()) return Device::cuda(0);
    if (name == "cuda") TETRA_FAIL(Usage, "--device cuda: no GPU is visible to this process (or use --device cpu)");
    return Device::cpu();
  }
  TETRA_FAIL(Usage, "--device ", name, ": use cpu, cuda or auto");
}

// --tokenizer, else MODEL's folder's tokenizer.json; null when neither.
std::unique_ptr<data::Tokenizer> tokenizer_of(const GenerateCommand& c, const std::string& folder) {
  if (!c.tokenizer.empty()) return data::make_tokenizer(c.tokenizer);
  std::error_code ec;
  if (!folder.empty() && fs::exists(fs::path(folder) / "tokenizer.json", ec))
    return data::make_tokenizer((fs::path(folder) / "tokenizer.json").string());
  return nullptr;
}

}  // namespace

int generate_command(const GenerateCommand& c) {
  if (c.prompt.empty() == c.prompt_ids.empty())
    TETRA_FAIL(Usage, "give the prompt as --prompt TEXT (with a tokenizer) or as --prompt-ids 1,2,3 (one of the two)");
  if (c.max_new_tokens < 1) TETRA_FAIL(Usage, "--max-new-tokens ", c.max_new_tokens, ": must be ≥ 1");
  GenerationOptions options;
  options.sampling = sampling_of(c);
  options.max_new_tokens = c.max_new_tokens;
  std::vector<int32_t> prompt = c.prompt_ids.empty() ? std::vector<int32_t>{} : parse_ids(c.prompt_ids);
  const Device device = device_of(c.device);
  const DType dtype = device.is_cpu() ? DType::F32 : DType::BF16;

  const int64_t wanted = static_cast<int64_t>(prompt.size() + c.prompt.size()) + c.max_new_tokens;
  GenerationModel g = load_generation_model(c.model, device, dtype, wanted);
  std::unique_ptr<data::Tokenizer> tokenizer = tokenizer_of(c, g.folder);
  if (!c.prompt.empty()) {
    if (!tokenizer)
      TETRA_FAIL(Usage, "--prompt needs a tokenizer: give --tokenizer (byte, a tokenizer.json, a SentencePiece .model) ",
                 "or --prompt-ids; ", c.model, " has no tokenizer.json");
    // A tokenizer whose config adds a begin-of-text token to every sequence gets it here too.
    if (const auto bos = tokenizer->document_tokens().bos)
      if (const auto id = tokenizer->token_id(*bos)) prompt.push_back(static_cast<int32_t>(*id));
    std::vector<uint32_t> ids;
    tokenizer->encode(c.prompt, ids);
    prompt.insert(prompt.end(), ids.begin(), ids.end());
  }
  const int64_t vocab = g.model->params().front()->full_shape.at(0);
  for (int32_t id : prompt)
    if (id >= vocab) TETRA_FAIL(Usage, "prompt token ", id, " is outside the model's vocabulary of ", vocab);
  options.stop_ids = g.eos_ids;

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> out = generate(*g.model, prompt, g.max_length, options, device, dtype);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end());
  if (c.json) {
    nlohmann::json j;
    j["ids"] = all;
    j["text"] = tokenizer ? nlohmann::json(tokenizer->decode(all.data(), static_cast<int64_t>(all.size())))
                          : nlohmann::json(nullptr);
    j["prompt_tokens"] = prompt.size();
    j["new_tokens"] = out.size();
    j["seconds"] = seconds;
    j["device"] = device.str();
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (tokenizer) {
    std::cout << tokenizer->decode(all.data(), static_cast<int64_t>(all.size())) << "\n";
  } else {
    for (size_t i = 0; i < all.size(); ++i) std::cout << (i ? " " : "") << all[i];
    std::cout << "\n";
  }
  std::cerr << "tetra: generated " << out.size() << " tokens in " << seconds << " s on " << device.str() << "\n";
  return 0;
}

}  // namespace tetra::launch
