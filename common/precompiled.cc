// The translation unit that common/precompiled.h is precompiled with; profd's and profctl's
// libraries reuse it.
#include "common/precompiled.h"
