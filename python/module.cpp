// sluice._sluice: the gate, the limiter, the pool and the memory-pressure monitor as a Python
// extension (pybind11). The package `sluice` (python/sluice/__init__.py) re-exports it and adds
// what is written in Python: admit_async.
//
// Python's rules, kept here: a wait releases the GIL and wakes for signals (so that Ctrl-C
// reaches a thread in admit()); bad arguments raise TypeError or ValueError; no call reaches
// freed memory: a Buffer with a memoryview alive refuses to be retired (BufferError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/gate.hpp"
#include "sluice/limit.hpp"
#include "sluice/pool.hpp"
#include "sluice/pressure.hpp"

namespace py = pybind11;

namespace {

// ---- arguments ----------------------------------------------------------------------------------

// An integer argument: an int, or anything with __index__ (a numpy integer, say); TypeError
// naming the argument otherwise.
py::int_ integer(py::handle v, const char* name) {
  if (!PyIndex_Check(v.ptr())) {
    throw py::type_error(std::string(name) + " must be an int, not " + Py_TYPE(v.ptr())->tp_name);
  }
  return py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
}

// An integer argument of any size, clamped into [lo, hi].
std::int64_t clamped(py::handle v, const char* name, std::int64_t lo, std::int64_t hi) {
  const py::int_ i = integer(v, name);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0) return overflow > 0 ? hi : lo;
  return std::clamp<std::int64_t>(x, lo, hi);
}

// A weight (the gates' n): a non-negative int, not a bool; ValueError below zero. One above
// GATE_LIMIT comes back as GATE_LIMIT + 1, which every call treats as it treats any such weight
// (the try forms refuse it, the waiting forms raise ValueError, note_submitted saturates).
std::int64_t weight_arg(py::handle v) {
  if (PyBool_Check(v.ptr())) throw py::type_error("n must be an int, not bool");
  const std::int64_t n = clamped(v, "n", -1, sluice::gate_limit + 1);
  if (n < 0) throw py::value_error("n must be >= 0");
  return n;
}

// A weight that a wait may wait for: ValueError above GATE_LIMIT, which no cap admits.
std::int64_t weight_to_wait_for(py::handle v) {
  const std::int64_t n = weight_arg(v);
  if (n > sluice::gate_limit) throw py::value_error("n must be at most GATE_LIMIT: no cap admits more");
  return n;
}

// A size: a non-negative integer, clamped to SIZE_MAX above (every size past the ceiling behaves
// alike); a negative one raises ValueError naming the argument.
std::size_t size_arg(py::handle v, const char* name) {
  const py::int_ i = integer(v, name);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow < 0 || (overflow == 0 && x < 0)) throw py::value_error(std::string(name) + " must be >= 0");
  if (overflow > 0) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(x);
}

