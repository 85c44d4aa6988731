#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "engine/mask_worker.h"
#include "engine/request.h"
#include "engine/tool_call.h"
#include "io/gguf.h"
#include "tokenizer/chat_encoding.h"

namespace infercept {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none:
      return "none";
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::abort:
      return "abort";
  }
  return "?";
}

namespace {

// The Jinja text of the chat template: --chat-template-file's, else the model's (may be "").
Result<std::string> chat_template_text(const EngineConfig& config, const Tokenizer& tok) {
  if (config.chat_template_file.empty()) return tok.spec().chat_template;
  std::ifstream in(config.chat_template_file, std::ios::binary);
  if (!in) return make_error("cannot read --chat-template-file ", config.chat_template_file);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// The model as the step loop's executor: moves the plan's blocks between the tiers, runs the
// forward pass on the backend and samples the step's rows (StepExecutor).
class EngineCore::Executor : public StepExecutor {
 public:
  explicit Executor(EngineCore& e) : e_(e) {}
  StepTiming execute(const StepPlan& plan, const StepShape& shape,
                     std::vector<int32_t>& tokens) override;

 private:
  EngineCore& e_;
};

// The requests' side of the step (StepRequests): each sampled token through its Request
// (text, stop strings, tool triggers) into the step's outputs.
class EngineCore::Requests : public StepRequests {
 public:
  explicit Requests(EngineCore& e) : e_(e) {}
  TokenOutcome on_token(Sequence& s, int32_t token, size_t row, double end) override;
  void on_finished(Sequence& s, double end) override;

 private:
  EngineCore& e_;
};

EngineCore::EngineCore() = default;
EngineCore::~EngineCore() = default;

Result<std::unique_ptr<EngineCore>> EngineCore::create(const EngineConfig& config) {
  std::unique_ptr<EngineCore> e(new EngineCore());
  e->config_ = config;
  TRY_ASSIGN(e->source_, open_model_source(config.model_path));
  const ModelConfig& mc = e->source_->config();
  TRY(mc.validate());
  TRY_ASSIGN(e->tokenizer_, load_tokenizer(*e->source_));
  // A missing template only matters once a chat is rendered (completions need none); one
  // that is named, given, or that the model carries but cannot be used fails here.
  TRY_ASSIGN(std::string template_text, chat_template_text(config, *e->tokenizer_));
  const Tokenizer& tok = *e->tokenizer_;
  if (auto t = load_chat_template(config.chat_template, template_text,
                                  tok.token_to_bytes(tok.bos_id(), true),
                                  tok.token_to_bytes(tok.eos_id(), true));
      t.ok()) {
    e->chat_template_ = *t;
  } else if (!config.chat_template.empty() || !template_text.empty()) {
    return t.error();
  }
  e->turn_format_ = infercept::turn_format(e->chat_template_, config.chat_template, template_text);
  for (const std::string& m : turn_markers(e->turn_format_))
    if (auto id = e->tokenizer_->token_id(m); id && e->tokenizer_->is_control(*id))
      e->marker_ids_.push_back(*id);
  if (config.block_size <= 0 || config.max_tokens_per_step <= 0 || config.max_seqs <= 0)
    return make_error("block size, tokens per step and sequences per step must be positive");
  if (config.max_partial_prefills < 1 || config.long_prefill_tokens < 0)
    return make_error("partial prefills per step must be >= 1, the long-prefill chunk >= 0");
  TRY(e->create_model());
  TRY(e->create_kv_pools());
  TRY(e->load_cost_model());
  TRY(e->create_step_loop());
  e->t0_ = now_seconds();
  e->max_context_ =
      config.max_context > 0 ? std::min(config.max_context, mc.max_context) : mc.max_context;
  e->logits_.resize((size_t)(config.max_seqs * mc.vocab_size));
  const KvGeometry& g = e->kv_->geometry();
  const double kv_mib =
      (double)(g.bytes_per_block_per_layer() * 2 * (size_t)g.n_layers * (size_t)g.n_blocks) /
      (1024.0 * 1024.0);
  LOG_INFO("engine: %s, %lld KV blocks of %lld tokens (%.1f MiB), long-prefill chunk %lld",
           config.model_path.c_str(), (long long)g.n_blocks, (long long)config.block_size, kv_mib,
           (long long)e->scheduler_->long_prefill_chunk());
  return e;
}

// The estimator, the policy, the scheduler and the step loop around them.
Status EngineCore::create_step_loop() {
  const EngineConfig& config = config_;
  TRY(cost_.validate());
  TRY_ASSIGN(estimator_, make_duration_estimator(config.estimator));
  TRY_ASSIGN(PolicyKind kind, parse_policy(config.policy));
  policy_ = make_policy(kind, cost_, *estimator_);
  SchedulerConfig sc;
  sc.block_size = config.block_size;
  sc.max_tokens_per_step = config.max_tokens_per_step;
  sc.max_seqs_per_step = config.max_seqs;
  sc.max_partial_prefills = config.max_partial_prefills;
  sc.long_prefill_tokens = config.long_prefill_tokens;
  sc.prefix_cache = config.prefix_cache;
  sc.disk_blocks = disk_blocks_;
  scheduler_ =
      std::make_unique<Scheduler>(sc, *allocator_, host_allocator_.get(), policy_.get(), &cost_);
  if (!config.step_trace_path.empty()) {
    TRY_ASSIGN(step_trace_, StepTraceWriter::open(config.step_trace_path));
  }
  if (config.virtual_step_seconds < 0.0) return make_error("the virtual step time must be >= 0");
  loop_ = std::make_unique<StepLoop>(
      *scheduler_, *allocator_, *host_allocator_, *estimator_, stats_, cost_.kv_bytes_per_token,
      config.interception_timeout_s, step_trace_.get(), config.check_invariants);
  loop_->set_disk_mover(disk_mover_.get());
  executor_ = std::make_unique<Executor>(*this);
  requests_ = std::make_unique<Requests>(*this);
  return ok_status();
}

Status EngineCore::validate(const GenerateRequest& req) const {
  if (req.prompt.empty()) return make_error("the prompt is empty");
  const int32_t vocab = (int32_t)model_config().vocab_size;
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab)
      return make_error("prompt token id ", std::to_string(t), " is outside the vocabulary (",
                        std::to_string(vocab), ")");
  const int64_t limit = token_limit();
  if ((int64_t)req.prompt.size() >= limit)
    return make_error("the prompt has ", std::to_string(req.prompt.size()),
                      " tokens; this engine holds at most ", std::to_string(limit - 1),
                      " (context ", std::to_string(max_context_), ", KV cache ",
                      std::to_string(kv_capacity_tokens()), " tokens)");
  if (req.constraint != nullptr) {
    if (req.constraint->grammar == nullptr) return make_error("a constraint without a grammar");
    if (req.constraint->trigger.empty() &&
        !grammar::Matcher(req.constraint->grammar).advance(req.turn_prefix))
      return make_error("the generation's forced start does not fit its constraint");
  }
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
  auto r = std::make_unique<Request>(id, std::move(req), config_.seed + id * 0x9e3779b97f4a7c15ull,
                                     *tokenizer_, turn_format_, marker_ids_, now());
  scheduler_->add(&r->seq);
  active_.emplace(id, std::move(r));
}

void EngineCore::abort(uint64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_->finish(&it->second->seq);
  active_.erase(it);
}

Result<std::vector<int32_t>> EngineCore::encode_chat(
    const std::vector<ChatMessage>& messages, const std::vector<ToolDefinition>& tools) const {
  if (tokenizer_->spec().chat_template.empty() && config_.chat_template.empty() &&
      config_.chat_template_file.empty())
    return make_error("the model has no chat template; pass --chat-template chatml|llama3|llama2");
  ChatEncodeOptions options;
  options.allow_special_in_content = true;  // the local user's own text (generate, chat)
  return infercept::encode_chat(*tokenizer_, chat_template_, messages, tools, options);
}

int32_t block_table_width(int32_t blocks, int64_t most) {
  const int64_t cap = std::max<int64_t>(16, (most + 15) / 16 * 16);
  int64_t w = 16;
  while (w < blocks && w < cap) w *= 2;
  return (int32_t)std::max<int64_t>(std::min(w, cap), (blocks + 15) / 16 * 16);
}

void EngineCore::build_step_input(const StepPlan& plan) {
  StepInput& in = step_input_;
  in.clear();
  const int64_t bs = config_.block_size;
  // A width that moves rarely, so that a device backend can replay a decode step from a
  // recorded graph (block_table_width).
  const int32_t max_blocks =
      block_table_width(longest_blocks(plan), BlockTable::blocks_for(token_limit(), bs));
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

double EngineCore::now() const {
  return config_.virtual_step_seconds > 0.0 ? virtual_now_ : now_seconds() - t0_;
}

void EngineCore::advance_clock(double t) {
  CHECK(config_.virtual_step_seconds > 0.0);
  virtual_now_ = std::max(virtual_now_, t);
}

Status EngineCore::resume(uint64_t id, const std::vector<int32_t>& returned) {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  Sequence& s = it->second->seq;
  if (!s.is_paused() || !s.interception || s.interception->resumed)
    return make_error("request ", std::to_string(id), " is not paused for a tool");
  const int32_t vocab = (int32_t)model_config().vocab_size;
  for (int32_t t : returned)
    if (t < 0 || t >= vocab)
      return make_error("returned token id ", std::to_string(t), " is outside the vocabulary");
  const int64_t limit = token_limit();
  if ((int64_t)(s.tokens.size() + returned.size()) >= limit)
    return make_error("the tool result does not fit the context (", std::to_string(limit),
                      " tokens)");
  const double t = now();
  loop_->note_resume(s, t);
  scheduler_->resume(&s, returned, t);
  it->second->on_resume();
  return ok_status();
}

Result<KvPlace> EngineCore::kv_place(uint64_t id) const {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  const Sequence& s = it->second->seq;
  if (!s.is_paused()) return make_error("request ", std::to_string(id), " is not paused");
  return infercept::kv_place(s, scheduler_->config().block_size);
}

Result<int64_t> EngineCore::continue_paused(uint64_t id, GenerateRequest req) {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  Request& a = *it->second;
  Sequence& s = a.seq;
  if (!s.is_paused() || !s.interception || s.interception->resumed ||
      std::find(scheduler_->paused().begin(), scheduler_->paused().end(), &s) ==
          scheduler_->paused().end())
    return make_error("request ", std::to_string(id), " is not paused for a tool");
  TRY(validate(req));
  // The common prefix keeps its KV; at least the last prompt token runs again, so there is
  // a row to sample the first new token from.
  size_t common = 0;
  while (common < s.tokens.size() && common < req.prompt.size() &&
         s.tokens[common] == req.prompt[common])
    ++common;
  const int64_t keep = std::min<int64_t>((int64_t)common, (int64_t)req.prompt.size() - 1);
  scheduler_->truncate_paused(&s, keep);
  const int64_t reused = s.n_computed;
  const double t = now();
  loop_->note_resume(s, t);
  // The request starts over as `req` would: new parameters, triggers and counts.
  a.restart(std::move(req), config_.seed + id * 0x9e3779b97f4a7c15ull);
  a.set_kept_tokens(reused);
  scheduler_->resume(&s, {}, t);
  return reused;
}

Status EngineCore::set_interception_hint(uint64_t id, double seconds) {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  Sequence& s = it->second->seq;
  if (!s.is_paused() || !s.interception)
    return make_error("request ", std::to_string(id), " is not paused for a tool");
  s.interception->hint = seconds;
  return ok_status();
}

Status EngineCore::release(uint64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  if (!it->second->seq.is_paused())
    return make_error("request ", std::to_string(id), " is not paused");
  scheduler_->release_paused(&it->second->seq);
  return ok_status();
}

void EngineCore::execute_swaps(const StepPlan& plan, StepTiming& timing) {
  if (plan.swap_out.empty() && plan.swap_in.empty()) return;
  const double t = now_seconds();
  std::vector<int32_t> src, dst;
  auto run = [&](Backend& b, const std::vector<BlockMove>& moves, const KvStorage& from,
                 KvStorage& to) {
    if (moves.empty()) return;
    src.clear();
    dst.clear();
    for (const BlockMove& m : moves) {
      src.push_back(m.from);
      dst.push_back(m.to);
    }
    b.copy_blocks_between(from, to, src, dst);
  };
  // Swap-ins first: a host block a swap-in frees may be refilled by a swap-out of the same
  // step (the device blocks each side uses are disjoint). Every rank moves its share.
  for_each_rank([&](Backend& backend, KvStorage& kv, KvStorage& host_kv) {
    run(backend, plan.swap_in, host_kv, kv);
    run(backend, plan.swap_out, kv, host_kv);
  });
  // A device backend only queues the copies on its copy streams: they run under the forward
  // pass, and what is not hidden shows up in the step time, not as a stall here. A
  // synchronous swap (the `swap` policy: the paper's baseline, the whole context at once)
  // waits for its copies on every backend, and the wait is its stall.
  const bool async = backend_->copies_are_async() && !plan.sync_swap;
  if (!async) for_each_rank([](Backend& backend, KvStorage&, KvStorage&) { backend.sync(); });
  const double dt = now_seconds() - t;
  timing.copy_seconds = dt;
  // The CPU backend copies on the engine thread: every copy is a stall for the batch.
  if (!async) timing.stall_seconds = dt;
  if (config_.virtual_step_seconds > 0.0) timing.copy_seconds = timing.stall_seconds = 0.0;
}

StepTiming EngineCore::Executor::execute(const StepPlan& plan, const StepShape& shape,
                                         std::vector<int32_t>& tokens) {
  (void)shape;
  EngineCore& e = e_;
  StepTiming timing;
  e.execute_swaps(plan, timing);
  if (plan.scheduled.empty()) {
    // no step follows to start them
    e.for_each_rank([](Backend& backend, KvStorage&, KvStorage&) { backend.flush_copies(); });
    return timing;
  }
  const double t_build = now_seconds();
  e.build_step_input(plan);
  // Where each sampled row is drawn (RowSampling): plain ones where the logits are, those
  // with logprobs or penalties on the host.
  // Constrained rows (a matcher in force) also get their masks, computed beside the forward
  // pass (MaskWorker).
  e.sample_rows_.clear();
  e.masked_.clear();
  bool any_masked = false;
  for (const ScheduledSeq& ss : plan.scheduled) {
    if (!ss.sample) continue;
    Request& r = *e.active_.at(ss.seq->id);
    e.sample_rows_.push_back({&r.params(), &r.sampler(), r.needs_host_logits(),
                              r.matcher() != nullptr ? &r.mask() : nullptr});
    e.masked_.push_back(r.matcher() != nullptr ? &r : nullptr);
    any_masked = any_masked || r.matcher() != nullptr;
  }
  const int64_t n_logit_rows = (int64_t)e.step_input_.logit_rows.size();
  CHECK((int64_t)e.sample_rows_.size() == n_logit_rows);
  const bool any_device = e.row_sampling_.plan(*e.backend_, e.sample_rows_);
  const int64_t vocab = e.model_config().vocab_size;
  if (any_masked) {
    const grammar::Vocabulary& v = e.grammar_vocabulary();
    if (!e.mask_worker_) e.mask_worker_ = std::make_unique<MaskWorker>();
    e.mask_worker_->start([&e, &v] {
      const double t = now_seconds();
      for (Request* r : e.masked_) {
        if (r == nullptr) continue;
        std::vector<uint64_t>& mask = r->mask();
        mask.resize(v.mask_words());
        grammar::compute_mask(*r->matcher(), v, r->mask_cache(), mask.data());
        // A state no token of this vocabulary continues ends the turn, rather than leaving
        // every logit at -inf.
        if (std::all_of(mask.begin(), mask.end(), [](uint64_t w) { return w == 0; }))
          for (int32_t id : v.end_ids()) mask[(size_t)id >> 6] |= uint64_t{1} << (id & 63);
      }
      e.stats_.mask_seconds += now_seconds() - t;
    });
  }
  timing.host_seconds = now_seconds() - t_build;
  const double t0 = now_seconds();
  const int64_t replayed_before = e.backend_->replayed_steps();
  // A step that samples nothing only advances prefills: it may be given up for a newcomer
  // (interrupt_step), and then nothing of it is committed (its blocks stay with their
  // sequences for the step that runs the rows again).
  const bool may_interrupt = e.config_.interrupt_prefill && e.backend_->interruptible() &&
                             e.tp_model_ == nullptr && n_logit_rows == 0 &&
                             !e.last_step_interrupted_;
  // Every row to the host when none is drawn on the device; otherwise the logits stay there.
  const bool ran = e.model_->forward(e.step_input_, *e.kv_, any_device ? nullptr : e.logits_.data(),
                                     may_interrupt ? &e.interrupt_ : nullptr);
  e.last_step_interrupted_ = !ran;
  if (any_masked) {
    const double t = now_seconds();
    e.mask_worker_->wait();
    e.stats_.mask_wait_seconds += now_seconds() - t;
  }
  if (!ran) {
    timing.ran = false;
    timing.forward_seconds = now_seconds() - t0;
    return timing;
  }
  if (any_device)
    e.row_sampling_.draw(*e.backend_, e.model_->last_logits(n_logit_rows), e.sample_rows_,
                         e.logits_.data(), vocab);
  e.stats_.host_sampled_rows += e.row_sampling_.host_rows();
  timing.forward_seconds =
      e.config_.virtual_step_seconds > 0.0 ? e.config_.virtual_step_seconds : now_seconds() - t0;
  e.stats_.replayed_steps = e.backend_->replayed_steps();
  timing.replayed = e.stats_.replayed_steps > replayed_before ? 1 : 0;
  size_t row = 0;
  for (const ScheduledSeq& ss : plan.scheduled) {
    if (!ss.sample) continue;
    const Sequence& s = *ss.seq;
    Request& r = *e.active_.at(s.id);
    const std::span<float> logits(e.logits_.data() + row * (size_t)vocab, (size_t)vocab);
    if (e.masked_[row] != nullptr) {
      // (a device row was masked where its logits are: RowSampling::draw)
      if (e.row_sampling_.on_host(row)) grammar::apply_mask(logits, r.mask().data());
      e.stats_.masked_rows++;
    }
    const std::span<const int32_t> all(s.tokens);
    tokens.push_back(!e.row_sampling_.on_host(row)
                         ? e.row_sampling_.device_token(row)
                         : r.sampler().sample(logits, all.first((size_t)s.n_prompt),
                                              all.subspan((size_t)s.n_prompt)));
    ++row;
  }
  return timing;
}

TokenOutcome EngineCore::Requests::on_token(Sequence& s, int32_t token, size_t row, double end) {
  (void)end;
  EngineCore& e = e_;
  Request& r = *e.active_.at(s.id);
  RequestOutput out;
  out.id = s.id;
  out.new_tokens.push_back(token);
  if (r.logprobs() >= 0) {
    const int64_t vocab = e.model_config().vocab_size;
    const std::span<const float> logits(e.logits_.data() + row * (size_t)vocab, (size_t)vocab);
    out.logprobs.push_back(log_softmax_at(logits, token));
    if (r.logprobs() > 0) out.top_logprobs.push_back(top_logprobs(logits, r.logprobs()));
  }
  TokenOutcome outcome = r.on_token(token, e.token_limit(), out);
  e.outputs_.push_back(std::move(out));
  return outcome;
}

void EngineCore::Requests::on_finished(Sequence& s, double end) {
  (void)end;
  e_.active_.erase(s.id);
}

std::vector<RequestOutput> EngineCore::step() {
  outputs_.clear();
  const StepTiming timing = loop_->step(now(), *executor_, *requests_);
  if (config_.virtual_step_seconds > 0.0) virtual_now_ += timing.duration();
  // A step with nothing to compute or copy while disk jobs run (a restore the only work
  // left) would come straight back: the serving loop would spin on empty steps for the
  // read's whole duration (tens to hundreds of ms). Give the I/O thread half a millisecond
  // instead, a small fraction of any restore.
  if (timing.forward_seconds == 0.0 && timing.copy_seconds == 0.0 && outputs_.empty() &&
      scheduler_->disk_jobs_in_flight() > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  return std::move(outputs_);
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
  if ((int64_t)req.prompt.size() <= core_->long_prefill_chunk()) core_->interrupt_step();
  inbox_.emplace_back(id, std::move(req));
  cv_.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  cv_.notify_all();
}

void Engine::post(std::function<void(EngineCore&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  posted_.push_back(std::move(fn));
  cv_.notify_all();
}

Result<int64_t> Engine::continue_paused(uint64_t id, GenerateRequest req, Callback cb,
                                        KvPlace* kv_place) {
  TRY(core_->validate(req));
  auto done = std::make_shared<std::promise<Result<int64_t>>>();
  std::future<Result<int64_t>> result = done->get_future();
  auto place = std::make_shared<KvPlace>(KvPlace::recompute);
  // An agent's turn waits on the resume: a prefill step in flight is given up for it.
  core_->interrupt_step();
  post([this, id, done, place, req = std::move(req), cb = std::move(cb)](EngineCore& core) mutable {
    if (auto p = core.kv_place(id); p.ok()) *place = *p;
    Result<int64_t> r = core.continue_paused(id, std::move(req));
    if (r.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      callbacks_[id] = std::move(cb);
    }
    done->set_value(std::move(r));
  });
  try {
    Result<int64_t> r = result.get();
    if (kv_place != nullptr) *kv_place = *place;  // (written before the promise was set)
    return r;
  } catch (const std::future_error&) {
    return make_error("the engine stopped");
  }
}

void Engine::loop() {
  for (;;) {
    std::vector<std::pair<uint64_t, GenerateRequest>> inbox;
    std::vector<uint64_t> aborts;
    std::vector<std::function<void(EngineCore&)>> posted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // With paused requests around, wake up now and then: expiry and the policy's
      // re-decisions run inside step().
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] {
        return stop_ || !inbox_.empty() || !aborts_.empty() || !posted_.empty() ||
               core_->has_work();
      });
      if (stop_) return;
      // What interrupted a step is queued below: the next step may be interrupted again.
      core_->clear_interrupt();
      inbox.swap(inbox_);
      aborts.swap(aborts_);
      posted.swap(posted_);
    }
    for (auto& [id, req] : inbox) core_->add_validated(std::move(req), id);
    for (auto& fn : posted) fn(*core_);
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
