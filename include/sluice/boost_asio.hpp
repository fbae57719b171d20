// sluice/boost_asio.hpp: waiting for a gate's admission on Boost.Asio, without blocking a thread.
//
//   async_admit(g, token)   waits until g admits, as admit() does, then completes with
//                           void(boost::system::error_code, sluice::permit<Gate>)
//
//   auto p = co_await sluice::async_admit(g, boost::asio::use_awaitable);
//
// <sluice/asio.hpp>'s contract, call for call, on Boost.Asio (Boost 1.77 or later: cancellation
// slots). Both headers may be included in one program: each async_admit takes only its own
// Asio's completion tokens. The design: docs/asio.md.
#pragma once

#include <boost/version.hpp>
#if BOOST_VERSION < 107700
#error "sluice/boost_asio.hpp needs Boost 1.77 or later (per-operation cancellation)"
#endif
#include <boost/asio.hpp>
#include <boost/system/error_code.hpp>

#define SLUICE_ASIO_NET ::boost::asio
#define SLUICE_ASIO_ERROR_CODE ::boost::system::error_code
#define SLUICE_ASIO_DETAIL asio_boost
#define SLUICE_ASIO_WHICH 1
#include "sluice/detail/asio_admit.hpp"
#undef SLUICE_ASIO_WHICH
#undef SLUICE_ASIO_NET
#undef SLUICE_ASIO_ERROR_CODE
#undef SLUICE_ASIO_DETAIL
