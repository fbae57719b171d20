// The gate's parking spots under Relacy: one spot (spot.hpp), made afresh for each explored
// execution. Every gate shares it, as gates whose addresses hash alike share one in the library.
#include "spot.hpp"

namespace sluice_relacy {
spot_holder spot;
}

namespace sluice::detail {
parking_spot& parking_for(const void*) noexcept { return *sluice_relacy::spot; }
}  // namespace sluice::detail
