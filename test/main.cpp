#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.hpp"

// Under AddressSanitizer and ThreadSanitizer, operator new(n, std::nothrow) answers null for an
// impossible n, as without them, only when allocator_may_return_null is set: make it the
// default, so the documented std::bad_alloc holds however the tests are run.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
