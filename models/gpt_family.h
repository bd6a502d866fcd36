// The GPT-2 family (`model.arch: gpt2`): its spec in the registry (models/model_family.h).
#pragma once
#include "models/model_family.h"

namespace tetra {

const ModelFamily& gpt_family();

}  // namespace tetra
