// The requests the server keeps paused in the engine while their client runs a tool: who
// owns each one (the API key), the tokens it holds (to recognize the client's follow-up by
// its token prefix), the conversation so far (for the explicit resume API), and when it
// expires. Thread-safe; a paused request is taken out exactly once (resume, delete or
// expiry) as a PausedLease that releases its engine request unless it is handed on, and what
// happened to a taken id is remembered for a while, so a second resume or a late one gets a
// precise error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace infercept::server {

struct PausedRequest {
  std::string id;  // "icpt_..." (assigned by add)
  std::string owner;
  uint64_t engine_id = 0;
  std::vector<int32_t> tokens;  // everything the engine request holds: prompt + generated
  int64_t n_prompt = 0;         // of which the last prompt
  // The conversation up to and including the assistant's tool-call message, and the request
  // it came from (tools, parameters): what an explicit resume continues.
  ChatRequest request;
  std::vector<std::string> tool_names;  // of the calls it waits for
  std::vector<std::string> call_ids;
  double paused_at = 0.0;   // steady clock, seconds
  double expires_at = 0.0;  // steady clock, seconds (assigned by add)
  int64_t expires_at_unix = 0;
};

enum class TakeError { unknown, resumed, deleted, expired };

class InterceptionRegistry;

// A paused request taken out of the registry, and with it the one duty that must not be
// dropped: its engine request holds KV blocks until someone releases it. A lease that ends
// without commit() (a generation took the engine request over) releases it (the engine
// aborts it), or, when put_back_on_drop() was set and the engine was not touched yet (an
// explicit resume refused for its body), returns it to the registry unchanged. So no path,
// early return or error included, can lose a paused request.
class PausedLease {
 public:
  PausedLease() = default;
  PausedLease(InterceptionRegistry* registry, PausedRequest p)
      : registry_(registry), p_(std::move(p)) {}
  PausedLease(PausedLease&& o) noexcept { *this = std::move(o); }
  PausedLease& operator=(PausedLease&& o) noexcept;
  PausedLease(const PausedLease&) = delete;
  PausedLease& operator=(const PausedLease&) = delete;
  ~PausedLease() { end(); }

  explicit operator bool() const { return p_.has_value(); }
  PausedRequest& operator*() { return *p_; }
  PausedRequest* operator->() { return &*p_; }
  const PausedRequest* operator->() const { return &*p_; }

  // A failure before the engine is touched puts the request back (true) or releases it.
  void put_back_on_drop(bool on) { put_back_ = on; }
  // The engine request now answers a new generation: nothing to release.
  void commit() { p_.reset(); }

 private:
  void end();
  InterceptionRegistry* registry_ = nullptr;
  std::optional<PausedRequest> p_;
  bool put_back_ = false;
};

class InterceptionRegistry {
 public:
  // Paused requests expire `ttl_s` after they paused; at most `max_per_owner` per owner.
  // `release` frees a paused request's engine request (Engine::abort); leases call it.
  InterceptionRegistry(double ttl_s, int64_t max_per_owner,
                       std::function<void(uint64_t engine_id)> release);

  // Registers a paused request; returns its id (also set in the stored entry).
  std::string add(PausedRequest p, double now);
  // The owner's paused request that `prompt` continues (the prompt starts with all of its
  // last prompt, give or take a few tokens at the end, and shares the longest prefix with
  // its tokens), taken out; nullopt when none does.
  PausedLease take_match(const std::string& owner, const std::vector<int32_t>& prompt);
  // Takes out one paused request by id (resume or delete); another owner's id is unknown.
  PausedLease take(const std::string& owner, const std::string& id, bool is_delete, TakeError* why);
  // A copy of one paused request of `owner`.
  std::optional<PausedRequest> get(const std::string& owner, const std::string& id) const;
  // What became of an id that is no longer live (unknown for another owner's).
  TakeError gone_reason(const std::string& owner, const std::string& id) const;
  // Paused requests past their expiry, taken out (released when the leases end).
  std::vector<PausedLease> take_expired(double now);
  // Everything, taken out (shutdown).
  std::vector<PausedLease> take_all();
  // Copies of the owner's paused requests (all owners when `all`), oldest first.
  std::vector<PausedRequest> list(const std::string& owner, bool all = false) const;
  size_t count(const std::string& owner) const;
  size_t size() const;
  bool full(const std::string& owner) const;
  double ttl() const { return ttl_s_; }

  static const char* describe(TakeError e);

 private:
  friend class PausedLease;
  void remember(const PausedRequest& p, TakeError what);
  void put_back(PausedRequest p);

  double ttl_s_;
  std::function<void(uint64_t)> release_;
  int64_t max_per_owner_;
  mutable std::mutex mu_;
  std::map<std::string, PausedRequest> live_;
  struct Gone {
    std::string owner;
    TakeError what;
  };
  std::map<std::string, Gone> gone_;
  std::deque<std::string> gone_order_;  // oldest first, bounded
};

}  // namespace infercept::server