// A timeout in seconds: None (for ever) or a real number, not a bool or a str; inf, and a number
// too large for a float, wait for ever; a negative one or NaN raises ValueError (as
// threading.Lock.acquire does). admit, permit and admit_async all read it here.
std::optional<double> seconds(py::handle timeout) {
  if (timeout.is_none()) return std::nullopt;
  if (PyBool_Check(timeout.ptr()) || !PyNumber_Check(timeout.ptr()) || PyUnicode_Check(timeout.ptr())) {
    throw py::type_error(std::string("timeout must be None or a number of seconds, not ") +
                         Py_TYPE(timeout.ptr())->tp_name);
  }
  const double t = PyFloat_AsDouble(timeout.ptr());
  if (t == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
    PyErr_Clear();  // an int beyond a float's range
    if (PyObject_RichCompareBool(timeout.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
      throw py::value_error("timeout must be None or a number >= 0");
    }
    return std::nullopt;
  }
  if (std::isnan(t) || t < 0) throw py::value_error("timeout must be None or a number >= 0");
  if (std::isinf(t)) return std::nullopt;
  return t;
}

using clock = std::chrono::steady_clock;

std::optional<clock::time_point> deadline_of(std::optional<double> timeout) {
  if (!timeout) return std::nullopt;
  return clock::now() + std::chrono::ceil<clock::duration>(
                            std::chrono::duration<double>(std::min(*timeout, 3.15e9)));  // a century
}

// The C++ object behind `self`, which must have been made by calling its class: an object made
// by T.__new__ alone holds none, and raises TypeError here rather than reach uninitialised memory.
template <class T>
T& live(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  auto v_h = inst->get_value_and_holder(py::detail::get_type_info(typeid(T)));
  if (!v_h || !v_h.holder_constructed()) {
    throw py::type_error(std::string(Py_TYPE(self.ptr())->tp_name) +
                         " is not initialised: make one by calling its class");
  }
  return *static_cast<T*>(v_h.value_ptr());
}

// Every class of the module keeps its objects' class: assigning __class__ (which CPython allows
// between the module's classes, alike in layout) would put one C++ object behind another's calls.
// (The descriptor goes into the type's dict itself: setattr on a type would set the metaclass's.)
template <class Class>
Class& class_fixed(Class& cls) {
  const py::cpp_function get([](py::handle self) { return py::type::of(self); });
  const py::cpp_function set([](py::handle, py::handle) {
    throw py::type_error("the class of a sluice object cannot be changed");
  });
  const py::object descriptor = py::module_::import("builtins").attr("property")(get, set);
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (PyDict_SetItemString(type->tp_dict, "__class__", descriptor.ptr()) != 0) throw py::error_already_set();
  PyType_Modified(type);
  return cls;
}

// Types that Python code cannot make (only the module's calls answer them): __new__ refuses.
PyObject* refuse_new(PyTypeObject* type, PyObject*, PyObject*) {
  PyErr_Format(PyExc_TypeError, "cannot create '%s' instances: the module's calls make them", type->tp_name);
  return nullptr;
}

void made_by_the_module_only(py::handle type) {
  reinterpret_cast<PyTypeObject*>(type.ptr())->tp_new = refuse_new;
}

// ---- the gates ----------------------------------------------------------------------------------

// sluice.GateClosed (a RuntimeError), which a closed gate's waits raise: made once, at import.
py::object& gate_closed_type() {
  static py::object* type = nullptr;  // leaked: it must outlive every wait, even at exit
  if (type == nullptr) type = new py::object();
  return *type;
}
py::object gate_closed_error() { return gate_closed_type()("the gate is closed"); }

// How long a waiting thread goes without looking for signals: Python's own waits return at once
// on a signal in the main thread; this one within a slice.
constexpr auto signal_slice = std::chrono::milliseconds(20);

// admit(timeout, n): waits for room for n (at most GATE_LIMIT: weight_to_wait_for) with the GIL
// released, in slices between which the main thread runs its signal handlers (a
// KeyboardInterrupt propagates, with nothing admitted).
template <class Gate>
bool admit(Gate& g, std::optional<double> timeout, std::int64_t n) {
  const auto deadline = deadline_of(timeout);
  if (sluice::detail::waiting<Gate>::admit_first(g, n)) return true;  // GateClosed before the deadline: not a timeout
  // One wait as the gate's statistics count it, however many slices: a signal's exception ends
  // it cancelled.
  sluice::detail::waiting<Gate> wait(g, n);
  for (;;) {
    const auto now = clock::now();
    if (deadline && now >= *deadline) return wait.gave_up();
    auto until = now + signal_slice;
    if (deadline) until = std::min(until, *deadline);
    // The GIL released and taken back by hand, not by a guard's destructor: a daemon thread that
    // takes it back while the interpreter finalizes is ended there by a forced unwind, which a
    // destructor (noexcept) would turn into std::terminate.
    PyThreadState* const saved = PyEval_SaveThread();
    bool admitted;
    try {
      admitted = wait.until(until);
    } catch (...) {
      PyEval_RestoreThread(saved);
      throw;
    }
    PyEval_RestoreThread(saved);
    if (admitted) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

sluice::pressure pressure_of(const py::handle& p) {
  if (py::isinstance<sluice::pressure>(p)) return p.cast<sluice::pressure>();
  if (py::isinstance<py::str>(p)) {
    const auto s = p.cast<std::string>();
    if (s == "ok") return sluice::pressure::ok;
    if (s == "soft") return sluice::pressure::soft;
    if (s == "hard") return sluice::pressure::hard;
    throw py::value_error("pressure must be 'ok', 'soft' or 'hard' (or sluice.Pressure), not '" + s + "'");
  }
  throw py::type_error("pressure must be a str or sluice.Pressure");
}

// `with gate.permit(timeout, n=n):` holds an admission of n for the block. One permit serves one with
// block at a time (entering it again while it is held or entering raises ValueError): a second
// thread makes its own with gate.permit().
template <class Gate>
struct permit {
  py::object owner;  // keeps the gate alive while the permit lives
  Gate* gate;
  std::optional<double> timeout;
  std::int64_t units = 1;
  bool busy = false;  // entering, or held
  bool held = false;
};

// ---- admit_async: the gate's own async waiters, handed to an event loop -------------------------
//
// admit_async (sluice/__init__.py) waits as <sluice/asio.hpp> does, on the gate's queue of async
// waiters (sluice/detail/async_wait.hpp, docs/asio.md), with an event loop in the executor's
// place. No thread is involved: each wait is a node of its gate's FIFO queue, and the grant
// that admits it (inside the note_done, set_cap or adjust that made room, on whatever thread)
// hands the outcome over to the node's loop_channel, which wakes its loop through an eventfd.
//
// A loop_channel, one per event loop (the Python _LoopChannel owns the only channel_handle):
// an eventfd that the loop watches (loop.add_reader), the outcomes delivered and not yet drained
// (oldest first), and every wait of the loop not yet drained, by id. It holds no Python object:
// a hand-over (any thread, GIL or not, perhaps while a fork waits for it) takes the channel's
// mutex, appends, writes the eventfd when the list was empty, and returns. The drain (the loop's
// reader: its thread, with the GIL) reads the eventfd, takes the list, and resolves each wait's
// future, found by id in the Python channel's dict; an admission whose future is gone or done
// goes back to the gate (note_done).
//
// Lifetimes. A node keeps its channel (shared_ptr: the hand-over writes to its eventfd) and its
// C++ gate (the gates' pybind11 holder is a shared_ptr) alive: its discard may give an admission
// back on any thread without the GIL, after the Python Gate is gone, so it reaches the gate
// through a strong C++ reference and never through a Python object. A queued node thus keeps its
// gate alive too (the gate's destructor never finds one of these queued), until the wait is
// drained, cancelled, or withdrawn by the channel's close. An open channel's nodes are freed by
// the holder of the GIL alone (drain, cancel, close), so cancel may use a node it found in
// `waits`; a closed channel's nodes may still be handed over on another thread (taken by a grant
// before the close), and refs lets the close and that node's discard free it in either order.
//
// Lock order: the GIL, then a channel's mutex or a parking spot's, never both: nothing holding
// a channel's mutex takes a spot's (a fork holds every spot's while it waits for the hand-overs,
// which take a channel's), and nothing is freed under a channel's mutex (a node's destructor may
// destroy its gate).

struct loop_channel;

// One admit_async wait: a node of its gate's queue of async waiters. Not polymorphic: the
// queue's async_waiter is its only base, at its start.
struct py_waiter : sluice::detail::async_waiter {
  template <class Gate>
  py_waiter(std::shared_ptr<loop_channel> c, std::uint64_t i, std::shared_ptr<Gate> g) noexcept
      : channel(std::move(c)), owner(std::move(g)), note_done(&note_done_of<Gate>), id(i) {}
  py_waiter(const py_waiter&) = delete;
  py_waiter& operator=(const py_waiter&) = delete;

  void give_back() noexcept { note_done(owner.get(), units); }  // through the node's own reference

  const std::shared_ptr<loop_channel> channel;
  const std::shared_ptr<void> owner;  // the C++ gate, shared with its Python object's holder
  void (*const note_done)(void* gate, std::int64_t n) noexcept;
  const std::uint64_t id;  // the key of its future in the Python channel's dict
  sluice::detail::async_waiter* slot = nullptr;  // the handle (async_cancel): this node while queued
  // Under the channel's mutex (stable once the channel is closed):
  py_waiter* out_next = nullptr;    // the channel's list of delivered outcomes
  bool handed = false;              // its outcome is in that list
  bool admitted = false;            // the outcome
  py_waiter* close_next = nullptr;  // the close's own list
  // The channel's reference, and the close's for a node that may be handed over meanwhile.
  std::atomic<int> refs{1};

 private:
  template <class Gate>
  static void note_done_of(void* gate, std::int64_t n) noexcept {
    static_cast<Gate*>(gate)->note_done(n);
  }
};

void unref(py_waiter* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}

struct loop_channel {
  explicit loop_channel(int f) noexcept : fd(f) {}
  loop_channel(const loop_channel&) = delete;
  loop_channel& operator=(const loop_channel&) = delete;
  ~loop_channel() { ::close(fd); }

  std::mutex mutex;
  const int fd;  // the eventfd, open while the channel lives (a hand-over may write to it)
  bool closed = false;                                   // under mutex
  std::unordered_map<std::uint64_t, py_waiter*> waits;   // every wait not yet drained; under mutex
  py_waiter* out_head = nullptr;                         // delivered, oldest first; under mutex
  py_waiter** out_tail = &out_head;

  // Under mutex: takes p out of the delivered list.
  void unlink_delivered(py_waiter* p) noexcept {
    for (py_waiter** link = &out_head; *link != nullptr; link = &(*link)->out_next) {
      if (*link == p) {
        *link = p->out_next;
        if (out_tail == &p->out_next) out_tail = link;
        p->out_next = nullptr;
        return;
      }
    }
  }
};

// async_waiter::hand_over: queues the outcome and wakes the loop; false once the channel is
// closed (its loop will not drain again). Takes no GIL, calls no gate, waits for nothing but the
// channel's mutex, which nobody holds for long.
bool deliver(sluice::detail::async_waiter* w, bool admitted) noexcept {
  auto* const p = static_cast<py_waiter*>(w);
  loop_channel& c = *p->channel;
  std::lock_guard lock(c.mutex);
  if (c.closed) return false;
  p->admitted = admitted;
  p->handed = true;
  const bool was_empty = c.out_head == nullptr;
  *c.out_tail = p;
  c.out_tail = &p->out_next;
  if (was_empty) {
    // Under the mutex: once it is let go, the drain may free the node, and with it the channel
    // and its eventfd. Nonblocking; the counter cannot fill (2^64 - 2 writes).
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(c.fd, &one, sizeof one);
  }
  return true;
}

// async_waiter::discard: the channel was closed before the outcome reached it.
void drop(sluice::detail::async_waiter* w, bool admitted) noexcept {
  auto* const p = static_cast<py_waiter*>(w);
  if (admitted) p->give_back();
  unref(p);
}

// sluice._sluice._Channel: the Python side's hold on one loop's channel. Every call is made with
// the GIL, on the loop's thread, except close (also from a finalizer, or in a forked child).
class channel_handle {
 public:
  channel_handle() : c_(make()) {}
  channel_handle(const channel_handle&) = delete;
  channel_handle& operator=(const channel_handle&) = delete;
  ~channel_handle() { close(); }  // nobody can drain it any more

  int fileno() const noexcept { return c_->fd; }
  bool closed() const noexcept {
    std::lock_guard lock(c_->mutex);
    return c_->closed;
  }
  std::size_t size() const noexcept {
    std::lock_guard lock(c_->mutex);
    return c_->waits.size();
  }

  // Queues a wait for an admission of n (in [1, GATE_LIMIT]) of g, whose Python object holds
  // `owner`. MemoryError (and nothing queued) when the node cannot be made; the grant may hand it
  // over at once.
  template <class Gate>
  void wait(Gate& g, std::shared_ptr<Gate> owner, std::uint64_t id, std::int64_t n) {
    auto node = std::make_unique<py_waiter>(c_, id, std::move(owner));
    node->hand_over = &deliver;
    node->discard = &drop;
    node->gate = &g;
    node->units = n;
    node->handle = &node->slot;
    {
      std::lock_guard lock(c_->mutex);
      if (c_->closed) throw std::runtime_error("the event loop's channel is closed");
      if (!c_->waits.emplace(id, node.get()).second) throw py::value_error("a wait with this id is pending");
    }
    sluice::detail::async_wait(g, *node.release());  // the queue's, and the channel's, from here on
  }

  // The wait `id` stopped waiting (cancelled, timed out, its coroutine closed) and its future was
  // taken out of the Python dict: takes the node out of the queue (nothing counted), or, if a
  // grant took it first and its outcome has arrived, gives that admission back now, so that the
  // count is exact when the task resumes. Only an outcome still being handed over on another
  // thread is left to the drain, which finds no future for it and gives it back.
  void cancel(std::uint64_t id, bool timed_out) noexcept {
    loop_channel& c = *c_;
    py_waiter* p = nullptr;
    {
      std::lock_guard lock(c.mutex);
      const auto it = c.waits.find(id);
      if (it == c.waits.end()) return;  // drained already, or the channel closed
      p = it->second;
    }
    // p stays alive: an open channel's nodes are freed only under the GIL, which this thread holds.
    sluice::detail::async_cancel(p->gate, &p->slot, timed_out);  // hands it over unadmitted if still queued
    {
      std::lock_guard lock(c.mutex);
      if (c.closed || !p->handed) return;
      c.unlink_delivered(p);
      c.waits.erase(id);
    }
    if (p->admitted) p->give_back();
    unref(p);
  }

  // The loop's reader: hands every outcome delivered so far to its future in `futures` (a dict,
  // id -> future, from which each is popped): True for an admission, GateClosed for a wait that
  // its gate's close() turned away; a wait that left unadmitted otherwise (its gate destroyed)
  // cancels its future. An admission whose future is missing or
  // done goes back to the gate. An exception from a future is raised once all are handled.
  void drain(py::handle futures) {
    loop_channel& c = *c_;
    std::uint64_t count = 0;
    {
      // A closed channel's eventfd may be shared with a living one: a forked child's channels
      // are closed (after_in_child), and its read would take the parent's wake-up.
      std::lock_guard lock(c.mutex);
      if (c.closed) return;
    }
    // First: an outcome delivered after this read finds the list empty and writes again.
    [[maybe_unused]] const ssize_t n = ::read(c.fd, &count, sizeof count);
    py_waiter* list = nullptr;
    {
      std::lock_guard lock(c.mutex);
      if (c.closed) return;
      list = c.out_head;
      c.out_head = nullptr;
      c.out_tail = &c.out_head;
      for (py_waiter* p = list; p != nullptr; p = p->out_next) c.waits.erase(p->id);
    }
    std::exception_ptr first;
    while (list != nullptr) {
      py_waiter* const p = list;
      list = p->out_next;
      bool kept = false;  // the admission now belongs to the future
      try {
        const py::object future = futures.attr("pop")(p->id, py::none());
        if (!future.is_none() && !future.attr("done")().cast<bool>()) {
          if (p->admitted) {
            try {
              future.attr("set_result")(true);
              kept = true;
            } catch (...) {  // set or not: as the future says
              kept = future.attr("done")().cast<bool>() && !future.attr("cancelled")().cast<bool>();
              throw;
            }
          } else if (p->closed) {
            future.attr("set_exception")(gate_closed_error());
          } else {
            future.attr("cancel")();
          }
        }
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      if (p->admitted && !kept) p->give_back();
      unref(p);
    }
    if (first) std::rethrow_exception(first);
  }

  // The loop closed (or the channel is a forked child's copy): no drain will come. Withdraws the
  // waits still queued (nothing counted), gives back the admissions delivered and not drained,
  // and leaves those being handed over on other threads to their discard. Never writes to the
  // eventfd (a forked child shares it with its parent). Idempotent.
  void close() noexcept {
    loop_channel& c = *c_;
    py_waiter* all = nullptr;
    {
      std::lock_guard lock(c.mutex);
      if (c.closed) return;
      c.closed = true;
      for (const auto& [id, p] : c.waits) {
        if (!p->handed) p->refs.fetch_add(1, std::memory_order_relaxed);  // the discard's, perhaps
        p->close_next = all;
        all = p;
      }
      c.waits.clear();
      c.out_head = nullptr;
      c.out_tail = &c.out_head;
    }
    // The queued ones first: an admission given back would otherwise go to one of them.
    for (py_waiter* p = all; p != nullptr; p = p->close_next) {
      if (!p->handed && sluice::detail::async_withdraw(*p)) p->refs.fetch_sub(1, std::memory_order_relaxed);
    }
    while (all != nullptr) {
      py_waiter* const p = all;
      all = p->close_next;
      if (p->handed && p->admitted) p->give_back();
      // A node taken by a grant or a cancellation before the close and not handed over: its
      // hand_over finds the channel closed, and its discard gives the admission back and drops
      // the other reference.
      unref(p);
    }
  }

 private:
  static std::shared_ptr<loop_channel> make() {
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
      PyErr_SetFromErrno(PyExc_OSError);
      throw py::error_already_set();
    }
    try {
      return std::make_shared<loop_channel>(fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }

  std::shared_ptr<loop_channel> c_;
};

// The shared_ptr that holds the C++ object behind `self` (a gate's holder).
template <class T>
std::shared_ptr<T> holder_of(py::handle self) {
  live<T>(self);  // made by calling its class, or TypeError
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  auto v_h = inst->get_value_and_holder(py::detail::get_type_info(typeid(T)));
  return v_h.template holder<std::shared_ptr<T>>();
}

template <class Gate>
void bind_gate(py::module_& m, const char* name, const char* doc) {
  using P = permit<Gate>;
  const std::string permit_name = std::string(name) + "Permit";
  py::class_<P> permit_class(m, permit_name.c_str(), "One admission of a gate, held for a with block (Gate.permit).",
                             py::is_final());
  made_by_the_module_only(class_fixed(permit_class));
  permit_class
          .def("__enter__",
               [](P& p) -> P& {
                 if (p.busy) throw py::value_error("this permit is already in a with block: make one per block");
                 p.busy = true;  // before admit releases the GIL
                 bool admitted = false;
                 try {
                   admitted = admit(*p.gate, p.timeout, p.units);
                 } catch (...) {
                   p.busy = false;
                   throw;
                 }
                 if (!admitted) {
                   p.busy = false;
                   PyErr_SetString(PyExc_TimeoutError, "not admitted within the timeout");
                   throw py::error_already_set();
                 }
                 p.held = true;
                 return p;
               },
               py::return_value_policy::reference_internal)
          .def("__exit__", [](P& p, const py::args&) {
            if (p.held) p.gate->note_done(p.units);
            p.held = p.busy = false;
            return false;
          });

  // Not final: the package's Gate adds admit_async in Python. live() refuses what is not one.
  // Held by a shared_ptr, which admit_async's waits share (channel_handle: Lifetimes).
  py::class_<Gate, std::shared_ptr<Gate>> gate_class(m, name, doc);
  class_fixed(gate_class)
      .def(py::init([](py::handle cap) { return new Gate(clamped(cap, "cap", 1, sluice::gate_limit)); }),
           py::arg("cap"), "A gate with nothing in flight; cap clamped into [1, 2**31 - 1].")
      .def_property_readonly("cap", [](py::handle g) { return live<Gate>(g).cap(); }, "The cap.")
      .def_property_readonly("in_flight", [](py::handle g) { return live<Gate>(g).in_flight(); },
                             "The count of work in flight.")
      .def_property_readonly("has_capacity", [](py::handle g) { return live<Gate>(g).has_capacity(); },
                             "in_flight < cap.")
      .def("note_submitted", [](py::handle g, py::handle n) { live<Gate>(g).note_submitted(weight_arg(n)); },
           py::arg("n") = 1, "in_flight + n, even past the cap (at most GATE_LIMIT); never blocks.")
      .def("note_done", [](py::handle g, py::handle n) { live<Gate>(g).note_done(weight_arg(n)); },
           py::arg("n") = 1, "in_flight - n, never below zero; never blocks.")
      .def("try_admit", [](py::handle g, py::handle n) { return live<Gate>(g).try_admit(weight_arg(n)); },
           py::arg("n") = 1,
           "If in_flight + n <= cap: in_flight + n and True, in one step (all n or nothing). n = 0 is\n"
           "admitted at once; one above GATE_LIMIT never.")
      .def("admit",
           [](py::handle g, py::handle timeout, py::handle n) {
             const std::int64_t units = weight_to_wait_for(n);
             return admit(live<Gate>(g), seconds(timeout), units);
           },
           py::arg("timeout") = py::none(), py::kw_only(), py::arg("n") = 1,
           "Waits (GIL released) until in_flight + n <= cap and admits n: True; False when timeout\n"
           "(seconds) passed first, with nothing counted. None waits for ever (for a cap that grows,\n"
           "when n is above it). A signal handler's exception (KeyboardInterrupt) propagates from the\n"
           "wait, with nothing counted. ValueError for n above GATE_LIMIT. Waiting threads are not\n"
           "queued: a smaller request that fits goes ahead of a waiting larger one.")
      .def("set_cap", [](py::handle g, py::handle cap) { live<Gate>(g).set_cap(clamped(cap, "cap", 1, sluice::gate_limit)); },
           py::arg("cap"), "cap = clamp(cap, 1, 2**31 - 1); in_flight untouched.")
      .def("adjust",
           [](py::handle g, py::handle p, py::handle max_cap) {
             live<Gate>(g).adjust(pressure_of(p), clamped(max_cap, "max_cap", std::numeric_limits<std::int64_t>::min(),
                                                          std::numeric_limits<std::int64_t>::max()));
           },
           py::arg("pressure"), py::arg("max_cap"),
           "pressure is 'ok', 'soft' or 'hard' (or a sluice.Pressure). 'ok': cap = min(cap + 1,\n"
           "max_cap) (a cap above max_cap drops to it); 'soft', 'hard': cap - 1, never below 1.")
      .def("permit",
           [](py::handle self, py::handle timeout, py::handle n) {
             const std::int64_t units = weight_to_wait_for(n);
             return P{py::reinterpret_borrow<py::object>(self), &live<Gate>(self), seconds(timeout), units};
           },
           py::arg("timeout") = py::none(), py::kw_only(), py::arg("n") = 1,
           "A context manager that holds an admission of n for its block: admit(timeout, n=n) on\n"
           "entry (TimeoutError when not admitted in time), note_done(n) on exit.")
      .def("_wait_async",
           [](py::handle self, py::handle channel, std::uint64_t id, py::handle n) {
             const std::int64_t units = weight_to_wait_for(n);
             if (units == 0) throw py::value_error("a wait for n = 0 is admitted at once: nothing to queue");
             live<channel_handle>(channel).wait(live<Gate>(self), holder_of<Gate>(self), id, units);
           },
           py::arg("channel"), py::arg("id"), py::arg("n") = 1,
           "admit_async's: queues a wait for an admission of n (1 to GATE_LIMIT), delivered to\n"
           "`channel` (a _Channel) under `id`. MemoryError, with nothing queued, when it cannot be made.")
      .def("close", [](py::handle g) { live<Gate>(g).close(); },
           "For good: every admission is refused from now on (try_admit: False; admit, permit and\n"
           "admit_async: GateClosed), every waiting thread and task raises GateClosed at once;\n"
           "note_done still counts down, and set_cap and adjust never reopen it (cap reads 0).")
      .def_property_readonly("closed", [](py::handle g) { return live<Gate>(g).closed(); },
                             "Whether close() ran.")
      .def("stats", [](py::handle g) { return live<Gate>(g).stats(); },
           "What the gate has done (sluice.GateStats): admissions by outcome, waits by how they ended,\n"
           "waiting and in flight now, the highest in flight. Each count is exact for the calls that\n"
           "returned before this one began.")
      .def("_admit_first",
           [](py::handle g, py::handle n) { return sluice::detail::waiting<Gate>::admit_first(live<Gate>(g), weight_arg(n)); },
           py::arg("n") = 1,
           "admit_async's first try: True when admitted at once; False when it must wait (counting no\n"
           "refusal); GateClosed when closed; ValueError for n above GATE_LIMIT.")
      .def("__repr__", [name](py::handle self) {
        const Gate& g = live<Gate>(self);
        return "<sluice." + std::string(name) + " in_flight=" + std::to_string(g.in_flight()) +
               " cap=" + std::to_string(g.cap()) + (g.closed() ? " closed" : "") + ">";
      });
}

// ---- the limiter --------------------------------------------------------------------------------
//
// sluice.Limiter is sluice::limiter<sluice::gate> (docs/limit.md): it owns its Gate's cap. The
// algorithms (AIMD, Vegas, Gradient2) are the C++ values, which a Limiter copies when it is made.
// Every call runs with the GIL held but Limiter.admit's wait, so no two Python threads are ever
// in the limiter's turn at once: a Python sample is never skipped.

// A real number (a ratio, a smoothing): an int or a float, not a bool or a str. NaN passes: the
// algorithms take their default for it (docs/limit.md); an int past a float's range is +-inf.
double real_arg(py::handle v, const char* name) {
  if (PyBool_Check(v.ptr()) || !PyNumber_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || PyComplex_Check(v.ptr())) {
    throw py::type_error(std::string(name) + " must be a number, not " + Py_TYPE(v.ptr())->tp_name);
  }
  const double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
    PyErr_Clear();
    const bool negative = PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1;
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  return x;
}

// A duration in seconds (an RTT, AIMD's timeout): NaN or below zero raises ValueError, as a
// wait's timeout does; inf, and anything past int64 nanoseconds (292 years), saturates.
std::chrono::nanoseconds duration_arg(py::handle v, const char* name) {
  const double t = real_arg(v, name);
  if (std::isnan(t) || t < 0) throw py::value_error(std::string(name) + " must be a number of seconds >= 0");
  const double ns = t * 1e9;
  if (ns >= 9.2e18) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(std::llround(ns));
}

// An integer option (a limit, a window, a unit): an int of any size, not a bool, clamped into
// [lo, hi]; the algorithms and the limiter clamp it further, as docs/limit.md says.
std::int64_t int_option(py::handle v, const char* name, std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                        std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  if (PyBool_Check(v.ptr())) throw py::type_error(std::string(name) + " must be an int, not bool");
  return clamped(v, name, lo, hi);
}

// A count in flight (a sample's): an int >= 0, not a bool; ValueError below zero; saturates above.
std::int64_t count_arg(py::handle v, const char* name) {
  const std::int64_t n = int_option(v, name, -1, std::numeric_limits<std::int64_t>::max());
  if (n < 0) throw py::value_error(std::string(name) + " must be >= 0");
  return n;
}

std::uint64_t seed_arg(py::handle v) {
  if (PyBool_Check(v.ptr())) throw py::type_error("seed must be an int, not bool");
  const py::int_ i = integer(v, "seed");
  const unsigned long long x = PyLong_AsUnsignedLongLong(i.ptr());
  if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();  // negative, or 2**64 and above
    throw py::value_error("seed must be in [0, 2**64)");
  }
  return x;
}

sluice::outcome outcome_of(py::handle o) {
  if (py::isinstance<sluice::outcome>(o)) return o.cast<sluice::outcome>();
  if (py::isinstance<py::str>(o)) {
    const auto s = o.cast<std::string>();
    if (s == "done") return sluice::outcome::done;
    if (s == "dropped") return sluice::outcome::dropped;
    if (s == "ignored") return sluice::outcome::ignored;
    throw py::value_error("outcome must be 'done', 'dropped' or 'ignored' (or sluice.Outcome), not '" + s + "'");
  }
  throw py::type_error(std::string("outcome must be a str or sluice.Outcome, not ") + Py_TYPE(o.ptr())->tp_name);
}

double in_seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// What the three algorithms' classes share: the limit, and update() to drive one by hand.
template <class Alg>
py::class_<Alg>& bind_algorithm_calls(py::class_<Alg>& cls, const char* name) {
  return class_fixed(cls)
      .def_property_readonly("limit", [](py::handle a) { return live<Alg>(a).limit(); }, "The limit now.")
      .def("update",
           [](py::handle a, py::handle rtt, py::handle in_flight, py::handle dropped) {
             Alg& alg = live<Alg>(a);
             // A bool and nothing else, as the module's other flags: dropped=1 or None is a mistake.
             if (!PyBool_Check(dropped.ptr())) throw py::type_error("dropped must be a bool");
             return alg.update({duration_arg(rtt, "rtt"), count_arg(in_flight, "in_flight"), dropped.ptr() == Py_True});
           },
           py::arg("rtt"), py::arg("in_flight"), py::arg("dropped") = false,
           "Takes one sample (rtt in seconds; in_flight: the count at its admission, its own included)\n"
           "and answers the new limit. An rtt of 0 changes nothing but a drop's. For driving the algorithm by hand:\n"
           "a Limiter works on its own copy.")
      .def("__repr__", [name](py::handle a) {
        return "<sluice." + std::string(name) + " limit=" + std::to_string(live<Alg>(a).limit()) + ">";
      });
}

// The Python Limiter: the C++ limiter and what keeps its gate alive.
struct py_limiter {
  py_limiter(py::object g, std::shared_ptr<sluice::gate> c, sluice::limit_algorithm a, sluice::limiter_options o)
      : gate_object(std::move(g)), gate(std::move(c)), limiter(*gate, std::move(a), o) {}
  py::object gate_object;              // the Python Gate: Limiter.gate
  std::shared_ptr<sluice::gate> gate;  // its C++ gate, which the limiter refers to
  sluice::limiter<sluice::gate> limiter;
};

// sluice.TimedPermit: a sluice::timed_permit, made by limiter::adopt once the units are admitted
// (Limiter.admit waits on the gate itself, in slices, for signals, counted as one wait).
struct py_timed_permit {
  py_timed_permit(py::object o, py_limiter& l, std::int64_t n) : owner(std::move(o)), permit(l.limiter.adopt(n)) {}
  py_timed_permit(const py_timed_permit&) = delete;
  py_timed_permit& operator=(const py_timed_permit&) = delete;
  // Collected while held: the units go back unsampled. Unlike C++'s destructor (done), a Python
  // object is collected when the collector gets to it, which times nothing of the service.
  ~py_timed_permit() { release(sluice::outcome::ignored); }

  void release(sluice::outcome how) noexcept { permit.release(how); }  // the sample, then the units; once
  bool held() const noexcept { return static_cast<bool>(permit); }

  py::object owner;  // the Limiter, alive while the permit lives (declared first: destroyed last)
  sluice::timed_permit<sluice::gate> permit;
  bool entered = false;  // in a with block (once: as Gate.permit)
};

py::object timed(py::handle limiter, py_limiter& l, std::int64_t n) {
  return py::cast(std::make_unique<py_timed_permit>(py::reinterpret_borrow<py::object>(limiter), l, n));
}

sluice::limit_algorithm algorithm_of(py::handle a) {
  if (py::isinstance<sluice::aimd_limit>(a)) return live<sluice::aimd_limit>(a);
  if (py::isinstance<sluice::vegas_limit>(a)) return live<sluice::vegas_limit>(a);
  if (py::isinstance<sluice::gradient2_limit>(a)) return live<sluice::gradient2_limit>(a);
  throw py::type_error(std::string("algorithm must be a sluice.AIMD, sluice.Vegas or sluice.Gradient2, not ") +
                       Py_TYPE(a.ptr())->tp_name);
}

void bind_limiter(py::module_& m) {
  py::enum_<sluice::outcome>(m, "Outcome", "How an admitted piece of work ended (TimedPermit.release, Limiter.sample).")
      .value("DONE", sluice::outcome::done, "a sample")
      .value("DROPPED", sluice::outcome::dropped, "a sample marked as a drop: the service shed the work or it timed out")
      .value("IGNORED", sluice::outcome::ignored, "no sample: a cancelled request says nothing of the latency");

  py::class_<sluice::aimd_limit> aimd(m, "AIMD",
                                      "Additive increase, multiplicative decrease: +1 per sample while half the limit\n"
                                      "is in flight; times backoff_ratio (at least -1) on a drop or an RTT past timeout.",
                                      py::is_final());
  bind_algorithm_calls(aimd, "AIMD")
      .def(py::init([](py::handle initial_limit, py::handle backoff_ratio, py::handle timeout, py::handle min_limit,
                       py::handle max_limit) {
             return sluice::aimd_limit{{.initial_limit = int_option(initial_limit, "initial_limit"),
                                        .backoff_ratio = real_arg(backoff_ratio, "backoff_ratio"),
                                        .timeout = duration_arg(timeout, "timeout"),
                                        .min_limit = int_option(min_limit, "min_limit"),
                                        .max_limit = int_option(max_limit, "max_limit")}};
           }),
           py::kw_only(), py::arg("initial_limit") = 10, py::arg("backoff_ratio") = 0.9, py::arg("timeout") = 5.0,
           py::arg("min_limit") = 1, py::arg("max_limit") = 200,
           "backoff_ratio clamped into [0.5, 1) (NaN: 0.9); timeout in seconds (at least 1 ns, inf: never);\n"
           "the limits clamped into [1, GATE_LIMIT], max_limit at least min_limit, initial_limit between.");

  py::class_<sluice::vegas_limit> vegas(m, "Vegas",
                                        "TCP Vegas' queue estimate, limit x (1 - lowest RTT / RTT), against log10 thresholds.",
                                        py::is_final());
  bind_algorithm_calls(vegas, "Vegas")
      .def(py::init([](py::handle initial_limit, py::handle max_limit, py::handle smoothing, py::handle probe_multiplier,
                       py::handle seed, py::handle alpha, py::handle beta, py::handle threshold) {
             return sluice::vegas_limit{{.initial_limit = int_option(initial_limit, "initial_limit"),
                                         .max_limit = int_option(max_limit, "max_limit"),
                                         .smoothing = real_arg(smoothing, "smoothing"),
                                         .probe_multiplier = real_arg(probe_multiplier, "probe_multiplier"),
                                         .seed = seed_arg(seed),
                                         .alpha = static_cast<int>(int_option(alpha, "alpha", 0, 1 << 20)),
                                         .beta = static_cast<int>(int_option(beta, "beta", 0, 1 << 20)),
                                         .threshold = static_cast<int>(int_option(threshold, "threshold", 0, 1 << 20))}};
           }),
           py::kw_only(), py::arg("initial_limit") = 20, py::arg("max_limit") = 1000, py::arg("smoothing") = 1.0,
           py::arg("probe_multiplier") = 30.0, py::arg("seed") = 0, py::arg("alpha") = 3, py::arg("beta") = 6,
           py::arg("threshold") = 1,
           "smoothing clamped into [0, 1] (NaN: 1); probe_multiplier at least 0 (NaN: 30; inf: no probe);\n"
           "seed of the probes' jitter (0: from the system); the limits within [1, max_limit];\n"
           "threshold, alpha, beta: the queue read as none, the allowance's floor and ceiling, in steps of\n"
           "max(1, floor(log10 limit)); ints, clamped into [0, 2**20] and kept as threshold <= alpha <= beta.")
      .def_property_readonly("rtt_noload", [](py::handle v) { return in_seconds(live<sluice::vegas_limit>(v).rtt_noload()); },
                             "The lowest RTT seen (or the last probe's), in seconds; 0 before the first sample.");

  py::class_<sluice::gradient2_limit> gradient2(m, "Gradient2",
                                                "A long average RTT against the sample's: limit x gradient + queue_size, smoothed.\n"
                                                "Drops are not read: its signal is the RTT alone.",
                                                py::is_final());
  bind_algorithm_calls(gradient2, "Gradient2")
      .def(py::init([](py::handle initial_limit, py::handle min_limit, py::handle max_limit, py::handle smoothing,
                       py::handle queue_size, py::handle long_window, py::handle rtt_tolerance) {
             return sluice::gradient2_limit{{.initial_limit = int_option(initial_limit, "initial_limit"),
                                             .min_limit = int_option(min_limit, "min_limit"),
                                             .max_limit = int_option(max_limit, "max_limit"),
                                             .smoothing = real_arg(smoothing, "smoothing"),
                                             .queue_size = real_arg(queue_size, "queue_size"),
                                             .long_window = static_cast<int>(int_option(long_window, "long_window",
                                                                                        std::numeric_limits<int>::min(),
                                                                                        std::numeric_limits<int>::max())),
                                             .rtt_tolerance = real_arg(rtt_tolerance, "rtt_tolerance")}};
           }),
           py::kw_only(), py::arg("initial_limit") = 20, py::arg("min_limit") = 20, py::arg("max_limit") = 200,
           py::arg("smoothing") = 0.2, py::arg("queue_size") = 4.0, py::arg("long_window") = 600, py::arg("rtt_tolerance") = 1.5,
           "smoothing clamped into [0, 1] (NaN: 0.2); queue_size into [0, GATE_LIMIT] (not finite: 4);\n"
           "long_window into [1, 2**30]; the limits into [1, GATE_LIMIT], max_limit at least min_limit;\n"
           "rtt_tolerance: an RTT up to rtt_tolerance x the long average reads as no queue; clamped into\n"
           "[1, 1e9] (NaN: 1.5).")
      .def_property_readonly("long_rtt", [](py::handle g) { return live<sluice::gradient2_limit>(g).long_rtt_ns() / 1e9; },
                             "The long average RTT, in seconds; 0 before the first sample.");

  py::class_<sluice::limiter_stats> stats(m, "LimiterStats", "A limiter's statistics (Limiter.stats()): counts of samples.",
                                          py::is_final());
  made_by_the_module_only(class_fixed(stats));
  stats
      .def_readonly("applied", &sluice::limiter_stats::applied, "samples taken by the algorithm (or into a window)")
      .def_readonly("skipped", &sluice::limiter_stats::skipped,
                    "samples that found another thread changing the limits (none from Python: the GIL serializes)")
      .def_readonly("ignored", &sluice::limiter_stats::ignored, "Outcome.IGNORED, or an RTT of 0 that was not a drop")
      .def("__repr__", [](const sluice::limiter_stats& s) {
        return "LimiterStats(applied=" + std::to_string(s.applied) + ", skipped=" + std::to_string(s.skipped) +
               ", ignored=" + std::to_string(s.ignored) + ")";
      });

  py::class_<py_timed_permit> permit_class(m, "TimedPermit",
                                           "An admission of n through a Limiter (try_admit, admit): release(outcome) gives\n"
                                           "the units back and samples the time since the admission.",
                                           py::is_final());
  made_by_the_module_only(class_fixed(permit_class));
  permit_class
      .def("release", [](py::handle p, py::handle how) { live<py_timed_permit>(p).release(outcome_of(how)); },
           py::arg("outcome") = sluice::outcome::done,
           "Samples how the work ended (Outcome.DONE, DROPPED, IGNORED, or 'done', 'dropped', 'ignored') and\n"
           "gives the units back. Once: a released permit's release does nothing. A permit collected\n"
           "while held gives its units back as IGNORED (its collection times nothing of the service).")
      .def_property_readonly("units", [](py::handle p) {
             return live<py_timed_permit>(p).permit.units();
           },
           "The units held: n until the release, 0 after.")
      .def_property_readonly("held", [](py::handle p) { return live<py_timed_permit>(p).held(); },
                             "Whether it still holds its admission (not released).")
      .def("__enter__",
           [](py::handle p) {
             py_timed_permit& t = live<py_timed_permit>(p);
             if (!t.held()) throw py::value_error("this permit was released: admit again for a new block");
             if (t.entered) throw py::value_error("this permit is already in a with block");
             t.entered = true;
             return py::reinterpret_borrow<py::object>(p);
           },
           "The permit itself.")
      .def("__exit__",
           [](py::handle p, py::handle exc_type, py::handle, py::handle) {
             // An exception is a failure of the work (DROPPED: the limit backs off); a BaseException
             // that is not one (KeyboardInterrupt, SystemExit, asyncio.CancelledError) is the
             // caller's, and says nothing of the service (IGNORED).
             sluice::outcome how = sluice::outcome::done;
             if (!exc_type.is_none()) {
               const int failed = PyObject_IsSubclass(exc_type.ptr(), PyExc_Exception);
               if (failed < 0) throw py::error_already_set();
               how = failed == 1 ? sluice::outcome::dropped : sluice::outcome::ignored;
             }
             live<py_timed_permit>(p).release(how);
             return false;
           },
           "Releases, unless released in the block: DONE when the block ended normally, DROPPED when it\n"
           "raised an Exception, IGNORED for any other BaseException (KeyboardInterrupt, CancelledError).")
      .def("__repr__", [](py::handle p) {
        const py_timed_permit& t = live<py_timed_permit>(p);
        return "<sluice.TimedPermit units=" + std::to_string(t.permit.units()) + (t.held() ? " held" : " released") + ">";
      });

  py::class_<py_limiter> limiter_class(m, "Limiter",
                                       "Owns a Gate's cap: the smaller of a latency limit (an algorithm fed by the admissions'\n"
                                       "round trips) and a pressure cap (adjust), within [min, max].",
                                       py::is_final());
  class_fixed(limiter_class)
      .def(py::init([](py::handle gate, py::handle algorithm, py::handle min, py::handle max, py::handle window,
                       py::handle unit, py::handle sample_every) {
             if (!py::isinstance<sluice::gate>(gate)) {
               throw py::type_error(std::string("gate must be a sluice.Gate (a MutexGate has no limiter), not ") +
                                    Py_TYPE(gate.ptr())->tp_name);
             }
             std::shared_ptr<sluice::gate> held = holder_of<sluice::gate>(gate);
             sluice::limit_algorithm alg = algorithm_of(algorithm);
             const sluice::limiter_options options{int_option(min, "min"), int_option(max, "max"),
                                                   int_option(window, "window"), int_option(unit, "unit"),
                                                   int_option(sample_every, "sample_every")};
             return new py_limiter(py::reinterpret_borrow<py::object>(gate), std::move(held), std::move(alg), options);
           }),
           py::arg("gate"), py::arg("algorithm"), py::kw_only(), py::arg("min") = 1, py::arg("max") = sluice::gate_limit,
           py::arg("window") = 1, py::arg("unit") = 1, py::arg("sample_every") = 1,
           "A limiter of gate (kept alive while the limiter lives) by a copy of algorithm (AIMD, Vegas,\n"
           "Gradient2); sets the gate's cap at once. min, max: the cap's bounds, clamped into [1, GATE_LIMIT],\n"
           "max at least min; window: samples taken as one (mean RTT, highest count, any drop), in\n"
           "[1, 2**20]; unit: gate units per unit of the limits, in [1, GATE_LIMIT]; sample_every: each\n"
           "admission timed with probability 1 / sample_every, in [1, 2**20] (the rest only give their\n"
           "units back). The limiter owns the cap: Gate.set_cap or Gate.adjust last until its next change.")
      .def("try_admit",
           [](py::handle self, py::handle n) -> py::object {
             py_limiter& l = live<py_limiter>(self);
             const std::int64_t units = weight_arg(n);
             if (!l.gate->try_admit(units)) return py::none();
             return timed(self, l, units);
           },
           py::arg("n") = 1,
           "Gate.try_admit(n): a TimedPermit, or None when refused (no room, n above GATE_LIMIT, the gate\n"
           "closed). n = 0 is admitted at once.")
      .def("admit",
           [](py::handle self, py::handle timeout, py::handle n) -> py::object {
             py_limiter& l = live<py_limiter>(self);
             const std::int64_t units = weight_to_wait_for(n);
             if (!admit(*l.gate, seconds(timeout), units)) return py::none();
             return timed(self, l, units);
           },
           py::arg("timeout") = py::none(), py::kw_only(), py::arg("n") = 1,
           "Gate.admit(timeout, n=n) (GIL released, signals let through): a TimedPermit, or None when\n"
           "timeout (seconds) passed first. GateClosed when the gate is closed; ValueError for n above\n"
           "GATE_LIMIT. The permit is timed from the admission, not from the start of the wait.")
      .def("sample",
           [](py::handle self, py::handle rtt, py::handle in_flight, py::handle how) {
             live<py_limiter>(self).limiter.sample(duration_arg(rtt, "rtt"), count_arg(in_flight, "in_flight"), outcome_of(how));
           },
           py::arg("rtt"), py::arg("in_flight"), py::arg("outcome") = sluice::outcome::done,
           "A sample timed by the caller, for work admitted on the gate itself (admit_async): rtt in\n"
           "seconds (0: counted as ignored unless dropped: a drop needs no time), in_flight the gate's\n"
           "count at the admission (gate units). Call it before the work's Gate.note_done.")
      .def("adjust", [](py::handle self, py::handle p) { live<py_limiter>(self).limiter.adjust(pressure_of(p)); },
           py::arg("pressure"),
           "The pressure cap: 'ok' +1 up to max, 'soft' and 'hard' -1 down to min (or a sluice.Pressure).")
      .def("refresh", [](py::handle self) { live<py_limiter>(self).limiter.refresh(); },
           "Sets the gate's cap to the limiter's again, after the program set it on the gate itself (to\n"
           "open it for a wait heavier than the limit while nothing is in flight).")
      .def_property_readonly("limit", [](py::handle self) { return live<py_limiter>(self).limiter.limit(); },
                             "The algorithm's latency limit (in the limits' units).")
      .def_property_readonly("pressure_cap", [](py::handle self) { return live<py_limiter>(self).limiter.pressure_cap(); },
                             "The cap that adjust moves; max to begin with.")
      .def_property_readonly("cap", [](py::handle self) { return live<py_limiter>(self).limiter.cap(); },
                             "min(limit, pressure_cap) within [min, max]: the gate's cap is this times the unit\n"
                             "(at most GATE_LIMIT), or 0 once the gate is closed.")
      .def_property_readonly("gate", [](py::handle self) { return live<py_limiter>(self).gate_object; }, "The Gate it limits.")
      .def("stats", [](py::handle self) { return live<py_limiter>(self).limiter.stats(); },
           "The samples so far (sluice.LimiterStats): applied, skipped, ignored.")
      .def("__repr__", [](py::handle self) {
        const sluice::limiter<sluice::gate>& l = live<py_limiter>(self).limiter;
        return "<sluice.Limiter limit=" + std::to_string(l.limit()) + " pressure_cap=" + std::to_string(l.pressure_cap()) +
               " cap=" + std::to_string(l.cap()) + ">";
      });
}

// ---- memory pressure ----------------------------------------------------------------------------
//
// sluice.PressureMonitor is sluice::pressure_monitor (sluice/pressure.hpp): poll() reads the PSI
// file, and a cgroup's memory.current and memory.max, and answers a sluice.Pressure that
// Gate.adjust and Limiter.adjust take as it is. The reads (a few microseconds, files opened
// without blocking) run with the GIL held, which also keeps two Python threads from polling one
// monitor at once; a failed poll leaves the monitor as it was. The errors, as Python's own reads
// raise them: a file that cannot be read raises OSError with its errno and file name
// (FileNotFoundError, ...), one that does not parse ValueError.

// A path (psi, cgroup): a str, bytes or os.PathLike, as os.fspath takes it; the bytes the system
// is given (a str encoded as os.fsencode does). ValueError for a NUL in it (C++ opens c_str()).
std::string path_arg(py::handle v, const char* name) {
  if (!PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr()) &&
      !PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(v.ptr())), "__fspath__")) {
    throw py::type_error(std::string(name) + " must be a str or os.PathLike, not " + Py_TYPE(v.ptr())->tp_name);
  }
  PyObject* encoded = nullptr;
  if (PyUnicode_FSConverter(v.ptr(), &encoded) == 0) throw py::error_already_set();
  const auto bytes = py::reinterpret_steal<py::bytes>(encoded);
  return std::string(bytes);
}

// A path as Python reads it back: os.fsdecode.
py::str path_str(const std::string& path) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
}

