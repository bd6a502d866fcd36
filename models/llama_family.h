// The Llama family (`model.arch: llama`): its spec in the registry (models/model_family.h).
#pragma once
#include "models/model_family.h"

namespace tetra {

const ModelFamily& llama_family();

}  // namespace tetra
