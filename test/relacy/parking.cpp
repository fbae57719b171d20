// The gate's parking spots under Relacy: one spot, made afresh for each explored execution (the
// library's table lives in static storage across executions, which Relacy's mutexes cannot).
// Every gate shares the one spot, as gates whose addresses hash alike share one in the library.
#include "parking.hpp"

#include <optional>

namespace sluice_relacy {
std::optional<sluice::detail::parking_spot> spot;  // made in each test's before()
}

namespace sluice::detail {
parking_spot& parking_for(const void*) noexcept { return *sluice_relacy::spot; }
}  // namespace sluice::detail