// A field of a PressureReading made in Python: a number, not NaN (no file reads as NaN, and it
// would compare as below every threshold).
double reading_value(py::handle v, const char* name) {
  const double x = real_arg(v, name);
  if (std::isnan(x)) throw py::value_error(std::string(name) + " must be a number, not NaN");
  return x;
}

// A total (microseconds stalled): an int >= 0, not a bool; ValueError below zero; saturates at
// 2**64 - 1, the kernel's largest.
std::uint64_t total_arg(py::handle v, const char* name) {
  if (PyBool_Check(v.ptr())) throw py::type_error(std::string(name) + " must be an int, not bool");
  const py::int_ i = integer(v, name);
  if (PyObject_RichCompareBool(i.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    throw py::value_error(std::string(name) + " must be >= 0");
  }
  const unsigned long long x = PyLong_AsUnsignedLongLong(i.ptr());
  if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();  // 2**64 and above
    return std::numeric_limits<std::uint64_t>::max();
  }
  return x;
}

// The OSError that Python's open() would raise for the file poll() could not read: errno, its
// message, and the file's name, which std::system_error carries only inside what() (the
// library's "sluice::pressure_monitor: <path>", then ": <message>"); None when it does not.
[[noreturn]] void raise_os_error(const std::system_error& e) {
  const std::string what = e.what(), prefix = "sluice::pressure_monitor: ", suffix = ": " + e.code().message();
  py::object filename = py::none();
  if (what.size() >= prefix.size() + suffix.size() && what.starts_with(prefix) && what.ends_with(suffix)) {
    filename = path_str(what.substr(prefix.size(), what.size() - prefix.size() - suffix.size()));
  }
  // OSError(errno, strerror, filename) is the subclass its errno names: FileNotFoundError for ENOENT.
  const py::object error = py::handle(PyExc_OSError)(e.code().value(), e.code().message(), filename);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

py::object optional_path(const std::string& path) {
  if (path.empty()) return py::none();
  return path_str(path);
}

void bind_pressure(py::module_& m) {
  using reading = sluice::pressure_reading;
  py::class_<reading> reading_class(m, "PressureReading",
                                    "What one poll read (PressureMonitor.reading, parse_psi): a snapshot, read-only.\n"
                                    "Averages in percent of the time, totals in microseconds stalled since boot;\n"
                                    "usage is memory.current / memory.max, or None.",
                                    py::is_final());
  class_fixed(reading_class)
      .def(py::init([](py::handle some_avg10, py::handle some_avg60, py::handle some_avg300, py::handle some_total,
                       py::handle full_avg10, py::handle full_avg60, py::handle full_avg300, py::handle full_total,
                       py::handle usage) {
             reading r;
             r.some_avg10 = reading_value(some_avg10, "some_avg10");
             r.some_avg60 = reading_value(some_avg60, "some_avg60");
             r.some_avg300 = reading_value(some_avg300, "some_avg300");
             r.some_total = total_arg(some_total, "some_total");
             r.full_avg10 = reading_value(full_avg10, "full_avg10");
             r.full_avg60 = reading_value(full_avg60, "full_avg60");
             r.full_avg300 = reading_value(full_avg300, "full_avg300");
             r.full_total = total_arg(full_total, "full_total");
             if (!usage.is_none()) r.usage = reading_value(usage, "usage");
             return r;
           }),
           py::kw_only(), py::arg("some_avg10") = 0.0, py::arg("some_avg60") = 0.0, py::arg("some_avg300") = 0.0,
           py::arg("some_total") = 0, py::arg("full_avg10") = 0.0, py::arg("full_avg60") = 0.0,
           py::arg("full_avg300") = 0.0, py::arg("full_total") = 0, py::arg("usage") = py::none(),
           "A reading made by hand (for PressureMonitor.level_of): numbers, not NaN; totals ints >= 0.")
      .def_property_readonly("some_avg10", [](py::handle r) { return live<reading>(r).some_avg10; },
                             "% of the last 10 s in which some task stalled on memory.")
      .def_property_readonly("some_avg60", [](py::handle r) { return live<reading>(r).some_avg60; },
                             "The same over 60 s.")
      .def_property_readonly("some_avg300", [](py::handle r) { return live<reading>(r).some_avg300; },
                             "The same over 300 s.")
      .def_property_readonly("some_total", [](py::handle r) { return live<reading>(r).some_total; },
                             "Microseconds in which some task stalled, since boot.")
      .def_property_readonly("full_avg10", [](py::handle r) { return live<reading>(r).full_avg10; },
                             "% of the last 10 s in which every task stalled on memory (0 without a 'full' line).")
      .def_property_readonly("full_avg60", [](py::handle r) { return live<reading>(r).full_avg60; },
                             "The same over 60 s.")
      .def_property_readonly("full_avg300", [](py::handle r) { return live<reading>(r).full_avg300; },
                             "The same over 300 s.")
      .def_property_readonly("full_total", [](py::handle r) { return live<reading>(r).full_total; },
                             "Microseconds in which every task stalled, since boot.")
      .def_property_readonly("usage", [](py::handle r) { return live<reading>(r).usage; },
                             "memory.current / memory.max of the cgroup read, or None (no cgroup, or a\n"
                             "memory.max of 'max'). A memory.max of 0 reads as 1.0.")
      .def("__eq__",
           [](py::handle a, py::handle b) -> py::object {
             if (!py::isinstance<reading>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             const reading &x = live<reading>(a), &y = live<reading>(b);
             return py::bool_(x.some_avg10 == y.some_avg10 && x.some_avg60 == y.some_avg60 &&
                              x.some_avg300 == y.some_avg300 && x.some_total == y.some_total &&
                              x.full_avg10 == y.full_avg10 && x.full_avg60 == y.full_avg60 &&
                              x.full_avg300 == y.full_avg300 && x.full_total == y.full_total && x.usage == y.usage);
           },
           py::is_operator())
      .def("__repr__", [](py::handle self) {
        const reading& r = live<reading>(self);
        return py::str("PressureReading(some_avg10={!r}, some_avg60={!r}, some_avg300={!r}, some_total={!r}, "
                       "full_avg10={!r}, full_avg60={!r}, full_avg300={!r}, full_total={!r}, usage={!r})")
            .format(r.some_avg10, r.some_avg60, r.some_avg300, r.some_total, r.full_avg10, r.full_avg60,
                    r.full_avg300, r.full_total, r.usage);
      });

  m.def("parse_psi",
        [](py::handle text) -> std::optional<reading> {
          if (!PyUnicode_Check(text.ptr())) {
            throw py::type_error(std::string("text must be a str, not ") + Py_TYPE(text.ptr())->tp_name);
          }
          return sluice::parse_psi(text.cast<std::string>());
        },
        py::arg("text"),
        "The text of a PSI file ('some avg10=... avg60=... avg300=... total=...', and 'full ...'),\n"
        "parsed: a PressureReading (usage None), or None when it is not one (no 'some' line, a line\n"
        "twice or unknown, a field missing or not a number).");

  using monitor = sluice::pressure_monitor;
  py::class_<monitor> monitor_class(m, "PressureMonitor",
                                    "Linux's memory pressure (PSI), the system's or a cgroup v2's, and a cgroup's\n"
                                    "usage, read as Pressure.OK, SOFT or HARD each time poll() is called.",
                                    py::is_final());
  class_fixed(monitor_class)
      .def(py::init([](py::handle psi, py::handle soft_some, py::handle hard_full, py::handle cgroup,
                       py::handle soft_usage, py::handle hard_usage) {
             return new monitor(sluice::pressure_options{.psi = path_arg(psi, "psi"),
                                                         .soft_some = real_arg(soft_some, "soft_some"),
                                                         .hard_full = real_arg(hard_full, "hard_full"),
                                                         .cgroup = cgroup.is_none() ? std::string() : path_arg(cgroup, "cgroup"),
                                                         .soft_usage = real_arg(soft_usage, "soft_usage"),
                                                         .hard_usage = real_arg(hard_usage, "hard_usage")});
           }),
           py::arg("psi") = "/proc/pressure/memory", py::kw_only(), py::arg("soft_some") = 10.0,
           py::arg("hard_full") = 10.0, py::arg("cgroup") = py::none(), py::arg("soft_usage") = 0.85,
           py::arg("hard_usage") = 0.95,
           "psi: a PSI file (a str or os.PathLike): the system's, or a cgroup v2's memory.pressure.\n"
           "cgroup: a cgroup v2 directory whose memory.current and memory.max are read too (None or '':\n"
           "none). The thresholds are numbers, clamped: soft_some and hard_full (percent) into [0, 100],\n"
           "soft_usage and hard_usage into [0, 1]; NaN takes the default. Reads nothing yet.")
      .def("poll",
           [](py::handle self) {
             monitor& mon = live<monitor>(self);
             try {
               return mon.poll();
             } catch (const std::system_error& e) {  // first: it is a runtime_error too
               raise_os_error(e);
             } catch (const std::runtime_error& e) {
               throw py::value_error(e.what());
             }
           },
           "Reads the files now and answers the level, a sluice.Pressure: HARD when\n"
           "'full' avg10 >= hard_full or usage >= hard_usage, SOFT when 'some' avg10 >= soft_some or\n"
           "usage >= soft_usage, else OK. OSError (FileNotFoundError, PermissionError, ...) with errno\n"
           "and filename when a file cannot be read; ValueError when one does not read as the kernel\n"
           "writes it. level and reading are left as they were by a poll that raised.")
      .def_property_readonly("level", [](py::handle self) { return live<monitor>(self).level(); },
                             "The last poll's level; Pressure.OK before the first.")
      .def_property_readonly("reading", [](py::handle self) { return live<monitor>(self).reading(); },
                             "What the last poll read (a PressureReading, a copy); zeros before the first.")
      .def("level_of",
           [](py::handle self, py::handle r) {
             const monitor& mon = live<monitor>(self);
             if (!py::isinstance<reading>(r)) {
               throw py::type_error(std::string("reading must be a sluice.PressureReading, not ") + Py_TYPE(r.ptr())->tp_name);
             }
             return mon.level_of(live<reading>(r));
           },
           py::arg("reading"), "The level that a reading gives under these thresholds: what poll() would answer.")
      .def_property_readonly("psi", [](py::handle self) { return path_str(live<monitor>(self).options().psi); },
                             "The PSI file read, as a str.")
      .def_property_readonly("cgroup", [](py::handle self) { return optional_path(live<monitor>(self).options().cgroup); },
                             "The cgroup directory read, as a str, or None.")
      .def_property_readonly("soft_some", [](py::handle self) { return live<monitor>(self).options().soft_some; },
                             "'some' avg10 (percent) from which: SOFT; as clamped.")
      .def_property_readonly("hard_full", [](py::handle self) { return live<monitor>(self).options().hard_full; },
                             "'full' avg10 (percent) from which: HARD; as clamped.")
      .def_property_readonly("soft_usage", [](py::handle self) { return live<monitor>(self).options().soft_usage; },
                             "The cgroup's usage from which: SOFT; as clamped.")
      .def_property_readonly("hard_usage", [](py::handle self) { return live<monitor>(self).options().hard_usage; },
                             "The cgroup's usage from which: HARD; as clamped.")
      .def("__repr__", [](py::handle self) {
        const monitor& mon = live<monitor>(self);
        py::str text = py::str("<sluice.PressureMonitor psi={!r}").format(path_str(mon.options().psi));
        if (!mon.options().cgroup.empty()) text = py::str("{} cgroup={!r}").format(text, path_str(mon.options().cgroup));
        return py::str("{} level={}>").format(text, py::cast(mon.level()).attr("name"));
      });
}

// ---- buffers ------------------------------------------------------------------------------------

// A buffer from a pool. Its bytes are reached through the buffer protocol (memoryview(b)); while
// a view is alive the buffer cannot be retired, so no view outlives its memory in the pool.
struct py_buffer {
  sluice::buffer b;
  Py_ssize_t exports = 0;
};

std::byte empty_bytes[1];

int get_buffer(PyObject* self, Py_buffer* view, int flags) {
  py_buffer* b;
  try {
    b = &live<py_buffer>(self);
  } catch (py::error_already_set& e) {
    e.restore();
    view->obj = nullptr;
    return -1;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
    view->obj = nullptr;
    return -1;
  }
  void* data = b->b.data() != nullptr ? static_cast<void*>(b->b.data()) : empty_bytes;
  if (PyBuffer_FillInfo(view, self, data, static_cast<Py_ssize_t>(b->b.size()), 0, flags) != 0) return -1;
  ++b->exports;
  return 0;
}

void release_buffer(PyObject* self, Py_buffer*) {
  live<py_buffer>(self).exports -= 1;  // live: get_buffer found it so
}

// One row of Pool.class_stats(): the C++ row, and whether it is the last one (requests and retires
// above the ceiling), whose capacity Python reads as None. Known by its place, not by SIZE_MAX: a
// pool whose ceiling is SIZE_MAX has a top class of that size too.
struct py_class_stats : sluice::pool_class_stats {
  bool above_ceiling = false;
};

template <class Pool>
std::vector<py_class_stats> class_rows(const Pool& pool) {
  const std::vector<sluice::pool_class_stats> rows = pool.class_stats();
  std::vector<py_class_stats> out;
  out.reserve(rows.size());
  for (const sluice::pool_class_stats& row : rows) out.push_back(py_class_stats{row, false});
  if (!out.empty()) out.back().above_ceiling = true;
  return out;
}

// Pool's decay option, in seconds: None, zero or less is off (C++'s zero or less), NaN raises
// ValueError (no length of time reads as it, as with a timeout). Rounded up to whole milliseconds,
// so that no positive decay turns it off; inf, and anything longer, is C++'s most, 2^40 ms.
std::chrono::milliseconds decay_arg(py::handle v) {
  if (v.is_none()) return {};
  const double t = real_arg(v, "decay");
  if (std::isnan(t)) throw py::value_error("decay must be None or a number of seconds, not NaN");
  if (!(t > 0)) return {};
  constexpr std::int64_t most_ms = std::int64_t{1} << 40;
  const double ms = std::ceil(t * 1000);  // inf past a double's range: clamped below
  return std::chrono::milliseconds(ms >= static_cast<double>(most_ms) ? most_ms : static_cast<std::int64_t>(ms));
}

// decay()'s `now`: seconds on time.monotonic()'s clock, which on Linux is CLOCK_MONOTONIC, the
// clock steady_clock reads too (docs/python.md). NaN and +-inf raise ValueError: neither names a
// time (and +inf would leave no step due again). A finite time is clamped into +-2^62 ns (146
// years), where the schedule's sums (a time plus half the decay) stay within int64.
clock::time_point monotonic_arg(py::handle v) {
  const double t = real_arg(v, "now");
  if (!std::isfinite(t)) throw py::value_error("now must be a finite number of seconds on time.monotonic()'s clock");
  constexpr double most_s = 4.6e9;  // just under 2^62 ns
  const auto ns = std::chrono::nanoseconds(std::llround(std::clamp(t, -most_s, most_s) * 1e9));
  return clock::time_point(std::chrono::duration_cast<clock::duration>(ns));
}

template <class Pool>
void bind_pool(py::module_& m, const char* name, const char* doc) {
  py::class_<Pool> pool_class(m, name, doc, py::is_final());
  class_fixed(pool_class)
      .def(py::init([](py::handle bound, py::handle ceiling, bool enabled, bool thread_cache, py::handle decay) {
             return new Pool(sluice::pool_options{.bound = size_arg(bound, "bound"),
                                                  .ceiling = size_arg(ceiling, "ceiling"),
                                                  .enabled = enabled,
                                                  .thread_cache = thread_cache,
                                                  .decay = decay_arg(decay)});
           }),
           py::arg("bound") = 1024, py::arg("ceiling") = std::size_t{4} << 20, py::arg("enabled") = true,
           py::arg("thread_cache") = true, py::kw_only(), py::arg("decay") = py::none(),
           "A pool retaining at most `bound` buffers, none larger than `ceiling` bytes. decay (seconds;\n"
           "None, 0 or less: off): buffers retained unused for about that long are freed by decay().")
      .def("take",
           [](py::handle p, py::handle n) -> std::optional<py_buffer> {
             sluice::buffer b = live<Pool>(p).take(size_arg(n, "size"));
             if (!b) return std::nullopt;
             return py_buffer{std::move(b)};
           },
           py::arg("size"),
           "A retained buffer of len `size` from the smallest class that serves, else None\n"
           "(nothing retained, size above the ceiling, or the pool disabled).")
      .def("acquire",
           [](py::handle p, py::handle n) { return py_buffer{live<Pool>(p).acquire(size_arg(n, "size"))}; },
           py::arg("size"),
           "take(size), else fresh memory whose capacity fills size's class (exactly size above the\n"
           "ceiling). MemoryError when the memory cannot be had.")
      .def("retire",
           [](py::handle p, py::handle buffer) {
             Pool& pool = live<Pool>(p);
             if (!py::isinstance<py_buffer>(buffer)) {
               throw py::type_error(std::string("retire takes a sluice.Buffer, not ") + Py_TYPE(buffer.ptr())->tp_name);
             }
             py_buffer& b = live<py_buffer>(buffer);
             if (b.exports > 0) {
               throw py::buffer_error("the buffer has memoryviews alive: release them before retiring it");
             }
             pool.retire(std::move(b.b));
           },
           py::arg("buffer"),
           "Gives the buffer back: kept while enabled, within the bound and the ceiling, freed\n"
           "otherwise. The Buffer is empty afterwards (len 0). BufferError while a memoryview of\n"
           "it is alive.")
      .def("trim",
           [](py::handle p, py::handle share) {
             if (share.is_none()) return live<Pool>(p).trim();
             live<Pool>(p).trim(real_arg(share, "share"));
           },
           py::arg("share") = py::none(),
           "Frees what the pool retains (other threads' caches: at their next call). With a share\n"
           "(0 to 1): frees that share of the retained bytes, the largest classes first, from what\n"
           "no cache holds; 0 or less, or NaN: nothing; 1 or more: all, as trim().")
      .def("decay",
           [](py::handle p, py::handle now) {
             Pool& pool = live<Pool>(p);
             const clock::time_point t = now.is_none() ? clock::now() : monotonic_arg(now);
             // The GIL released, by hand as admit does: a step frees buffers and may ask malloc_trim
             // for pages back (milliseconds on a large heap), and needs no Python object. A fork
             // meanwhile is safe: both twins hold their locks across one (docs/pool.md, FORK).
             PyThreadState* const saved = PyEval_SaveThread();
             const bool stepped = pool.decay(t);  // noexcept
             PyEval_RestoreThread(saved);
             return stepped;
           },
           py::arg("now") = py::none(),
           "A step of decay, if one is due at `now` (seconds on time.monotonic()'s clock; None: now):\n"
           "frees what has sat unused since before the step before. True if a step ran; False when\n"
           "none was due (one every half the decay), or decay is off. Releases the GIL.")
      .def_property_readonly("retained", [](py::handle p) { return live<Pool>(p).retained(); },
                             "Buffers held now, caches included.")
      .def_property("enabled", [](py::handle p) { return live<Pool>(p).enabled(); },
                    [](py::handle p, bool on) { live<Pool>(p).set_enabled(on); },
                    "The switch: False takes nothing, frees what is retired, and trims.")
      .def("stats", [](py::handle p) { return live<Pool>(p).stats(); },
           "The statistics: exact when no call is in flight.")
      .def("class_stats", [](py::handle p) { return class_rows(live<Pool>(p)); },
           "The statistics per size class (a list of sluice.PoolClassStats): a row per class,\n"
           "smallest first, then one for requests and retires above the ceiling (capacity None).\n"
           "Their sums are stats()'s; exact when no call is in flight.");
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice: a lock-free admission gate and buffer pool (C++), from Python.";
  m.attr("GATE_LIMIT") = sluice::gate_limit;
  gate_closed_type() = py::exception<sluice::gate_closed>(m, "GateClosed", PyExc_RuntimeError);
  m.attr("GateClosed").attr("__doc__") =
      "Raised by a closed gate's waits (admit, permit, admit_async), before or during the wait; nothing counted.";
  py::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const sluice::gate_closed& closed) {
      PyErr_SetString(gate_closed_type().ptr(), closed.what());
    }
  });
  m.def("_seconds", [](py::handle timeout) { return seconds(timeout); },
        "A timeout as admit reads it: None for ever, else seconds (admit_async reads it so too).");

  py::enum_<sluice::pressure>(m, "Pressure", "What Gate.adjust is told of memory.")
      .value("OK", sluice::pressure::ok)
      .value("SOFT", sluice::pressure::soft)
      .value("HARD", sluice::pressure::hard);

  py::class_<channel_handle> channel(m, "_Channel",
                                     "admit_async's channel to one event loop (python/module.cpp, channel_handle):\n"
                                     "an eventfd the loop watches, and the admissions on their way to its waits.",
                                     py::is_final());
  class_fixed(channel)
      .def(py::init<>(), "An open channel with its eventfd; OSError when the eventfd cannot be made.")
      .def("fileno", [](py::handle c) { return live<channel_handle>(c).fileno(); }, "The eventfd.")
      .def_property_readonly("closed", [](py::handle c) { return live<channel_handle>(c).closed(); },
                             "Whether close() ran: no wait may be queued, none is delivered.")
      .def("__len__", [](py::handle c) { return live<channel_handle>(c).size(); },
           "The waits not yet drained: queued, or on their way.")
      .def("drain", [](py::handle c, py::handle futures) { live<channel_handle>(c).drain(futures); },
           py::arg("futures"), "Resolves the futures (a dict id -> future) of the outcomes delivered so far.")
      .def("cancel", [](py::handle c, std::uint64_t id, bool timed_out) { live<channel_handle>(c).cancel(id, timed_out); },
           py::arg("id"), py::arg("timed_out") = false,
           "The wait `id` stopped waiting (timed_out: its timeout passed): its admission, if any has\n"
           "come, goes back.")
      .def("close", [](py::handle c) { live<channel_handle>(c).close(); },
           "No drain will come: withdraws the queued waits, gives back what was delivered.");

  py::class_<sluice::gate_stats> gate_stats(m, "GateStats", "A gate's statistics (Gate.stats()): counts of calls, not of units.",
                                            py::is_final());
  made_by_the_module_only(class_fixed(gate_stats));
  gate_stats
      .def_readonly("admitted", &sluice::gate_stats::admitted, "admissions, by every form (n = 0 included)")
      .def_readonly("admitted_after_wait", &sluice::gate_stats::admitted_after_wait,
                    "of those, the ones that admit, permit or admit_async waited for")
      .def_readonly("refused", &sluice::gate_stats::refused, "try_admit calls that answered False, the gate open")
      .def_readonly("timed_out", &sluice::gate_stats::timed_out, "waits whose timeout passed first")
      .def_readonly("cancelled", &sluice::gate_stats::cancelled,
                    "waits that left unadmitted otherwise (a task cancelled, a signal's exception)")
      .def_readonly("closed", &sluice::gate_stats::closed, "admissions refused, and waits ended, by close()")
      .def_readonly("waiting", &sluice::gate_stats::waiting, "threads and tasks waiting now")
      .def_readonly("in_flight", &sluice::gate_stats::in_flight, "the count now")
      .def_readonly("peak_in_flight", &sluice::gate_stats::peak_in_flight, "the highest count since the gate was made")
      .def("__repr__", [](const sluice::gate_stats& s) {
        return "GateStats(admitted=" + std::to_string(s.admitted) +
               ", admitted_after_wait=" + std::to_string(s.admitted_after_wait) +
               ", refused=" + std::to_string(s.refused) + ", timed_out=" + std::to_string(s.timed_out) +
               ", cancelled=" + std::to_string(s.cancelled) + ", closed=" + std::to_string(s.closed) +
               ", waiting=" + std::to_string(s.waiting) + ", in_flight=" + std::to_string(s.in_flight) +
               ", peak_in_flight=" + std::to_string(s.peak_in_flight) + ")";
      });

  bind_gate<sluice::gate>(m, "Gate",
                          "A non-blocking admission counter whose cap moves under memory pressure:\n"
                          "in flight and cap in one atomic word, lock-free.");
  bind_gate<sluice::mutex_gate>(m, "MutexGate",
                                "Gate's twin over a mutex: the same calls and answers. As any mutex, not for a\n"
                                "child forked while another thread was inside one of its calls (Gate is).");
  bind_limiter(m);
  bind_pressure(m);

  py::class_<sluice::pool_stats> stats(m, "PoolStats", "A pool's statistics (Pool.stats).", py::is_final());
  made_by_the_module_only(class_fixed(stats));
  stats
      .def_readonly("hits", &sluice::pool_stats::hits, "take/acquire answered from what was retained")
      .def_readonly("misses", &sluice::pool_stats::misses, "take/acquire that found nothing")
      .def_readonly("retired", &sluice::pool_stats::retired, "retires that kept the buffer")
      .def_readonly("dropped", &sluice::pool_stats::dropped, "retires that freed it")
      .def_readonly("retained", &sluice::pool_stats::retained, "buffers held")
      .def_readonly("retained_bytes", &sluice::pool_stats::retained_bytes, "their capacities, summed")
      .def("__repr__", [](const sluice::pool_stats& s) {
        return "PoolStats(hits=" + std::to_string(s.hits) + ", misses=" + std::to_string(s.misses) +
               ", retired=" + std::to_string(s.retired) + ", dropped=" + std::to_string(s.dropped) +
               ", retained=" + std::to_string(s.retained) +
               ", retained_bytes=" + std::to_string(s.retained_bytes) + ")";
      });

  py::class_<py_class_stats> class_stats(m, "PoolClassStats",
                                         "One size class's statistics (Pool.class_stats()), counted since the pool was made.",
                                         py::is_final());
  made_by_the_module_only(class_fixed(class_stats));
  class_stats
      .def_property_readonly("capacity",
                             [](const py_class_stats& s) -> std::optional<std::size_t> {
                               if (s.above_ceiling) return std::nullopt;
                               return s.capacity;
                             },
                             "the class's size in bytes; None in the last row (sizes above the ceiling)")
      .def_readonly("retained", &py_class_stats::retained, "buffers it holds now (its own size, and shelved smaller ones)")
      .def_readonly("hits", &py_class_stats::hits, "takes it answered (a take looks past its own class)")
      .def_readonly("misses", &py_class_stats::misses, "takes and acquires of its sizes that found nothing")
      .def_readonly("fresh", &py_class_stats::fresh, "of those, acquires that allocated")
      .def_readonly("retired", &py_class_stats::retired, "retires it kept")
      .def_readonly("dropped_at_bound", &py_class_stats::dropped_at_bound,
                    "retires freed for want of room (the bound, or memory)")
      .def_readonly("dropped_over_ceiling", &py_class_stats::dropped_over_ceiling,
                    "retires freed as larger than the ceiling (the last row's)")
      .def_readonly("dropped_off", &py_class_stats::dropped_off, "retires freed while the pool was switched off")
      .def_readonly("trimmed", &py_class_stats::trimmed, "retained buffers freed: by trim, the switch, a thread's exit")
      .def_readonly("decayed", &py_class_stats::decayed, "retained buffers freed for sitting unused (decay)")
      .def("__repr__", [](const py_class_stats& s) {
        return "PoolClassStats(capacity=" + (s.above_ceiling ? std::string("None") : std::to_string(s.capacity)) +
               ", retained=" + std::to_string(s.retained) + ", hits=" + std::to_string(s.hits) +
               ", misses=" + std::to_string(s.misses) + ", fresh=" + std::to_string(s.fresh) +
               ", retired=" + std::to_string(s.retired) + ", dropped_at_bound=" + std::to_string(s.dropped_at_bound) +
               ", dropped_over_ceiling=" + std::to_string(s.dropped_over_ceiling) +
               ", dropped_off=" + std::to_string(s.dropped_off) + ", trimmed=" + std::to_string(s.trimmed) +
               ", decayed=" + std::to_string(s.decayed) + ")";
      });

  py::class_<py_buffer> buffer(m, "Buffer",
                               "Bytes from a pool: memoryview(b) is writable and copies nothing.\n"
                               "Dropped without retire, its memory is freed.", py::is_final());
  buffer.def("__len__", [](py::handle b) { return live<py_buffer>(b).b.size(); })
      .def_property_readonly("capacity", [](py::handle b) { return live<py_buffer>(b).b.capacity(); },
                             "The bytes it owns (len is the bytes it exposes).")
      .def("__repr__", [](py::handle self) {
        const py_buffer& b = live<py_buffer>(self);
        return "<sluice.Buffer len=" + std::to_string(b.b.size()) +
               " capacity=" + std::to_string(b.b.capacity()) + ">";
      });
  // The buffer protocol with an export count: pybind11's own (def_buffer) cannot tell when a
  // view is released.
  made_by_the_module_only(class_fixed(buffer));
  auto* type = reinterpret_cast<PyHeapTypeObject*>(buffer.ptr());
  type->as_buffer.bf_getbuffer = get_buffer;
  type->as_buffer.bf_releasebuffer = release_buffer;
  reinterpret_cast<PyTypeObject*>(buffer.ptr())->tp_as_buffer = &type->as_buffer;

  bind_pool<sluice::pool>(m, "Pool",
                          "A bounded pool of byte buffers: lock-free, with per-thread caches.");
  m.attr("Pool").cast<py::class_<sluice::pool>>().def_property_readonly(
      "released_idle_bytes", [](py::handle p) { return live<sluice::pool>(p).released_idle_bytes(); },
      "With a decay signal set (set_decay_signal): the bytes whose pages sleeping threads gave back\n"
      "from what their caches hold.");
  m.def("set_decay_signal", [](int signo) { sluice::set_decay_signal(signo); }, py::arg("signo"),
        "Lets Pool's decay steps reach the caches of threads that have stopped calling the pool: each\n"
        "step signals such a thread with `signo`, a real-time signal (signal.SIGRTMIN to SIGRTMAX)\n"
        "the program leaves to sluice, and its handler gives back the pages of what the cache holds.\n"
        "0 (the default): off. Raises ValueError for any other signal, one the program handles or\n"
        "ignores, and off Linux. Process-wide.");
  bind_pool<sluice::mutex_pool>(m, "MutexPool", "Pool's twin over one mutex: the same calls and answers.");
}
