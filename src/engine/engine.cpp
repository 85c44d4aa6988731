#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "core/check.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/profiler.h"
#include "engine/tool_call.h"
#include "io/gguf.h"

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

// Engine-side state of one request, next to the scheduler's Sequence.
struct EngineCore::Active {
  Sequence seq;
  SamplingParams params;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stops;
  std::vector<ScriptedInterception> script;
  size_t next_script = 0;
  int64_t sampled_since_resume = 0;
  int64_t n_sampled = 0;  // tokens the model generated (tool results excluded)
  std::vector<std::string> intercept_strings;
  std::vector<int32_t> intercept_token_ids;
  bool detect_tool_calls = false;
  bool pause_at_tool_turn_end = false;
  std::unordered_map<std::string, double> tool_hints;
  int32_t logprobs = -1;
  std::string recent_text;  // generated text since the last interception (trigger search)
  std::optional<std::string> json_tool_call;  // a Llama 3 JSON tool call just completed
  int64_t max_computed = 0;  // high-water mark of n_computed: below it, prefill recomputes
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

// `--device`: cpu, cuda or cuda:N.
Result<std::unique_ptr<Backend>> make_backend(const EngineConfig& config) {
  if (config.device == "cpu") return make_cpu_backend(config.n_threads, config.cpu_numerics);
  if (config.device.rfind("cuda", 0) == 0) {
    CudaBackendOptions o;
    if (config.device.size() > 4) {
      if (config.device[4] != ':' || config.device.size() == 5 ||
          config.device.find_first_not_of("0123456789", 5) != std::string::npos)
        return make_error("bad --device '", config.device, "' (expected cpu, cuda or cuda:N)");
      o.device = std::stoi(config.device.substr(5));
    }
    o.graphs = config.cuda_graphs;
    o.activation_dtype = config.compute_dtype;
    return make_cuda_backend(o);
  }
  return make_error("unknown --device '", config.device, "' (expected cpu, cuda or cuda:N)");
}

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
  if (config.max_partial_prefills < 1 || config.long_prefill_tokens < 0)
    return make_error("partial prefills per step must be >= 1, the long-prefill chunk >= 0");
  TRY_ASSIGN(e->backend_, make_backend(config));
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
  if (config.gpu_memory_utilization > 0 && !config.kv_cache_size_given) {
    const int64_t total = e->backend_->total_memory_bytes(),
                  free = e->backend_->free_memory_bytes();
    if (total < 0)
      return make_error(
          "--gpu-memory-utilization needs a GPU device (use --kv-cache-gb on the CPU)");
    if (config.gpu_memory_utilization > 1.0)
      return make_error("--gpu-memory-utilization must be in (0, 1]");
    // What this process may still take: its share of the card minus what is already used.
    const double budget = (double)total * config.gpu_memory_utilization - (double)(total - free);
    n_blocks = (int64_t)(budget / (double)block_bytes);
    if (n_blocks < 1)
      return make_error("--gpu-memory-utilization ", std::to_string(config.gpu_memory_utilization),
                        " leaves no room for the KV cache after the weights");
  }
  if (n_blocks < 1) return make_error("the KV cache is too small for a single block");
  g.n_blocks = n_blocks;
  TRY_ASSIGN(e->kv_, e->backend_->create_kv_storage(g));
  e->allocator_ = std::make_unique<BlockAllocator>((int32_t)n_blocks);
  KvGeometry hg = g;
  hg.n_blocks = config.swap_space_tokens > 0
                    ? BlockTable::blocks_for(config.swap_space_tokens, config.block_size)
                    : (int64_t)(config.swap_space_mb * 1024.0 * 1024.0 / (double)block_bytes);
  hg.n_blocks = std::max<int64_t>(hg.n_blocks, 1);
  TRY_ASSIGN(e->host_kv_, e->backend_->create_host_kv_storage(hg));
  e->host_allocator_ = std::make_unique<BlockAllocator>((int32_t)hg.n_blocks);

