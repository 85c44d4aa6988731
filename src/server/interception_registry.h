// The requests the server keeps paused in the engine while their client runs a tool: who
// owns each one (the API key), the tokens it holds (to recognize the client's follow-up by
// its token prefix), the conversation so far (for the explicit resume API), and when it
// expires. Thread-safe; a paused request is taken out exactly once (resume, delete or
// expiry), and what happened to a taken id is remembered for a while, so a second resume
// or a late one gets a precise error.
#pragma once

#include <cstdint>
#include <deque>
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

class InterceptionRegistry {
 public:
  // Paused requests expire `ttl_s` after they paused; at most `max_per_owner` per owner.
  InterceptionRegistry(double ttl_s, int64_t max_per_owner);

  // Registers a paused request; returns its id (also set in the stored entry).
  std::string add(PausedRequest p, double now);
  // The owner's paused request that `prompt` continues (the prompt starts with all of its
  // last prompt, give or take a few tokens at the end, and shares the longest prefix with
  // its tokens), taken out; nullopt when none does.
  std::optional<PausedRequest> take_match(const std::string& owner,
                                          const std::vector<int32_t>& prompt);
  // Takes out one paused request by id (resume or delete); another owner's id is unknown.
  std::optional<PausedRequest> take(const std::string& owner, const std::string& id, bool is_delete,
                                    TakeError* why);
  // A copy of one paused request of `owner`.
  std::optional<PausedRequest> get(const std::string& owner, const std::string& id) const;
  // Paused requests past their expiry, taken out.
  std::vector<PausedRequest> take_expired(double now);
  // Everything, taken out (shutdown).
  std::vector<PausedRequest> take_all();
  // Copies of the owner's paused requests (all owners when `all`), oldest first.
  std::vector<PausedRequest> list(const std::string& owner, bool all = false) const;
  size_t count(const std::string& owner) const;
  size_t size() const;
  bool full(const std::string& owner) const;
  double ttl() const { return ttl_s_; }

  static const char* describe(TakeError e);

 private:
  void remember(const PausedRequest& p, TakeError what);

  double ttl_s_;
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
