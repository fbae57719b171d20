// Wing and Gong's search with Lowe's memoisation; see lincheck.hpp.
#include "lincheck.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace lincheck {

std::string model::show_state(const state& s) const {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < s.size(); ++i) out << (i ? " " : "") << s[i];
  out << ']';
  return out.str();
}

namespace {

using configuration = std::pair<std::uint64_t, state>;

struct configuration_hash {
  std::size_t operator()(const configuration& c) const noexcept {
    std::uint64_t h = c.first * 0x9E37'79B9'7F4A'7C15u;
    for (const std::int64_t v : c.second) {
      h ^= static_cast<std::uint64_t>(v) + 0x9E37'79B9'7F4A'7C15u + (h << 6) + (h >> 2);
    }
    return static_cast<std::size_t>(h);
  }
};

class search {
 public:
  search(std::span<const timing> calls, const model& m)
      : calls_(calls),
        model_(m),
        all_(calls.size() == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << calls.size()) - 1) {}

  bool run() {
    const auto [start, fresh] = seen_.emplace(0, model_.initial());
    (void)fresh;
    deepest_state_ = start->second;
    return explore(0, start->second);
  }

  std::size_t configurations() const noexcept { return seen_.size(); }

  std::string report() const {
    std::vector<std::size_t> order(calls_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return calls_[a].invoked < calls_[b].invoked; });
    const std::uint64_t origin = calls_.empty() ? 0 : calls_[order.front()].invoked;
    std::ostringstream out;
    out << "not linearizable; " << calls_.size() << " calls (thread [invoked, returned] call -> answer):\n";
    for (const std::size_t i : order) {
      out << "  #" << i << " t" << calls_[i].thread << " [" << calls_[i].invoked - origin << ", "
          << calls_[i].returned - origin << "] " << model_.show(i) << '\n';
    }
    out << "longest sequence the model accepts (" << deepest_.size() << " calls):";
    for (const std::size_t i : deepest_) out << " #" << i;
    out << "\n  state then: " << model_.show_state(deepest_state_) << "\n  none of these fits next:";
    std::uint64_t placed = 0;
    for (const std::size_t i : deepest_) placed |= std::uint64_t{1} << i;
    for (const std::size_t i : candidates(placed)) out << " #" << i;
    out << '\n';
    return out.str();
  }

 private:
  // Wing and Gong: a call may come next only if it was invoked before every call not yet placed
  // returned; otherwise some unplaced call finished before it began and must precede it.
  std::vector<std::size_t> candidates(std::uint64_t placed) const {
    std::uint64_t horizon = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if ((placed >> i & 1) == 0) horizon = std::min(horizon, calls_[i].returned);
    }
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if ((placed >> i & 1) == 0 && calls_[i].invoked < horizon) out.push_back(i);
    }
    return out;
  }

  bool explore(std::uint64_t placed, const state& s) {
    if (placed == all_) return true;
    std::vector<state> next;
    for (const std::size_t i : candidates(placed)) {
      next.clear();
      model_.step(s, i, next);
      const std::uint64_t now = placed | std::uint64_t{1} << i;
      for (state& t : next) {
        // Lowe: a configuration already explored cannot succeed now if it did not then. The set's
        // elements do not move on rehash, so the reference stays good through the recursion.
        const auto [it, fresh] = seen_.emplace(now, std::move(t));
        if (!fresh) continue;
        path_.push_back(i);
        if (path_.size() > deepest_.size()) {
          deepest_ = path_;
          deepest_state_ = it->second;
        }
        if (explore(now, it->second)) return true;
        path_.pop_back();
      }
    }
    return false;
  }

  std::span<const timing> calls_;
  const model& model_;
  const std::uint64_t all_;
  std::unordered_set<configuration, configuration_hash> seen_;
  std::vector<std::size_t> path_;
  std::vector<std::size_t> deepest_;
  state deepest_state_;
};

}  // namespace

verdict check(std::span<const timing> calls, const model& m) {
  if (calls.size() > max_calls) throw std::invalid_argument("lincheck: more than 64 calls in one history");
  for (const timing& t : calls) {
    if (t.invoked >= t.returned) {
      throw std::invalid_argument("lincheck: a call returned before it was invoked");
    }
  }
  search s(calls, m);
  verdict v;
  v.linearizable = s.run();
  v.configurations = s.configurations();
  if (!v.linearizable) v.report = s.report();
  return v;
}

}  // namespace lincheck
