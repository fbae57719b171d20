// sluice/detail/asio_admit.hpp: async_admit, written once for standalone Asio and Boost.Asio.
// Not part of sluice's API and not to be included directly: <sluice/asio.hpp> and
// <sluice/boost_asio.hpp> include it with SLUICE_ASIO_NET (the Asio namespace),
// SLUICE_ASIO_ERROR_CODE (its error_code), SLUICE_ASIO_DETAIL (a namespace of its own) and
// SLUICE_ASIO_WHICH (0 standalone, 1 Boost) set.
// The design, and why each step keeps the gate's promises, is docs/asio.md.
//
// No include guard: each including header guards its own variant.

#include <algorithm>
#include <concepts>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/detail/async_wait.hpp"
#include "sluice/gate.hpp"

#ifndef SLUICE_DETAIL_ASIO_OWNS
#define SLUICE_DETAIL_ASIO_OWNS
namespace sluice::detail {
// Whether the Asio numbered `Which` (0: standalone, 1: Boost) has a completion token type of its
// own (specializes async_result for it): each variant says so of itself, and neither takes a
// token that the other owns. A plain callback belongs to neither: with both headers included it
// must be bound (bind_executor, ...) to say which.
template <class Token, class Gate, int Which>
struct asio_owns : std::false_type {};
}  // namespace sluice::detail
#endif

namespace sluice::detail::SLUICE_ASIO_DETAIL {

namespace net = SLUICE_ASIO_NET;
using error_code = SLUICE_ASIO_ERROR_CODE;

class admit_service;

// What the service knows of a wait: its node, the links of the service's own list, and how to
// destroy it without invoking its handler.
struct admit_op_base : async_waiter {
  admit_service* service = nullptr;
  void (*destroy)(admit_op_base*) noexcept = nullptr;
  admit_op_base* service_prev = nullptr;  // guarded by the service's mutex
  admit_op_base* service_next = nullptr;
};

// One per execution context that waits run on: the list of its pending waits, so that its
// shutdown (the io_context's destructor) can withdraw them and destroy their handlers without
// invoking them. Its mutex is never held while another lock is taken: a hand-over (deliver) takes
// it, and a fork waits for hand-overs while it holds every parking spot's mutex.
class admit_service final : public net::execution_context::service {
 public:
  using key_type = admit_service;
  static inline net::execution_context::id id;

  explicit admit_service(net::execution_context& context) : net::execution_context::service(context) {}

  // False once the context is shut down (a wait begun by a handler's destructor then): the
  // caller destroys the node, as the context destroys what is posted to it then.
  bool add(admit_op_base& op) {
    std::lock_guard lock(mutex_);
    if (shut_down_) return false;
    op.service_prev = nullptr;
    op.service_next = head_;
    if (head_ != nullptr) head_->service_prev = &op;
    head_ = &op;
    return true;
  }

  // A wait that left its gate's queue (admitted or cancelled) leaves the list; true when it may
  // be completed, and end_finish follows, which the shutdown waits for. False when the context
  // is shut down: the shutdown owns the node, and discard reports the outcome destroyed.
  bool begin_finish(admit_op_base& op) noexcept {
    std::lock_guard lock(mutex_);
    if (shut_down_) return false;
    remove(op);
    ++finishing_;
    return true;
  }
  void end_finish() noexcept {
    std::lock_guard lock(mutex_);
    if (--finishing_ == 0 && shut_down_) finished_.notify_all();
  }
  // The outcome of a wait that begin_finish refused is destroyed (its admission given back);
  // the node is the shutdown's to free.
  void end_discard() noexcept {
    std::lock_guard lock(mutex_);
    ++discarded_;
    if (shut_down_) finished_.notify_all();
  }

 private:
  void remove(admit_op_base& op) noexcept {
    (op.service_prev != nullptr ? op.service_prev->service_next : head_) = op.service_next;
    if (op.service_next != nullptr) op.service_next->service_prev = op.service_prev;
    op.service_prev = op.service_next = nullptr;
  }

  // In a forked child (after notify_fork): a note_done that made room in the parent may have
  // stopped at the fork before its grant (docs/gate.md, FORK), so every gate with a wait of this
  // context queued is served now.
  void notify_fork(net::execution_context::fork_event event) override {
    if (event != net::execution_context::fork_child) return;
    std::vector<const async_waiter*> gates;  // one queued wait per gate
    {
      std::lock_guard lock(mutex_);
      for (const admit_op_base* op = head_; op != nullptr; op = op->service_next) {
        const auto same = [op](const async_waiter* w) { return w->gate == op->gate; };
        if (std::find_if(gates.begin(), gates.end(), same) == gates.end()) gates.push_back(op);
      }
    }
    // No lock held: a wait served here completes through begin_finish. The child runs one thread,
    // so the waits listed stay alive until their gate is served.
    for (const async_waiter* w : gates) async_serve(*w);
  }