  // The cost model: given, cached, or measured now (and cached for the next start).
  if (config.cost_model) {
    e->cost_ = *config.cost_model;
  } else {
    const int threads = config.n_threads > 0 ? config.n_threads : default_thread_count();
    const std::string cache =
        config.profile_path.empty()
            ? profile_cache_path(config.model_path, config.device == "cpu" ? "cpu" : "cuda",
                                 threads)
            : config.profile_path;
    auto cached = MappedFile::open(cache);
    std::optional<CostModel> loaded;
    if (cached.ok() && !config.force_profile) {
      auto cm = CostModel::from_json(
          std::string(reinterpret_cast<const char*>((*cached)->data()), (*cached)->size()), cache);
      if (cm.ok())
        loaded = *cm;
      else
        LOG_WARN("ignoring profile %s: %s", cache.c_str(), cm.error().message.c_str());
    }
    if (loaded) {
      e->cost_ = *loaded;
    } else {
      LOG_INFO("profiling the forward pass and the swap bandwidth (cached in %s)", cache.c_str());
      ProfileOptions po;
      po.token_counts = config.profile_tokens;
      if (po.token_counts.empty())
        for (int64_t x : {1, 16, 64, 128, 256, 512})
          if (x <= config.max_tokens_per_step) po.token_counts.push_back(x);
      // One timed run per point is enough on the CPU, where a step is the same every time and
      // the large ones take seconds. On CUDA the first runs of a step shape are its graph's
      // probe and capture passes, slower than the replays the engine then runs (T_fwd(1)
      // 6.2 ms cached against 4.3 replayed on the H200): best of 3 there. (The swap bandwidth
      // of those caches, one timed copy each way, also read half of what bench-forward
      // measures, 27 against 55 GB/s; whether best of 3 mends that too is still to be seen.)
      po.repeats = config.force_profile || config.device != "cpu" ? 3 : 1;
      TRY_ASSIGN(e->cost_, profile_cost_model(*e->model_, *e->backend_, *e->kv_, *e->host_kv_,
                                              config.block_size, po));
      // Cache only a complete profile (a tiny test cache cannot measure the large steps).
      const bool complete = e->cost_.t_fwd_samples.size() == po.token_counts.size();
      if (FILE* f = complete ? std::fopen(cache.c_str(), "w") : nullptr) {
        const std::string text = e->cost_.to_json();
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
      }
    }
  }
  TRY(e->cost_.validate());
  TRY_ASSIGN(e->estimator_, make_duration_estimator(config.estimator));
  TRY_ASSIGN(PolicyKind kind, parse_policy(config.policy));
  e->policy_ = make_policy(kind, e->cost_, *e->estimator_, PolicyOptions::from_env());
  SchedulerConfig sc;
  sc.block_size = config.block_size;
  sc.max_tokens_per_step = config.max_tokens_per_step;
  sc.max_seqs_per_step = config.max_seqs;
  sc.max_partial_prefills = config.max_partial_prefills;
  sc.long_prefill_tokens = config.long_prefill_tokens;
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->allocator_, e->host_allocator_.get(),
                                              e->policy_.get(), &e->cost_);
  if (!config.step_trace_path.empty()) {
    TRY_ASSIGN(e->step_trace_, StepTraceWriter::open(config.step_trace_path));
  }
  e->t0_ = now_seconds();
  e->max_context_ =
      config.max_context > 0 ? std::min(config.max_context, mc.max_context) : mc.max_context;
  e->logits_.resize((size_t)(config.max_seqs * mc.vocab_size));
  LOG_INFO("engine: %s, %lld KV blocks of %lld tokens (%.1f MiB), long-prefill chunk %lld",
           config.model_path.c_str(), (long long)n_blocks, (long long)config.block_size,
           (double)(block_bytes * (size_t)n_blocks) / (1024.0 * 1024.0),
           (long long)e->scheduler_->long_prefill_chunk());
  return e;
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
  auto a =
      std::make_unique<Active>(req.params, config_.seed + id * 0x9e3779b97f4a7c15ull, *tokenizer_);
  a->script = std::move(req.script);
  a->intercept_strings = std::move(req.intercept_strings);
  a->intercept_token_ids = std::move(req.intercept_token_ids);
  a->detect_tool_calls = req.detect_tool_calls;
  a->pause_at_tool_turn_end = req.pause_at_tool_turn_end;
  a->tool_hints = std::move(req.tool_duration_hints);
  a->logprobs = req.logprobs;
  a->recent_text = std::move(req.turn_prefix);
  a->seq.id = id;
  a->seq.arrival_time = now();
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
  TRY_ASSIGN(auto cached,
             resolve_chat_template(config_.chat_template, tokenizer_->spec().chat_template));
  TRY_ASSIGN(std::string text, render_chat(cached, messages, tools, true));
  return tokenizer_->encode(text, /*add_bos=*/true, /*parse_special=*/true);
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
  return now_seconds() - t0_;
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
  estimator_->observe(s.interception->tool, t - s.interception->call_time);
  scheduler_->resume(&s, returned, t);
  it->second->sampled_since_resume = 0;
  it->second->recent_text.clear();
  stats_.resumes++;
  return ok_status();
}

