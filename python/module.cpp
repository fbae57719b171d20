// sluice._sluice: the gate and the pool as a Python extension (pybind11). The package `sluice`
// (python/sluice/__init__.py) re-exports it and adds what is written in Python: admit_async.
//
// Python's rules, kept here: a wait releases the GIL and wakes for signals (so that Ctrl-C
// reaches a thread in admit()); bad arguments raise TypeError or ValueError; no call reaches
// freed memory: a Buffer with a memoryview alive refuses to be retired (BufferError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "sluice/gate.hpp"
#include "sluice/pool.hpp"

namespace py = pybind11;

namespace {

// ---- arguments ----------------------------------------------------------------------------------

// A Python int of any size, clamped into [lo, hi].
std::int64_t clamped(const py::int_& v, std::int64_t lo, std::int64_t hi) {
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0) return overflow > 0 ? hi : lo;
  return std::clamp<std::int64_t>(x, lo, hi);
}

// A size: a non-negative Python int, clamped to SIZE_MAX above (every size past the ceiling
// behaves alike); negative ones raise ValueError naming the argument.
std::size_t size_arg(const py::int_& v, const char* name) {
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow < 0 || (overflow == 0 && x < 0)) {
    throw py::value_error(std::string(name) + " must be >= 0");
  }
  if (overflow > 0) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(x);
}

using clock = std::chrono::steady_clock;

// A timeout: None waits for ever, as does inf; a negative number or NaN raises ValueError (as
// threading.Lock.acquire does).
std::optional<clock::time_point> deadline_of(std::optional<double> timeout) {
  if (!timeout) return std::nullopt;
  const double t = *timeout;
  if (std::isnan(t) || t < 0) throw py::value_error("timeout must be None or a number >= 0");
  if (std::isinf(t)) return std::nullopt;
  return clock::now() + std::chrono::ceil<clock::duration>(
                            std::chrono::duration<double>(std::min(t, 3.15e9)));  // a century
}

// ---- the gates ----------------------------------------------------------------------------------

// How long a waiting thread goes without looking for signals: Python's own waits return at once
// on a signal in the main thread; this one within a slice.
constexpr auto signal_slice = std::chrono::milliseconds(20);

