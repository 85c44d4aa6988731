// Responses kept for the Responses API's previous_response_id and GET /v1/responses/{id}:
// each the conversation it ended (chat messages: what came before, its input and its own
// output turn; its instructions left out, as OpenAI does not carry them over) and the Response
// object, visible to the owner (API key) that made it. Memory is bounded: past the byte budget
// the oldest are dropped, and a chain that refers to one gets a clear 404.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace infercept::server {

class ResponseStore {
 public:
  using json = nlohmann::json;
  struct Stored {
    json messages;  // chat messages, the stored response's output turn last
    json response;  // the Response object
  };

  explicit ResponseStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Keeps a response (its JSON text counts against the budget); one larger than the whole
  // budget is not kept. The oldest go first.
  void put(const std::string& owner, const std::string& id, Stored s);
  // A response `owner` stored and the store still holds.
  std::optional<Stored> get(const std::string& owner, const std::string& id) const;
  bool erase(const std::string& owner, const std::string& id);

  size_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    std::string owner;
    Stored stored;
    size_t bytes = 0;
  };
  void drop_oldest();  // mu_ held

  mutable std::mutex mu_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::unordered_map<std::string, Entry> by_id_;
  std::deque<std::string> order_;  // ids by age; erased ones are skipped when met
};

}  // namespace infercept::server