Result<int64_t> EngineCore::continue_paused(uint64_t id, GenerateRequest req) {
  auto it = active_.find(id);
  if (it == active_.end()) return make_error("no request with id ", std::to_string(id));
  Active& a = *it->second;
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
  estimator_->observe(s.interception->tool, t - s.interception->call_time);
  stats_.resumes++;
  // The request starts over as `req` would: new parameters, triggers and counts.
  a.params = req.params;
  a.sampler = Sampler(req.params, config_.seed + id * 0x9e3779b97f4a7c15ull);
  (void)a.detok.flush();
  a.stops = StopMatcher(req.params.stop);
  a.script = std::move(req.script);
  a.next_script = 0;
  a.sampled_since_resume = 0;
  a.n_sampled = 0;
  a.intercept_strings = std::move(req.intercept_strings);
  a.intercept_token_ids = std::move(req.intercept_token_ids);
  a.detect_tool_calls = req.detect_tool_calls;
  a.pause_at_tool_turn_end = req.pause_at_tool_turn_end;
  a.tool_hints = std::move(req.tool_duration_hints);
  a.logprobs = req.logprobs;
  a.recent_text = std::move(req.turn_prefix);
  a.json_tool_call.reset();
  a.max_computed = reused;
  s.tokens = std::move(req.prompt);
  s.n_prompt = (int64_t)s.tokens.size();
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

void EngineCore::execute_swaps(const StepPlan& plan, int64_t batch_tokens) {
  if (plan.swap_out.empty() && plan.swap_in.empty()) return;
  const double t = now_seconds();
  std::vector<int32_t> src, dst;
  auto run = [&](const std::vector<BlockMove>& moves, const KvStorage& from, KvStorage& to) {
    if (moves.empty()) return;
    src.clear();
    dst.clear();
    for (const BlockMove& m : moves) {
      src.push_back(m.from);
      dst.push_back(m.to);
    }
    backend_->copy_blocks_between(from, to, src, dst);
  };
  // Swap-ins first: a host block a swap-in frees may be refilled by a swap-out of the same
  // step (the device blocks each side uses are disjoint).
  run(plan.swap_in, *host_kv_, *kv_);
  run(plan.swap_out, *kv_, *host_kv_);
  // A device backend only queues the copies on its copy streams: they run under the forward
  // pass, and what is not hidden shows up in the step time, not as a stall here. The naive
  // `swap` policy (the paper's baseline: the whole context at once, synchronously) waits for
  // its copies on every backend, and the wait is its stall.
  const bool async = backend_->copies_are_async() && policy_->kind() != PolicyKind::swap;
  if (!async) backend_->sync();
  const double dt = now_seconds() - t;
  stats_.swap_seconds += dt;
  stats_.swapped_out_tokens += (int64_t)plan.swap_out.size() * config_.block_size;
  stats_.swapped_in_tokens += (int64_t)plan.swap_in.size() * config_.block_size;
  // The CPU backend copies on the engine thread: every copy is a stall for the batch.
  if (!async) stats_.waste_swap_stall += dt * (double)batch_tokens * cost_.kv_bytes_per_token;
}

// Pauses the request when one of its interception triggers fired on the token just sampled.
bool EngineCore::check_interception(Active& a, RequestOutput& out) {
  std::string tool;
  std::optional<double> hint;
  bool fire = false;
  if (a.json_tool_call) {
    tool = *a.json_tool_call;
    a.json_tool_call.reset();
    if (auto h = a.tool_hints.find(tool); h != a.tool_hints.end()) hint = h->second;
    fire = true;
  } else if (a.next_script < a.script.size() &&
             a.sampled_since_resume >= a.script[a.next_script].after_generated) {
    tool = a.script[a.next_script].tool;
    hint = a.script[a.next_script].hint;
    ++a.next_script;
    fire = true;
  }
  if (!fire && !a.seq.tokens.empty()) {
    const int32_t last = a.seq.tokens.back();
    for (int32_t t : a.intercept_token_ids)
      if (t == last) {
        tool = "token:" + std::to_string(t);
        fire = true;
        break;
      }
  }
  if (!fire) {
    for (const std::string& str : a.intercept_strings)
      if (!str.empty() && a.recent_text.find(str) != std::string::npos) {
        tool = str;
        fire = true;
        break;
      }
  }
  if (!fire && a.detect_tool_calls) {
    if (auto call = find_hermes_tool_call(a.recent_text)) {
      tool = call->name;
      if (auto h = a.tool_hints.find(tool); h != a.tool_hints.end()) hint = h->second;
      fire = true;
    }
  }
  if (!fire) return false;
  // Whatever text was held back belongs to the call: emit it with the pause.
  out.text += a.stops.flush();
  out.intercepted = true;
  out.tool = tool;
  a.recent_text.clear();
  a.sampled_since_resume = 0;
  InterceptionInfo info;
  info.tool = tool;
  info.call_time = now();
  info.hint = hint;
  scheduler_->intercept(&a.seq, std::move(info));
  stats_.interceptions++;
  return true;
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs;
  const double t_now = now();
  // Paused requests nobody answered in time give their KV back (their tokens stay).
  for (Sequence* s : std::vector<Sequence*>(scheduler_->paused()))
    if (s->interception && !s->interception->expired && s->n_computed > 0 &&
        t_now - s->interception->call_time > config_.interception_timeout_s) {
      scheduler_->release_paused(s);
      stats_.expirations++;
    }
  const double t_host = now_seconds();
  StepPlan plan = scheduler_->schedule(t_now);
  double host_s = now_seconds() - t_host;
  stats_.preemptions += (int64_t)plan.preempted.size();
  stats_.swap_preemptions += plan.n_swap_preemptions;
  stats_.recomputed_tokens += plan.dropped_tokens;
  stats_.discard_decisions += plan.n_discards;
  stats_.swap_decisions += plan.n_swap_decisions;
  stats_.preserve_decisions += plan.n_preserve_decisions;
  int64_t batch_tokens = 0;
  for (const ScheduledSeq& ss : plan.scheduled) batch_tokens += ss.seq->n_computed + ss.n_tokens;
  execute_swaps(plan, batch_tokens);
  StepTraceRow trace_row;
  if (step_trace_) trace_row = step_trace_row(plan, *scheduler_, *allocator_, t_now);
  if (plan.scheduled.empty()) {
    backend_->flush_copies();  // no step follows to start them
    if (step_trace_ && plan_did_something(plan)) step_trace_->write(trace_row);
    if (config_.check_invariants) scheduler_->check_invariants();
    return outputs;
  }
  const double t_build = now_seconds();
  build_step_input(plan);
  host_s += now_seconds() - t_build;
  stats_.host_prepare_seconds += host_s;
  // Where each sampled row is drawn (RowSampling): plain ones where the logits are, those
  // with logprobs or penalties on the host.
  sample_rows_.clear();
  for (const ScheduledSeq& ss : plan.scheduled) {
    if (!ss.sample) continue;
    Active& a = *active_.at(ss.seq->id);
    sample_rows_.push_back({&a.params, &a.sampler, a.params.has_penalties() || a.logprobs >= 0});
  }
  const int64_t n_logit_rows = (int64_t)step_input_.logit_rows.size();
  CHECK((int64_t)sample_rows_.size() == n_logit_rows);
  const bool any_device = row_sampling_.plan(*backend_, sample_rows_);
  const int64_t vocab = model_config().vocab_size;
  const double t0 = now_seconds();
  const int64_t replayed_before = backend_->replayed_steps();
  // A step that samples nothing only advances prefills: it may be given up for a newcomer
  // (interrupt_step), and then nothing of it is committed (its blocks stay with their
  // sequences for the step that runs the rows again).
  const bool may_interrupt = config_.interrupt_prefill && backend_->interruptible() &&
                             n_logit_rows == 0 && !last_step_interrupted_;
  // Every row to the host when none is drawn on the device; otherwise the logits stay there.
  const bool ran = model_->forward(step_input_, *kv_, any_device ? nullptr : logits_.data(),
                                   may_interrupt ? &interrupt_ : nullptr);
  last_step_interrupted_ = !ran;
  if (!ran) {
    stats_.interrupted_steps++;
    stats_.interrupted_seconds += now_seconds() - t0;
    // Not a trace row: the step did not happen (the gap before the next row's `t` holds it).
    if (config_.check_invariants) scheduler_->check_invariants();
    return outputs;
  }
  if (any_device)
    row_sampling_.draw(*backend_, model_->last_logits(n_logit_rows), sample_rows_, logits_.data(),
                       vocab);
  stats_.host_sampled_rows += row_sampling_.host_rows();
  const double step_s = now_seconds() - t0;
  stats_.forward_seconds += step_s;
  stats_.replayed_steps = backend_->replayed_steps();
  if (step_trace_) {
    trace_row.seconds = step_s;
    trace_row.replayed = stats_.replayed_steps > replayed_before ? 1 : 0;
    step_trace_->write(trace_row);
  }
  stats_.steps++;
  // Recompute waste: the share of this step spent on tokens whose KV had existed before,
  // times the KV memory the batch holds meanwhile.
  int64_t recompute_rows = 0;
  for (const ScheduledSeq& ss : plan.scheduled) {
    const Active& a = *active_.at(ss.seq->id);
    recompute_rows += std::max<int64_t>(
        0, std::min(a.max_computed, ss.seq->n_computed + ss.n_tokens) - ss.seq->n_computed);
  }
  if (recompute_rows > 0)
    stats_.waste_recompute += step_s * (double)recompute_rows / (double)plan.n_tokens *
                              (double)batch_tokens * cost_.kv_bytes_per_token;
  scheduler_->commit(plan);

  size_t logit_index = 0;
  std::vector<uint64_t> done;
  for (const ScheduledSeq& ss : plan.scheduled) {
    Sequence& s = *ss.seq;
    Active& a = *active_.at(s.id);
    a.max_computed = std::max(a.max_computed, s.n_computed);
    if (ss.is_prompt()) stats_.prompt_tokens_computed += ss.n_tokens;
    if (!ss.sample) continue;
    std::span<const float> row(logits_.data() + logit_index * (size_t)vocab, (size_t)vocab);
    const std::span<const int32_t> all(s.tokens);
    const int32_t tok =
        !row_sampling_.on_host(logit_index)
            ? row_sampling_.device_token(logit_index)
            : a.sampler.sample(row, all.first((size_t)s.n_prompt), all.subspan((size_t)s.n_prompt));
    ++logit_index;
    s.tokens.push_back(tok);
    a.sampled_since_resume++;
    a.n_sampled++;
    stats_.decode_tokens++;

    RequestOutput out;
    out.id = s.id;
    out.new_tokens.push_back(tok);
    if (a.logprobs >= 0) {
      out.logprobs.push_back(log_softmax_at(row, tok));
      if (a.logprobs > 0) out.top_logprobs.push_back(top_logprobs(row, a.logprobs));
    }
    out.prompt_tokens = s.n_prompt;
    out.completion_tokens = a.n_sampled;
    FinishReason reason = FinishReason::none;
    const bool is_stop_token =
        (!a.params.ignore_eos && tokenizer_->is_eog(tok)) ||
        std::find(a.params.stop_token_ids.begin(), a.params.stop_token_ids.end(), tok) !=
            a.params.stop_token_ids.end();
    if (is_stop_token) reason = FinishReason::stop;
    if (is_stop_token && (a.detect_tool_calls || a.pause_at_tool_turn_end)) {
      // A JSON tool call closed by end-of-turn pauses the request instead of ending it; so
      // does a turn with Hermes calls in it when the request pauses at the turn's end.
      if (auto call = parse_json_tool_call(a.recent_text)) {
        a.json_tool_call = call->name;
        reason = FinishReason::none;
      } else if (a.pause_at_tool_turn_end) {
        if (auto hermes = find_hermes_tool_call(a.recent_text)) {
          a.json_tool_call = hermes->name;
          reason = FinishReason::none;
        }
      }
    }
    const std::string piece_text = is_stop_token ? std::string() : a.detok.push(tok);
    if (!a.intercept_strings.empty() || a.detect_tool_calls || a.pause_at_tool_turn_end)
      a.recent_text += piece_text;
    auto piece = a.stops.push(piece_text);
    out.text = std::move(piece.text);
    if (piece.stopped) reason = FinishReason::stop;
    const int64_t limit = token_limit();
    if (reason == FinishReason::none &&
        (a.n_sampled >= a.params.max_tokens || (int64_t)s.tokens.size() >= limit))
      reason = FinishReason::length;
    if (reason == FinishReason::none) {
      check_interception(a, out);
    } else {
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
  for (uint64_t id : done) {
    const Sequence& s = active_.at(id)->seq;
    stats_.waste_preserve += s.preserved_token_seconds * cost_.kv_bytes_per_token;
    active_.erase(id);
  }
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

Result<int64_t> Engine::continue_paused(uint64_t id, GenerateRequest req, Callback cb) {
  TRY(core_->validate(req));
  auto done = std::make_shared<std::promise<Result<int64_t>>>();
  std::future<Result<int64_t>> result = done->get_future();
  // An agent's turn waits on the resume: a prefill step in flight is given up for it.
  core_->interrupt_step();
  post([this, id, done, req = std::move(req), cb = std::move(cb)](EngineCore& core) mutable {
    Result<int64_t> r = core.continue_paused(id, std::move(req));
    if (r.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      callbacks_[id] = std::move(cb);
    }
    done->set_value(std::move(r));
  });
  try {
    return result.get();
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
