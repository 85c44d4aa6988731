#include "engine/mask_worker.h"

#include <algorithm>

namespace infercept {

// Built when a constrained row first needs it: most engines never constrain a token, and the
// walk's tries over a 150k vocabulary are not free to build.
const grammar::Vocabulary& EngineCore::grammar_vocabulary() {
  if (vocab_ == nullptr) {
    // Control tokens write nothing a grammar could read, but for the turn's call markers
    // ([TOOL_CALLS], [ARGS]: the model writes a call's marker as that one token), which
    // write their text (Request::constrain reads them so); end-of-turn ones are allowed
    // where the text is complete.
    const Tokenizer& tok = *tokenizer_;
    std::vector<std::string> bytes(
        (size_t)std::max<int64_t>(model_config().vocab_size, tok.vocab_size()));
    std::vector<int32_t> ends;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.is_eog(id))
        ends.push_back(id);
      else if (!tok.is_control(id))
        bytes[(size_t)id] = tok.token_to_bytes(id);
      else if (std::find(marker_ids_.begin(), marker_ids_.end(), id) != marker_ids_.end())
        bytes[(size_t)id] = tok.token_to_bytes(id, /*render_special=*/true);
    }
    vocab_ = std::make_unique<grammar::Vocabulary>(std::move(bytes), std::move(ends));
  }
  return *vocab_;
}

}  // namespace infercept