  // From the moment shut_down_ is set, every node still listed is the shutdown's: begin_finish
  // refuses it, so a hand-over that took it only discards its outcome. Each is withdrawn if still
  // queued; the rest are waited for until discarded; then every node is freed here (a handler's
  // destruction may do anything: no lock is held).
  void shutdown() override {
    admit_op_base* ops = nullptr;
    {
      std::lock_guard lock(mutex_);
      shut_down_ = true;
      ops = std::exchange(head_, nullptr);
    }
    long taken = 0;  // by a hand-over on another thread
    for (admit_op_base* op = ops; op != nullptr; op = op->service_next) {
      if (!async_withdraw(*op)) ++taken;  // withdrawn: never admitted, nothing counted
    }
    {
      std::unique_lock lock(mutex_);
      finished_.wait(lock, [&] { return finishing_ == 0 && discarded_ == taken; });
    }
    while (ops != nullptr) {
      admit_op_base* const op = ops;
      ops = op->service_next;
      op->destroy(op);
    }
  }

  std::mutex mutex_;
  std::condition_variable finished_;
  admit_op_base* head_ = nullptr;
  long finishing_ = 0;
  long discarded_ = 0;
  bool shut_down_ = false;
};

// Installed in the handler's cancellation slot, which keeps it alive while the wait is pending
// (and perhaps after). It holds the gate's address, only to find the gate's parking spot (it
// never touches the gate), and the waiter's handle, which the queue keeps pointing at the
// waiter while it is queued and clears, under the spot's mutex, when it leaves.
struct admit_canceller {
  const void* gate;
  async_waiter* waiter = nullptr;  // the handle; guarded by the spot's mutex
  void operator()(net::cancellation_type type) noexcept {
    constexpr auto honoured =
        net::cancellation_type::terminal | net::cancellation_type::partial | net::cancellation_type::total;
    if ((type & honoured) == net::cancellation_type::none) return;
    async_cancel(gate, &waiter);
  }
};

// The posted completion: the handler with its arguments, allocating (in post) through the
// handler's allocator.
template <class Handler, class Gate>
struct admit_completion {
  Handler handler;
  error_code ec;
  permit<Gate> admission;

  using allocator_type = net::associated_allocator_t<Handler>;
  allocator_type get_allocator() const noexcept { return net::get_associated_allocator(handler); }

  void operator()() { std::move(handler)(ec, std::move(admission)); }
};

template <class Handler>
using tracked_executor_t = std::decay_t<decltype(net::prefer(
    std::declval<net::associated_executor_t<Handler>>(), net::execution::outstanding_work.tracked))>;

template <class Gate, class Handler>
struct admit_op final : admit_op_base {
  using allocator_type = typename std::allocator_traits<
      net::associated_allocator_t<Handler>>::template rebind_alloc<admit_op>;

  admit_op(Gate& g, Handler&& h)
      : handler(std::move(h)),
        work(net::prefer(net::get_associated_executor(handler), net::execution::outstanding_work.tracked)),
        gate_(g) {}

  Handler handler;
  tracked_executor_t<Handler> work;  // outstanding work while the wait is pending
  Gate& gate_;

  static admit_op* make(Gate& g, Handler&& h) {
    allocator_type alloc(net::get_associated_allocator(h));
    admit_op* op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      std::allocator_traits<allocator_type>::construct(alloc, op, g, std::move(h));
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
      throw;
    }
    return op;
  }
  // Frees the node with the allocator taken from its handler before the handler was moved out;
  // what the node still holds is destroyed here.
  static void free(admit_op* op, allocator_type alloc) noexcept {
    std::allocator_traits<allocator_type>::destroy(alloc, op);
    std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
  }

  // The context shut down with the wait queued: the handler is destroyed, never invoked.
  static void destroy_op(admit_op_base* base) noexcept {
    auto* op = static_cast<admit_op*>(base);
    free(op, allocator_type(net::get_associated_allocator(op->handler)));
  }

  // The node left its gate's queue (async_waiter::hand_over): complete the wait on its executor,
  // with the node freed before the handler runs. False when the context is shut down: drop
  // then gives the admission back, once the fork's window has closed, since that calls the gate;
  // the shutdown frees the node.
  static bool deliver(async_waiter* w, bool admitted) noexcept {
    auto* op = static_cast<admit_op*>(w);
    admit_service& service = *op->service;
    if (!service.begin_finish(*op)) return false;
    {
      allocator_type alloc(net::get_associated_allocator(op->handler));
      admit_completion<Handler, Gate> done{
          std::move(op->handler),
          admitted    ? error_code()
          : op->closed ? error_code(std::error_code(gate_errc::closed))
                       : error_code(net::error::operation_aborted),
          admitted ? permit<Gate>(op->gate_, op->units, std::adopt_lock) : permit<Gate>()};
      tracked_executor_t<Handler> work = std::move(op->work);
      free(op, alloc);
      // post, never dispatch: not inside async_admit, nor inside the note_done that made room.
      // It allocates (from the handler's allocator); a failure there ends the program.
      net::post(work, std::move(done));
    }
    service.end_finish();
    return true;
  }
  static void drop(async_waiter* w, bool admitted) noexcept {
    auto* op = static_cast<admit_op*>(w);
    admit_service& service = *op->service;
    if (admitted) {
      const permit<Gate> admission(op->gate_, op->units, std::adopt_lock);  // given back here
    }
    service.end_discard();  // the shutdown frees the node
  }
};

