#include "ndview_internal.h"
