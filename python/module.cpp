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

// `with gate.permit(timeout):` holds one admission for the block. One permit serves one with
// block at a time (entering it again while it is held or entering raises ValueError): a second
// thread makes its own with gate.permit().
template <class Gate>
struct permit {
  py::object owner;  // keeps the gate alive while the permit lives
  Gate* gate;
  std::optional<double> timeout;
  bool busy = false;  // entering, or held
  bool held = false;
};

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
                   admitted = admit(*p.gate, p.timeout);
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
            if (p.held) p.gate->note_done();
            p.held = p.busy = false;
            return false;
          });

  // Not final: the package's Gate adds admit_async in Python. live() refuses what is not one.
  py::class_<Gate> gate_class(m, name, doc);
  class_fixed(gate_class)
      .def(py::init([](py::handle cap) { return new Gate(clamped(cap, "cap", 1, sluice::gate_limit)); }),
           py::arg("cap"), "A gate with nothing in flight; cap clamped into [1, 2**31 - 1].")
      .def_property_readonly("cap", [](py::handle g) { return live<Gate>(g).cap(); }, "The cap.")
      .def_property_readonly("in_flight", [](py::handle g) { return live<Gate>(g).in_flight(); },
                             "The count of work in flight.")
      .def_property_readonly("has_capacity", [](py::handle g) { return live<Gate>(g).has_capacity(); },
                             "in_flight < cap.")
      .def("note_submitted", [](py::handle g) { live<Gate>(g).note_submitted(); },
           "in_flight + 1, even past the cap; never blocks.")
      .def("note_done", [](py::handle g) { live<Gate>(g).note_done(); },
           "in_flight - 1, never below zero; never blocks.")
      .def("try_admit", [](py::handle g) { return live<Gate>(g).try_admit(); },
           "If in_flight < cap: in_flight + 1 and True, in one step.")
      .def("admit", [](py::handle g, py::handle timeout) { return admit(live<Gate>(g), seconds(timeout)); },
           py::arg("timeout") = py::none(),
           "Waits (GIL released) until in_flight < cap and admits: True; False when timeout (seconds)\n"
           "passed first, with nothing counted. None waits for ever. A signal handler's exception\n"
           "(KeyboardInterrupt) propagates from the wait, with nothing counted.")
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
           [](py::handle self, py::handle timeout) {
             return P{py::reinterpret_borrow<py::object>(self), &live<Gate>(self), seconds(timeout)};
           },
           py::arg("timeout") = py::none(),
           "A context manager that holds one admission for its block: admit(timeout) on entry\n"
           "(TimeoutError when not admitted in time), note_done() on exit.")
      .def("__repr__", [name](py::handle self) {
        const Gate& g = live<Gate>(self);
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

template <class Pool>
void bind_pool(py::module_& m, const char* name, const char* doc) {
  py::class_<Pool> pool_class(m, name, doc, py::is_final());
  class_fixed(pool_class)
      .def(py::init([](py::handle bound, py::handle ceiling, bool enabled, bool thread_cache) {
             return new Pool(sluice::pool_options{.bound = size_arg(bound, "bound"),
                                                  .ceiling = size_arg(ceiling, "ceiling"),
                                                  .enabled = enabled,
                                                  .thread_cache = thread_cache});
           }),
           py::arg("bound") = 1024, py::arg("ceiling") = std::size_t{4} << 20, py::arg("enabled") = true,
           py::arg("thread_cache") = true,
           "A pool retaining at most `bound` buffers, none larger than `ceiling` bytes.")
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
      .def("trim", [](py::handle p) { live<Pool>(p).trim(); },
           "Frees what the pool retains (other threads' caches: at their next call).")
      .def_property_readonly("retained", [](py::handle p) { return live<Pool>(p).retained(); },
                             "Buffers held now, caches included.")
      .def_property("enabled", [](py::handle p) { return live<Pool>(p).enabled(); },
                    [](py::handle p, bool on) { live<Pool>(p).set_enabled(on); },
                    "The switch: False takes nothing, frees what is retired, and trims.")
      .def("stats", [](py::handle p) { return live<Pool>(p).stats(); },
           "The statistics: exact when no call is in flight.");
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice: a lock-free admission gate and buffer pool (C++), from Python.";
  m.attr("GATE_LIMIT") = sluice::gate_limit;
  m.def("_seconds", [](py::handle timeout) { return seconds(timeout); },
        "A timeout as admit reads it: None for ever, else seconds (admit_async reads it so too).");

  py::enum_<sluice::pressure>(m, "Pressure", "What Gate.adjust is told of memory.")
      .value("OK", sluice::pressure::ok)
      .value("SOFT", sluice::pressure::soft)
      .value("HARD", sluice::pressure::hard);

  bind_gate<sluice::gate>(m, "Gate",
                          "A non-blocking admission counter whose cap moves under memory pressure:\n"
                          "in flight and cap in one atomic word, lock-free.");
  bind_gate<sluice::mutex_gate>(m, "MutexGate",
                                "Gate's twin over a mutex: the same calls and answers. As any mutex, not for a\n"
                                "child forked while another thread was inside one of its calls (Gate is).");

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
  bind_pool<sluice::mutex_pool>(m, "MutexPool", "Pool's twin over one mutex: the same calls and answers.");
}