// The context an executor runs on: its execution::context property, or, for an executor of the
// older kind (use_future's), its context().
template <class Executor>
net::execution_context& context_of(const Executor& ex) {
  if constexpr (requires { net::query(ex, net::execution::context); }) {
    return net::query(ex, net::execution::context);
  } else {
    return ex.context();
  }
}

struct initiate_admit {
  template <class Handler, class Gate>
  void operator()(Handler&& handler, Gate* g, std::int64_t n) const {
    using handler_type = std::decay_t<Handler>;
    using op_type = admit_op<Gate, handler_type>;
    // Room at once: no node, no queue, only the post. admit_now refuses while a waiter of the
    // gate is queued, so this cannot overtake one (FIFO), and counts no refusal: the wait is not
    // refused, it waits. Not cancellable: it has completed. A weight that no cap admits
    // completes at once with invalid_argument, counting nothing.
    const bool never = n > gate_limit;
    if (never || waiting<Gate>::admit_now(*g, n)) {
      admit_completion<handler_type, Gate> done{
          std::forward<Handler>(handler), never ? error_code(net::error::invalid_argument) : error_code(),
          never ? permit<Gate>() : permit<Gate>(*g, n, std::adopt_lock)};
      const auto executor = net::get_associated_executor(done.handler);
      net::post(executor, std::move(done));  // never inside async_admit; a throw gives it back
      return;
    }
    auto slot = net::get_associated_cancellation_slot(handler);
    admit_service& service =
        net::use_service<admit_service>(context_of(net::get_associated_executor(handler)));
    // The canceller first: its emplace may allocate and throw, and must not leave a node (with
    // the handler and its outstanding work) behind; with no node linked its handle stays null,
    // and an emit then does nothing.
    async_waiter** handle = nullptr;
    if (slot.is_connected()) handle = &slot.template emplace<admit_canceller>(admit_canceller{g}).waiter;
    handler_type h(std::forward<Handler>(handler));
    op_type* op = op_type::make(*g, std::move(h));
    op->hand_over = &op_type::deliver;
    op->discard = &op_type::drop;
    op->destroy = &op_type::destroy_op;
    op->gate = g;
    op->units = n;
    op->service = &service;
    op->handle = handle;
    if (!service.add(*op)) {
      op_type::destroy_op(op);
      return;
    }
    async_wait(*g, *op);  // from here on the node belongs to the queue
  }
};

template <class Gate>
concept asio_gate = std::same_as<Gate, sluice::gate> || std::same_as<Gate, sluice::mutex_gate>;

template <class Token, class Gate>
concept own_token = net::completion_token_for<Token, void(error_code, permit<Gate>)> &&
                    (asio_owns<std::decay_t<Token>, Gate, SLUICE_ASIO_WHICH>::value ||
                     !asio_owns<std::decay_t<Token>, Gate, 1 - SLUICE_ASIO_WHICH>::value);

// Waits for an admission without blocking a thread: see <sluice/asio.hpp>.
template <asio_gate Gate, own_token<Gate> CompletionToken>
auto async_admit(Gate& gate, std::int64_t n, CompletionToken&& token) {
  // n as a prvalue: a deferred operation keeps its arguments as they are passed, and must not
  // keep a reference to this call's parameter
  return net::async_initiate<CompletionToken, void(error_code, permit<Gate>)>(initiate_admit{}, token, &gate,
                                                                               std::int64_t{n});
}
template <asio_gate Gate, own_token<Gate> CompletionToken>
auto async_admit(Gate& gate, CompletionToken&& token) {
  return async_admit(gate, 1, std::forward<CompletionToken>(token));
}

}  // namespace sluice::detail::SLUICE_ASIO_DETAIL

template <class Token, class Gate>
struct sluice::detail::asio_owns<Token, Gate, SLUICE_ASIO_WHICH>
    : std::bool_constant<!std::is_base_of_v<
          SLUICE_ASIO_NET::detail::completion_handler_async_result<
              Token, void(SLUICE_ASIO_ERROR_CODE, sluice::permit<Gate>)>,
          SLUICE_ASIO_NET::async_result<Token, void(SLUICE_ASIO_ERROR_CODE, sluice::permit<Gate>)>>> {};

namespace sluice {
using detail::SLUICE_ASIO_DETAIL::async_admit;
}  // namespace sluice
