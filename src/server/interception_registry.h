// The requests the server keeps paused in the engine while their client runs a tool: who
// owns each one (the API key) and in which cache namespace, the ids of the calls it waits
// for (a chat follow-up carries one of them), the tokens it holds (a raw completion must
// extend all of them), the conversation so far (for the explicit resume API), and when it
// expires. Thread-safe; a paused request is taken out exactly once (resume, delete, expiry,
// a later turn of its conversation, or eviction by a newer pause of its owner) as a
// PausedLease that releases its engine request unless it is handed on, and what happened to
// a taken id is remembered for a while, so a second resume or a late one gets a precise
// error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace infercept::server {

struct PausedRequest;

// Clients rarely send a turn's reasoning back: an assistant message in `messages` that
// carries the calls of the paused turn `p` and no reasoning gets the reasoning that turn
// generated, so that a template that renders reasoning gives the paused request's tokens
// again. True when a message changed.
bool restore_reasoning(std::vector<ChatMessage>& messages, const PausedRequest& p);

struct PausedRequest {
  std::string id;  // "icpt_..." (assigned by add)
  std::string owner;
  std::string cache_namespace;  // GenerateRequest::cache_namespace: follow-ups must share it
  uint64_t engine_id = 0;
  // Everything the engine request holds, prompt and generated: a raw completion continues it
  // only by extending all of them.
  std::vector<int32_t> tokens;
  // The conversation up to and including the assistant's tool-call message, and the request
  // it came from (tools, parameters): what an explicit resume continues.
  ChatRequest request;
  std::vector<std::string> tool_names;  // of the calls it waits for
  std::vector<std::string> call_ids;    // a chat follow-up carries one of them
  double paused_at = 0.0;               // steady clock, seconds
  double expires_at = 0.0;              // steady clock, seconds (assigned by add)
  int64_t expires_at_unix = 0;
};

// What became of a paused request that is no longer live: resumed (by its follow-up or the
// explicit API), deleted, expired, superseded (a later turn of its conversation continued a
// newer paused request) or evicted (its owner reached the limit of paused requests and this
// was the oldest).
enum class TakeError { unknown, resumed, deleted, expired, superseded, evicted };

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
  // Paused requests expire `ttl_s` after they paused; at most `max_per_owner` per owner (0:
  // no limit). `release` frees a paused request's engine request (Engine::abort); leases
  // call it.
  InterceptionRegistry(double ttl_s, int64_t max_per_owner,
                       std::function<void(uint64_t engine_id)> release);

  // Registers a paused request; returns its id (also set in the stored entry). When its
  // owner is at the limit, the owner's oldest paused requests are taken out into `evicted`
  // (released when those leases end) to make room: a new pause is never refused.
  std::string add(PausedRequest p, double now, std::vector<PausedLease>* evicted = nullptr);
  // The follow-up of a chat turn: the owner's paused requests of namespace `ns` that wait
  // for one of `call_ids` (the ids of the request's assistant tool calls and tool messages).
  // The newest is taken out and returned; older ones matched too are taken out into
  // `superseded` (their conversation moved on past them). Empty lease when none matches.
  PausedLease take_followup(const std::string& owner, const std::string& ns,
                            const std::set<std::string>& call_ids,
                            std::vector<PausedLease>* superseded);
  // The follow-up of a raw completion: the owner's paused requests of namespace `ns` whose
  // tokens `prompt` extends, all of them (no slack); the newest is taken, the others go to
  // `superseded` as above.
  PausedLease take_extended(const std::string& owner, const std::string& ns,
                            const std::vector<int32_t>& prompt,
                            std::vector<PausedLease>* superseded);
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
  double ttl() const { return ttl_s_; }

  static const char* describe(TakeError e);

 private:
  friend class PausedLease;
  void remember(const PausedRequest& p, TakeError what);
  void put_back(PausedRequest p);
  // Takes out the matched entries (under mu_): the newest is returned, the rest superseded.
  PausedLease take_newest(std::vector<std::map<std::string, PausedRequest>::iterator> matched,
                          std::vector<PausedLease>* superseded);

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
