#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/log.h"
#include "io/gguf.h"

namespace infercept {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
  }
  return "?";
}

// Engine-side state of one request, next to the scheduler's Sequence.
struct EngineCore::Active {
  Sequence seq;
  SamplingParams params;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stops;
  Active(const SamplingParams& p, uint64_t seed, const Tokenizer& tok)
      : params(p), sampler(p, seed), detok(tok), stops(p.stop) {}
};

namespace {
double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const ModelSource& src) {
  if (const auto* gguf = dynamic_cast<const GgufFile*>(&src)) {
    TRY_ASSIGN(TokenizerSpec spec, tokenizer_spec_from_gguf(*gguf));
    return Tokenizer::create(std::move(spec));
  }
  const std::string dir = src.path();
  std::string tj, tc;
  {
    auto f = MappedFile::open(dir + "/tokenizer.json");
    if (!f.ok()) return make_error(dir, ": no tokenizer.json (", f.error().message, ")");
    tj.assign(reinterpret_cast<const char*>((*f)->data()), (*f)->size());
  }
  if (auto f = MappedFile::open(dir + "/tokenizer_config.json"); f.ok())
    tc.assign(reinterpret_cast<const char*>((*f)->data()), (*f)->size());
  TRY_ASSIGN(TokenizerSpec spec, tokenizer_spec_from_hf_json(tj, tc, dir + "/tokenizer.json"));
  return Tokenizer::create(std::move(spec));
}
}  // namespace

EngineCore::~EngineCore() = default;

Result<std::unique_ptr<EngineCore>> EngineCore::create(const EngineConfig& config) {
  std::unique_ptr<EngineCore> e(new EngineCore());
  e->config_ = config;
  TRY_ASSIGN(e->source_, open_model_source(config.model_path));
  const ModelConfig& mc = e->source_->config();
  TRY(mc.validate());
  TRY_ASSIGN(e->tokenizer_, load_tokenizer(*e->source_));
  // A missing or unknown template only matters once a chat is rendered.
  if (auto t = resolve_chat_template(config.chat_template, e->tokenizer_->spec().chat_template);
      t.ok()) {
    e->chat_template_ = *t;
  } else if (!config.chat_template.empty()) {
    return t.error();
  }
  if (config.block_size <= 0 || config.max_tokens_per_step <= 0 || config.max_seqs <= 0)
    return make_error("block size, tokens per step and sequences per step must be positive");
  e->backend_ = make_cpu_backend(config.n_threads);
  TRY_ASSIGN(e->model_, LlamaModel::create(*e->source_, *e->backend_, config.max_tokens_per_step,
                                           config.max_seqs));
  KvGeometry g;
  g.n_layers = mc.n_layers;
  g.block_size = config.block_size;
  g.n_kv_heads = mc.n_kv_heads;
  g.head_dim = mc.head_dim;
  g.dtype = config.kv_dtype;
  const size_t block_bytes = g.bytes_per_block_per_layer() * 2 * (size_t)g.n_layers;
  int64_t n_blocks = config.kv_cache_tokens > 0
                         ? BlockTable::blocks_for(config.kv_cache_tokens, config.block_size)
                         : (int64_t)(config.kv_cache_mb * 1024.0 * 1024.0 / (double)block_bytes);
  if (n_blocks < 1) return make_error("the KV cache is too small for a single block");
  g.n_blocks = n_blocks;
  TRY_ASSIGN(e->kv_, e->backend_->create_kv_storage(g));
  e->allocator_ = std::make_unique<BlockAllocator>((int32_t)n_blocks);
  SchedulerConfig sc;
  sc.block_size = config.block_size;
  sc.max_tokens_per_step = config.max_tokens_per_step;
  sc.max_seqs_per_step = config.max_seqs;
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->allocator_);
  e->max_context_ = config.max_context > 0 ? std::min(config.max_context, mc.max_context)
                                           : mc.max_context;
  e->logits_.resize((size_t)(config.max_seqs * mc.vocab_size));
  LOG_INFO("engine: %s, %lld KV blocks of %lld tokens (%.1f MiB)", config.model_path.c_str(),
           (long long)n_blocks, (long long)config.block_size,
           (double)(block_bytes * (size_t)n_blocks) / (1024.0 * 1024.0));
  return e;
}

