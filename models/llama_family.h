// The Llama family (`model.arch: llama`) and those built from its blocks (`qwen2`, `qwen3`, `mistral`):
// their specs in the registry (models/model_family.h).
#pragma once
#include "models/model_family.h"

namespace tetra {

const ModelFamily& llama_family();
const ModelFamily& qwen2_family();
const ModelFamily& qwen3_family();
const ModelFamily& mistral_family();

}  // namespace tetra
