#include <sluice/sluice.hpp>

int main() {
  sluice::gate gate{2};
  if (!gate.try_admit()) return 1;
  { sluice::permit held{gate}; if (!held || gate.has_capacity()) return 2; }
  gate.note_done();
  return gate.in_flight() == 0 ? 0 : 3;
}
