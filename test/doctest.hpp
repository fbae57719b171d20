// Debian's doctest installs <doctest/doctest.h>; the Meson wrap's subproject exposes <doctest.h>.
#pragma once
#if __has_include(<doctest/doctest.h>)
#include <doctest/doctest.h>
#else
#include <doctest.h>
#endif
