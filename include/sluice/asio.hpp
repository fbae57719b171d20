// sluice/asio.hpp: waiting for a gate's admission on standalone Asio, without blocking a thread.
//
//   async_admit(g, token)   waits until g admits, as admit() does, then completes with
//                           void(std::error_code, sluice::permit<Gate>); Gate: gate or mutex_gate
//   async_admit(g, n, token)  the same for a weight n, as admit(n); the permit holds n. A weight
//                           above gate_limit completes at once with invalid_argument
//
//   auto p = co_await sluice::async_admit(g, asio::use_awaitable);                 // throws on error
//   auto [ec, p] = co_await sluice::async_admit(g, asio::as_tuple(asio::use_awaitable));
//   using namespace asio::experimental::awaitable_operators;                       // a timeout:
//   auto r = co_await (sluice::async_admit(g, asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
//
// An Asio asynchronous operation as Asio's own are (needs standalone Asio 1.22 or later; the
// library itself needs no Asio):
// - any completion token: callbacks, use_awaitable, deferred, as_tuple, use_future;
// - the handler runs on its associated executor (default: the system executor), posted, never
//   inside async_admit even when room is there at once; a pending wait holds outstanding work on
//   that executor; what the wait stores is allocated with the handler's associated allocator;
// - cancellation through the handler's cancellation slot (terminal, partial, total): a wait still
//   queued completes with operation_aborted and an empty permit, and never counted anything; one
//   already admitted when the cancellation comes completes with its permit (dropping it gives the
//   admission back); as for any Asio operation, the emit must not race the completion handler's
//   own run (on a context that several threads run, keep the two on one strand);
// - a closed gate (close()) completes every wait queued on it, and every later one, at once with
//   sluice::gate_errc::closed (sluice's error category, "sluice.gate") and an empty permit;
// - a context shut down (its io_context destroyed) with waits pending destroys their handlers
//   without invoking them; the gate keeps its count and stays usable.
// The gate's promises hold for async admissions: each is one try_admit(n), so never past the cap;
// note_done, set_cap and adjust wake async waiters as they wake threads, and both may wait on one
// gate. Fairness: async waiters of one gate are admitted in FIFO order, and while any is queued,
// try_admit refuses and waiting threads wait on, so no stream of try_admit callers starves a
// waiting coroutine; a thread waits behind every queued coroutine, and a queued wait for n
// holds back the smaller ones queued after it (docs/asio.md, Fairness). A
// gate with no async waiter pays nothing: try_admit and note_done are the same instructions; a
// gate's waits cost time in its own waiters only, a cancellation O(1). A gate destroyed with
// waits pending completes them with operation_aborted. A forked child inherits each wait queued
// or posted; after notify_fork it may run or destroy its io_context (docs/gate.md, FORK).
// Boost.Asio: <sluice/boost_asio.hpp>, the same call. The design: docs/asio.md.
#pragma once

#include <asio.hpp>
#include <system_error>

#define SLUICE_ASIO_NET ::asio
#define SLUICE_ASIO_ERROR_CODE ::std::error_code
#define SLUICE_ASIO_DETAIL asio_standalone
#define SLUICE_ASIO_WHICH 0
#include "sluice/detail/asio_admit.hpp"
#undef SLUICE_ASIO_WHICH
#undef SLUICE_ASIO_NET
#undef SLUICE_ASIO_ERROR_CODE
#undef SLUICE_ASIO_DETAIL