Status EngineCore::validate(const GenerateRequest& req) const {
  if (req.prompt.empty()) return make_error("the prompt is empty");
  const int32_t vocab = (int32_t)model_config().vocab_size;
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab)
      return make_error("prompt token id ", std::to_string(t), " is outside the vocabulary (",
                        std::to_string(vocab), ")");
  const int64_t limit = std::min(max_context_, kv_capacity_tokens());
  if ((int64_t)req.prompt.size() >= limit)
    return make_error("the prompt has ", std::to_string(req.prompt.size()),
                      " tokens; this engine holds at most ", std::to_string(limit - 1),
                      " (context ", std::to_string(max_context_), ", KV cache ",
                      std::to_string(kv_capacity_tokens()), " tokens)");
  return req.params.validate();
}

Result<uint64_t> EngineCore::add_request(GenerateRequest req) {
  TRY(validate(req));
  const uint64_t id = next_id_;
  add_validated(std::move(req), id);
  return id;
}

void EngineCore::add_validated(GenerateRequest req, uint64_t id) {
  CHECK(active_.find(id) == active_.end());
  next_id_ = std::max(next_id_, id + 1);
  auto a = std::make_unique<Active>(req.params, config_.seed + id * 0x9e3779b97f4a7c15ull,
                                    *tokenizer_);
  a->seq.id = id;
  a->seq.arrival_time = now_seconds();
  a->seq.n_prompt = (int64_t)req.prompt.size();
  a->seq.tokens = std::move(req.prompt);
  scheduler_->add(&a->seq);
  active_.emplace(id, std::move(a));
}

void EngineCore::abort(uint64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_->finish(&it->second->seq);
  active_.erase(it);
}

Result<std::vector<int32_t>> EngineCore::encode_chat(
    const std::vector<ChatMessage>& messages, const std::vector<ToolDefinition>& tools) const {
  if (tokenizer_->spec().chat_template.empty() && config_.chat_template.empty())
    return make_error("the model has no chat template; pass --chat-template chatml|llama3|llama2");
  TRY_ASSIGN(auto cached, resolve_chat_template(config_.chat_template,
                                                tokenizer_->spec().chat_template));
  TRY_ASSIGN(std::string text, render_chat(cached, messages, tools, true));
  return tokenizer_->encode(text, /*add_bos=*/true, /*parse_special=*/true);
}

