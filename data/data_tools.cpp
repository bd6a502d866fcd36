// placeholder until the data layer lands
#include "data/data_tools.h"
