// Prints tables.hpp as JSON, for make_corpus.py: the seeds are encoded from the decoder's own
// tables, never from a copy. Not part of the fuzz target.
#include <cstdio>

#include "tables.hpp"

template <class T, std::size_t N>
void print(const char* name, const T (&table)[N], bool last = false) {
  std::printf("  \"%s\": [", name);
  for (std::size_t i = 0; i < N; ++i) {
    std::printf(i == 0 ? "%lld" : ", %lld", static_cast<long long>(table[i]));
  }
  std::printf("]%s\n", last ? "" : ",");
}

int main() {
  using namespace fuzz_tables;
  std::printf("{\n");
  // Sizes are printed as signed 64-bit: make_corpus.py takes them modulo 2^64.
  print("sizes", size_table);
  print("ceilings", ceiling_table);
  print("bounds", bound_table);
  print("caps", cap_table);
  std::printf("  \"resource_ops\": %d,\n  \"gate_ops\": %d\n}\n", resource_ops, gate_ops);
}