// admit(timeout): waits for room with the GIL released, in slices between which the main
// thread runs its signal handlers (a KeyboardInterrupt propagates, with nothing admitted).
template <class Gate>
bool admit(Gate& g, std::optional<double> timeout) {
  const auto deadline = deadline_of(timeout);
  if (g.try_admit()) return true;
  for (;;) {
    const auto now = clock::now();
    if (deadline && now >= *deadline) return false;
    auto until = now + signal_slice;
    if (deadline) until = std::min(until, *deadline);
    // The GIL released and taken back by hand, not by a guard's destructor: a daemon thread that
    // takes it back while the interpreter finalizes is ended there by a forced unwind, which a
    // destructor (noexcept) would turn into std::terminate.
    PyThreadState* const saved = PyEval_SaveThread();
    bool admitted;
    try {
      admitted = g.try_admit_until(until);
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

// `with gate.permit(timeout):` holds one admission for the block.
template <class Gate>
struct permit {
  py::object owner;  // keeps the gate alive while the permit lives
  Gate* gate;
  std::optional<double> timeout;
  bool held = false;
};

template <class Gate>
void bind_gate(py::module_& m, const char* name, const char* doc) {
  using P = permit<Gate>;
  const std::string permit_name = std::string(name) + "Permit";
  py::class_<P>(m, permit_name.c_str(), "One admission of a gate, held for a with block.")
      .def("__enter__",
           [](P& p) -> P& {
             if (p.held) throw py::value_error("this permit is already held");
             if (!admit(*p.gate, p.timeout)) {
               PyErr_SetString(PyExc_TimeoutError, "not admitted within the timeout");
               throw py::error_already_set();
             }
             p.held = true;
             return p;
           },
           py::return_value_policy::reference_internal)
      .def("__exit__", [](P& p, const py::args&) {
        if (p.held) p.gate->note_done();
        p.held = false;
        return false;
      });

  py::class_<Gate>(m, name, doc)
      .def(py::init([](const py::int_& cap) { return new Gate(clamped(cap, 1, sluice::gate_limit)); }),
           py::arg("cap"), "A gate with nothing in flight; cap clamped into [1, 2**31 - 1].")
      .def_property_readonly("cap", &Gate::cap, "The cap.")
      .def_property_readonly("in_flight", &Gate::in_flight, "The count of work in flight.")
      .def_property_readonly("has_capacity", &Gate::has_capacity, "in_flight < cap.")
      .def("note_submitted", &Gate::note_submitted, "in_flight + 1, even past the cap; never blocks.")
      .def("note_done", &Gate::note_done, "in_flight - 1, never below zero; never blocks.")
      .def("try_admit", &Gate::try_admit, "If in_flight < cap: in_flight + 1 and True, in one step.")
      .def("admit", &admit<Gate>, py::arg("timeout") = py::none(),
           "Waits (GIL released) until in_flight < cap and admits: True; False when timeout (seconds)\n"
           "passed first, with nothing counted. None waits for ever. A signal handler's exception\n"
           "(KeyboardInterrupt) propagates from the wait, with nothing counted.")
      .def("set_cap", [](Gate& g, const py::int_& cap) { g.set_cap(clamped(cap, 1, sluice::gate_limit)); },
           py::arg("cap"), "cap = clamp(cap, 1, 2**31 - 1); in_flight untouched.")
      .def("adjust",
           [](Gate& g, const py::handle& p, const py::int_& max_cap) {
             g.adjust(pressure_of(p), clamped(max_cap, std::numeric_limits<std::int64_t>::min(),
                                              std::numeric_limits<std::int64_t>::max()));
           },
           py::arg("pressure"), py::arg("max_cap"),
           "'ok': cap = min(cap + 1, max_cap) (a cap above max_cap drops to it); 'soft', 'hard':\n"
           "cap - 1, never below 1.")
      .def("permit",
           [](py::object self, std::optional<double> timeout) {
             deadline_of(timeout);  // a bad timeout raises here, not at the with
             return P{self, &self.cast<Gate&>(), timeout};
           },
           py::arg("timeout") = py::none(),
           "A context manager that holds one admission for its block: admit(timeout) on entry\n"
           "(TimeoutError when not admitted in time), note_done() on exit.")
      .def("__repr__", [name](const Gate& g) {
        return "<sluice." + std::string(name) + " in_flight=" + std::to_string(g.in_flight()) +
               " cap=" + std::to_string(g.cap()) + ">";
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
    b = py::handle(self).cast<py_buffer*>();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError, "not a sluice.Buffer");
    view->obj = nullptr;
    return -1;
  }
  void* data = b->b.data() != nullptr ? static_cast<void*>(b->b.data()) : empty_bytes;
  if (PyBuffer_FillInfo(view, self, data, static_cast<Py_ssize_t>(b->b.size()), 0, flags) != 0) return -1;
  ++b->exports;
  return 0;
}

void release_buffer(PyObject* self, Py_buffer*) {
  py::handle(self).cast<py_buffer*>()->exports -= 1;
}

template <class Pool>
void retire(Pool& p, py_buffer& b) {
  if (b.exports > 0) {
    throw py::buffer_error("the buffer has memoryviews alive: release them before retiring it");
  }
  p.retire(std::move(b.b));
}

template <class Pool>
void bind_pool(py::module_& m, const char* name, const char* doc) {
  py::class_<Pool>(m, name, doc)
      .def(py::init([](const py::int_& bound, const py::int_& ceiling, bool enabled, bool thread_cache) {
             return new Pool(sluice::pool_options{.bound = size_arg(bound, "bound"),
                                                  .ceiling = size_arg(ceiling, "ceiling"),
                                                  .enabled = enabled,
                                                  .thread_cache = thread_cache});
           }),
           py::arg("bound") = 1024, py::arg("ceiling") = std::size_t{4} << 20, py::arg("enabled") = true,
           py::arg("thread_cache") = true,
           "A pool retaining at most `bound` buffers, none larger than `ceiling` bytes.")
      .def("take",
           [](Pool& p, const py::int_& n) -> std::optional<py_buffer> {
             sluice::buffer b = p.take(size_arg(n, "size"));
             if (!b) return std::nullopt;
             return py_buffer{std::move(b)};
           },
           py::arg("size"),
           "A retained buffer of len `size` from the smallest class that serves, else None\n"
           "(nothing retained, size above the ceiling, or the pool disabled).")
      .def("acquire",
           [](Pool& p, const py::int_& n) { return py_buffer{p.acquire(size_arg(n, "size"))}; },
           py::arg("size"),
           "take(size), else fresh memory whose capacity fills size's class (exactly size above the\n"
           "ceiling). MemoryError when the memory cannot be had.")
      .def("retire", &retire<Pool>, py::arg("buffer"),
           "Gives the buffer back: kept while enabled, within the bound and the ceiling, freed\n"
           "otherwise. The Buffer is empty afterwards (len 0). BufferError while a memoryview of\n"
           "it is alive.")
      .def("trim", &Pool::trim, "Frees what the pool retains (other threads' caches: at their next call).")
      .def_property_readonly("retained", &Pool::retained, "Buffers held now, caches included.")
      .def_property("enabled", &Pool::enabled, &Pool::set_enabled,
                    "The switch: False takes nothing, frees what is retired, and trims.")
      .def("stats", &Pool::stats, "The statistics: exact when no call is in flight.");
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice: a lock-free admission gate and buffer pool (C++), from Python.";
  m.attr("GATE_LIMIT") = sluice::gate_limit;

  py::enum_<sluice::pressure>(m, "Pressure", "What Gate.adjust is told of memory.")
      .value("OK", sluice::pressure::ok)
      .value("SOFT", sluice::pressure::soft)
      .value("HARD", sluice::pressure::hard);

  bind_gate<sluice::gate>(m, "Gate",
                          "A non-blocking admission counter whose cap moves under memory pressure:\n"
                          "in flight and cap in one atomic word, lock-free.");
  bind_gate<sluice::mutex_gate>(m, "MutexGate", "Gate's twin over a mutex: the same calls and answers.");

  py::class_<sluice::pool_stats>(m, "PoolStats", "A pool's statistics.")
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

  py::class_<py_buffer> buffer(m, "Buffer",
                               "Bytes from a pool: memoryview(b) is writable and copies nothing.\n"
                               "Dropped without retire, its memory is freed.");
  buffer.def("__len__", [](const py_buffer& b) { return b.b.size(); })
      .def_property_readonly("capacity", [](const py_buffer& b) { return b.b.capacity(); },
                             "The bytes it owns (len is the bytes it exposes).")
      .def("__repr__", [](const py_buffer& b) {
        return "<sluice.Buffer len=" + std::to_string(b.b.size()) +
               " capacity=" + std::to_string(b.b.capacity()) + ">";
      });
  // The buffer protocol with an export count: pybind11's own (def_buffer) cannot tell when a
  // view is released.
  auto* type = reinterpret_cast<PyHeapTypeObject*>(buffer.ptr());
  type->as_buffer.bf_getbuffer = get_buffer;
  type->as_buffer.bf_releasebuffer = release_buffer;
  reinterpret_cast<PyTypeObject*>(buffer.ptr())->tp_as_buffer = &type->as_buffer;

  bind_pool<sluice::pool>(m, "Pool",
                          "A bounded pool of byte buffers: lock-free, with per-thread caches.");
  bind_pool<sluice::mutex_pool>(m, "MutexPool", "Pool's twin over one mutex: the same calls and answers.");
}
