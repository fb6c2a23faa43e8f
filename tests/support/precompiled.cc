// The translation unit that tests/support/precompiled.h is precompiled with; every test reuses it.
#include "tests/support/precompiled.h"
