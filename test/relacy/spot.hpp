// The one parking spot of the Relacy checks (parking.cpp): every gate's, made afresh for each
// explored execution by its before() and ended by its after() (the library's table lives in
// static storage across executions, which Relacy's mutexes cannot).
#pragma once

#include <new>

#include "parking.hpp"

namespace sluice_relacy {

class spot_holder {
 public:
  // An execution that Relacy stops at a failed check never runs its after(): its spot, whose
  // mutex belonged to that simulation, is then abandoned here, never destroyed.
  void emplace() { spot_ = ::new (storage_) sluice::detail::parking_spot; }
  void reset() {
    if (spot_ != nullptr) spot_->~parking_spot();
    spot_ = nullptr;
  }
  sluice::detail::parking_spot* operator->() const { return spot_; }
  sluice::detail::parking_spot& operator*() const { return *spot_; }

 private:
  alignas(sluice::detail::parking_spot) unsigned char storage_[sizeof(sluice::detail::parking_spot)];
  sluice::detail::parking_spot* spot_ = nullptr;
};

extern spot_holder spot;

}  // namespace sluice_relacy
