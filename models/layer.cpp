#include "models/layer.h"