void EngineCore::build_step_input(const StepPlan& plan) {
  StepInput& in = step_input_;
  in.clear();
  const int64_t bs = config_.block_size;
  int32_t max_blocks = 0;
  for (const ScheduledSeq& ss : plan.scheduled)
    max_blocks = std::max(max_blocks, (int32_t)ss.seq->blocks.blocks.size());
  in.max_blocks = max_blocks;
  in.block_tables.assign((size_t)max_blocks * plan.scheduled.size(), 0);
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledSeq& ss = plan.scheduled[i];
    const Sequence& s = *ss.seq;
    in.q_start.push_back((int32_t)in.tokens.size());
    in.q_len.push_back((int32_t)ss.n_tokens);
    in.ctx_len.push_back((int32_t)(s.n_computed + ss.n_tokens));
    for (int64_t p = s.n_computed; p < s.n_computed + ss.n_tokens; ++p) {
      in.tokens.push_back(s.tokens[(size_t)p]);
      in.positions.push_back((int32_t)p);
      in.slots.push_back(s.blocks.slot(p, bs));
    }
    std::copy(s.blocks.blocks.begin(), s.blocks.blocks.end(),
              in.block_tables.begin() + (ptrdiff_t)(i * (size_t)max_blocks));
    if (ss.sample) in.logit_rows.push_back((int32_t)in.tokens.size() - 1);
  }
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs;
  StepPlan plan = scheduler_->schedule();
  stats_.preemptions += (int64_t)plan.preempted.size();
  stats_.recomputed_tokens += plan.dropped_tokens;
  if (plan.empty()) return outputs;
  build_step_input(plan);
  const double t0 = now_seconds();
  model_->forward(step_input_, *kv_, logits_.data());
  stats_.forward_seconds += now_seconds() - t0;
  stats_.steps++;
  scheduler_->commit(plan);

  const int64_t vocab = model_config().vocab_size;
  size_t logit_index = 0;
  std::vector<uint64_t> done;
  for (const ScheduledSeq& ss : plan.scheduled) {
    Sequence& s = *ss.seq;
    const bool is_prefill_row = ss.n_tokens > 1 || s.n_generated() == 0;
    if (is_prefill_row) stats_.prompt_tokens_computed += ss.n_tokens;
    if (!ss.sample) continue;
    Active& a = *active_.at(s.id);
    std::span<const float> row(logits_.data() + logit_index * (size_t)vocab, (size_t)vocab);
    ++logit_index;
    const std::span<const int32_t> all(s.tokens);
    const int32_t tok = a.sampler.sample(row, all.first((size_t)s.n_prompt),
                                         all.subspan((size_t)s.n_prompt));
    s.tokens.push_back(tok);
    stats_.decode_tokens++;

    RequestOutput out;
    out.id = s.id;
    out.new_tokens.push_back(tok);
    out.prompt_tokens = s.n_prompt;
    out.completion_tokens = s.n_generated();
    FinishReason reason = FinishReason::none;
    const bool is_stop_token =
        (!a.params.ignore_eos && tokenizer_->is_eog(tok)) ||
        std::find(a.params.stop_token_ids.begin(), a.params.stop_token_ids.end(), tok) !=
            a.params.stop_token_ids.end();
    if (is_stop_token) reason = FinishReason::stop;
    auto piece = a.stops.push(is_stop_token ? std::string() : a.detok.push(tok));
    out.text = std::move(piece.text);
    if (piece.stopped) reason = FinishReason::stop;
    const int64_t limit = std::min(max_context_, kv_capacity_tokens());
    if (reason == FinishReason::none &&
        (s.n_generated() >= a.params.max_tokens || (int64_t)s.tokens.size() >= limit))
      reason = FinishReason::length;
    if (reason != FinishReason::none) {
      if (!a.stops.stopped()) {
        // Held-back bytes and text turned out not to be a stop string: release them.
        auto rest = a.stops.push(a.detok.flush());
        out.text += rest.text;
        if (!rest.stopped) out.text += a.stops.flush();
      }
      out.finish = reason;
      scheduler_->finish(&s);
      done.push_back(s.id);
    }
    outputs.push_back(std::move(out));
  }
  for (uint64_t id : done) active_.erase(id);
  if (config_.check_invariants) scheduler_->check_invariants();
  return outputs;
}

// ---------------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<uint64_t> Engine::submit(GenerateRequest req, Callback cb) {
  TRY(core_->validate(req));
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  callbacks_.emplace(id, std::move(cb));
  inbox_.emplace_back(id, std::move(req));
  cv_.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  cv_.notify_all();
}

void Engine::loop() {
  for (;;) {
    std::vector<std::pair<uint64_t, GenerateRequest>> inbox;
    std::vector<uint64_t> aborts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || core_->has_work(); });
      if (stop_) return;
      inbox.swap(inbox_);
      aborts.swap(aborts_);
    }
    for (auto& [id, req] : inbox) core_->add_validated(std::move(req), id);
    for (uint64_t id : aborts) {
      core_->abort(id);
      Callback cb;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = callbacks_.find(id);
        if (it == callbacks_.end()) continue;
        cb = std::move(it->second);
        callbacks_.erase(it);
      }
      RequestOutput out;
      out.id = id;
      out.finish = FinishReason::abort;
      cb(out);
    }
    for (RequestOutput& out : core_->step()) {
      Callback* cb = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = callbacks_.find(out.id);
        if (it != callbacks_.end()) cb = &it->second;
      }
      if (cb != nullptr) (*cb)(out);
      if (out.finished()) {
        std::lock_guard<std::mutex> lock(mu_);
        callbacks_.erase(out.id);
      }
    }
  }
}

}  // namespace infercept
