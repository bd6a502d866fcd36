#include "launch/commands.h"
