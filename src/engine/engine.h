// The engine: one thread owns the model and the KV cache and runs steps
//   schedule -> build step input -> forward -> sample -> postprocess -> outputs.
// EngineCore is that loop, single-threaded and step-driven (tests and the CLI drive it
// directly); Engine wraps it with a thread, a request inbox and per-request callbacks so
// that other threads (HTTP workers, the terminal chat) only enqueue and receive outputs.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/result.h"
#include "engine/profile_probes.h"
#include "engine/row_sampling.h"
#include "engine/sampling.h"
#include "engine/step_loop.h"
#include "engine/stop_matcher.h"
#include "engine/tool_call.h"
#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "io/tensor_source.h"
#include "kv/block_allocator.h"
#include "kv/disk_tier.h"
#include "model/host_communicator.h"
#include "model/llama.h"
#include "model/tensor_parallel_model.h"
#include "sched/cost_model.h"
#include "sched/duration_estimator.h"
#include "sched/policy.h"
#include "sched/scheduler.h"
#include "sched/step_trace.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infercept {

struct EngineConfig {
  std::string model_path;
  int n_threads = 0;  // 0 = all cores
  // Tensor parallelism (model/tensor_parallel.h): the model and its KV cache split over this
  // many ranks. The CPU backend runs them as threads of this process, n_threads shared among
  // them; on CUDA a GPU a rank from --device's on, over NCCL (not yet run on a card). KV sizes
  // (--kv-cache-*, --swap-space-*) are per rank, each holding its share of the KV heads.
  int tensor_parallel_size = 1;
  // --cpu-numerics fast|llama.cpp (CpuNumerics); unset: fast.
  std::optional<CpuNumerics> cpu_numerics;
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int64_t block_size = 16;
  int64_t kv_cache_tokens = 0;  // 0 = derived from kv_cache_mb
  double kv_cache_mb = 256.0;
  // On a GPU, when > 0 and no explicit cache size was given: the KV pool takes what is left
  // of this share of the device's memory after the weights and activations.
  double gpu_memory_utilization = 0.0;
  bool kv_cache_size_given = false;  // --kv-cache-gb/mb/tokens was passed
  bool cuda_graphs = true;           // --cuda-graphs on|off: decode steps replayed as graphs
  // The CUDA backend's other options (tests, bench tools); device, graphs and dtype come from
  // `device`, `cuda_graphs` and `compute_dtype`.
  CudaBackendOptions cuda;
  DType compute_dtype = DType::bf16;  // --dtype bf16|f16: weights and activations on a GPU
  DType kv_dtype = DType::f16;
  int64_t max_tokens_per_step = 512;  // chunked-prefill token budget per step
  int64_t max_seqs = 64;              // sequences per step
  int64_t max_context = 0;            // 0 = the model's
  std::string chat_template;          // a built-in family's name; empty = the model's own
  std::string chat_template_file;     // a Jinja template file instead of the model's
  uint64_t seed = 0x5eed;             // base for requests without their own seed
  bool check_invariants = false;      // run the KV invariants after every step (tests)
  std::string step_trace_path;        // --step-trace: one CSV row per step (sched/step_trace.h)
  // Tests: > 0 makes the engine's clock virtual, every forward pass lasting this long and
  // copies hidden under it (the simulator's clock with a flat cost model); advance_clock()
  // moves it between steps.
  double virtual_step_seconds = 0.0;

  // Fair prefill (SchedulerConfig): prefills left unfinished per step beside the decode rows
  // (1 = FCFS), and the long-prefill chunk (0 = automatic).
  int64_t max_partial_prefills = 4;
  int64_t long_prefill_tokens = 0;
  // On a backend that runs ops as they are called (the CPU), a step that only advances
  // prefills (no row sampled) is given up part-way when a short request arrives, so the
  // newcomer's first token waits for a fraction of a step instead of a whole one
  // (--interrupt-prefill on|off; EngineCore::interrupt_step).
  bool interrupt_prefill = true;

  // The prefix cache (--prefix-cache on|off): full KV blocks stay indexed by their prefix
  // after their request is done, and a new request takes the longest cached prefix of its
  // prompt (kv/prefix_cache.h).
  bool prefix_cache = true;

  // Interception (docs/DESIGN.md).
  std::string policy = "minwaste";        // discard|improved-discard|preserve|swap|ttl|minwaste
  std::string estimator = "learned";      // oracle|elapsed|learned
  double swap_space_mb = 256.0;           // host tier for swapped-out KV
  int64_t swap_space_tokens = 0;          // overrides swap_space_mb when > 0
  double interception_timeout_s = 600.0;  // paused longer: KV released, tokens kept
  // The disk tier below the host pool (--kv-disk-dir, --kv-disk-gb): paused requests' host
  // KV spilled to files there under minwaste. Empty dir: none. The size must be > 0 with a
  // dir, and is meaningless without one (both are start-up errors).
  std::string kv_disk_dir;
  double kv_disk_gb = 0.0;
  // Test hook of the tier (DiskKvTierOptions::write_fault): ENOSPC, EIO without a full disk.
  std::function<int()> kv_disk_write_fault;
  // Cost model: measured by the profiler. Empty path = a quick profile at start-up unless
  // `cost_model` is given directly (tests).
  std::string profile_path;
  std::optional<CostModel> cost_model;
  bool force_profile = false;  // measure even when a cache exists (`profile`)
  // The disk tier's bandwidths `infercept profile` measured (measure_disk_bandwidth), put in
  // the profile it measures and caches; 0: not measured (the cost model's defaults).
  double disk_write_bytes_per_second = 0.0;
  double disk_read_bytes_per_second = 0.0;
  std::vector<int64_t> profile_tokens;  // token counts to measure; empty = a quick set
  // When profiling: also probe the simulator's step terms and the engine's artifacts
  // (profile_probes.h; `infercept profile`), written into the cache with them
  // (profile_file.h). Absent: T_fwd, the bandwidth and the two quick step terms only.
  std::optional<ProbeOptions> step_probes;
};

// The backend `config.device` names (cpu, cuda, cuda:N); a clear error when unavailable.
Result<std::unique_ptr<Backend>> make_backend(const EngineConfig& config);
// The GPU a `--device` of cuda or cuda:N names (0 for cuda); an error for another form.
Result<int> cuda_device_index(const std::string& device);

// The width of a step's block tables (StepInput::max_blocks) for a longest sequence of
// `blocks` blocks, where no sequence can hold more than `most` blocks: 16 blocks times a power
// of two (16, 32, 64, ...), at most `most` rounded up to 16. A device backend records a decode
// step as a CUDA graph keyed by its launch parameters, the width among them; a width that
// followed the longest context in steps of 16 blocks gave every batch of the agent workload a
// new key (the paper runs' step traces of 2026-12-01), so few steps found their graph.
int32_t block_table_width(int32_t blocks, int64_t most);

enum class FinishReason { none, stop, length, abort };
const char* finish_reason_name(FinishReason r);

// Pause after `after_generated` tokens sampled since the start or the last resume
// (benchmarks and tests: scripted tool calls).
struct ScriptedInterception {
  int64_t after_generated = 0;
  std::string tool;
  std::optional<double> hint;  // expected duration (seconds), for the oracle estimator
};

// Constrained decoding (docs/DESIGN.md "Constrained decoding"): the generated text must stay
// in `grammar`; before each sampled token, tokens that would leave it get -inf.
struct GenerationConstraint {
  std::shared_ptr<const grammar::Grammar> grammar;
  // Masks by grammar state, shared by the requests of this grammar (may be null).
  std::shared_ptr<grammar::MaskCache> cache;
  // Empty: from the first generated token, the grammar having read the request's
  // turn_prefix first. Otherwise the text is free until the turn's text (turn_prefix and
  // what was generated) contains `trigger`; the grammar then reads the text from the
  // trigger on and constrains the rest (a tool call opened by the model). With
  // trigger_at_start the trigger counts only at the start of the turn (after white space).
  std::string trigger;
  bool trigger_at_start = false;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<ScriptedInterception> script;
  std::vector<std::string> intercept_strings;  // generated text containing one pauses it
  std::vector<int32_t> intercept_token_ids;    // sampling one of these pauses it
  bool detect_tool_calls =
      false;  // a complete <tool_call> call pauses it (malformed ones are text)
  // A turn that ends (end-of-turn token) with tool calls in its text (Hermes <tool_call>
  // blocks, or a Llama 3 JSON call) pauses instead of finishing: the OpenAI server's
  // semantics, where a response carries all of a turn's calls (parallel calls included).
  bool pause_at_tool_turn_end = false;
  // Text of the turn that is already in the prompt (a generation made to start inside a
  // tool call): the tool-call triggers see it in front of the generated text.
  std::string turn_prefix;
  // Where the prompt left the turn relative to a reasoning block (think_start_of_prompt):
  // the engine's reading of the turn for calls starts there.
  ThinkStart think_start = ThinkStart::model;
  // The turn may hold tool calls read from its text: the format's marker tokens that are
  // control tokens ([TOOL_CALLS], <|python_tag|>) are rendered in the output text (they are
  // left out otherwise). Implied by detect_tool_calls and pause_at_tool_turn_end.
  bool tool_call_text = false;
  // Expected tool durations (seconds) by tool name, given to the oracle estimator when the
  // request pauses on that tool.
  std::unordered_map<std::string, double> tool_duration_hints;
  // Logprobs of sampled tokens: -1 none, 0 the sampled token's, n also the n most likely.
  // Computed from the model's raw distribution (before penalties and temperature).
  int32_t logprobs = -1;
  // Who may share this request's cached KV (the prefix cache): requests of one namespace
  // share, requests of different ones never do. The OpenAI server sets it from the API key
  // and the request's prompt_cache_key / cache_salt; empty is a namespace like any other.
  std::string cache_namespace;
  // Null: unconstrained (and no cost).
  std::shared_ptr<const GenerationConstraint> constraint;
};

// What one step produced for one request.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> new_tokens;  // tokens sampled this step (0 or 1)
  std::string text;                 // newly completed text (stop strings held back)
  FinishReason finish = FinishReason::none;
  bool intercepted = false;  // the request paused for a tool; resume() continues it
  std::string tool;          // the tool it waits for
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens whose KV the request found in place instead of computing it: the KV a
  // paused request kept for its continuation and the prefix cache's hits
  // (usage.prompt_tokens_details.cached_tokens). Set once the prompt has been scheduled.
  int64_t cached_tokens = 0;
  // With GenerateRequest::logprobs >= 0: one entry per new token.
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // with logprobs > 0
  bool finished() const { return finish != FinishReason::none; }
};

// The step loop's counters (StepStats: steps, decisions, waste by cause, ...) and what only
// the engine knows.
struct EngineStats : StepStats {
  int64_t replayed_steps = 0;  // steps the backend ran from a recording (CUDA graphs)
  // Sampled rows whose logits went to the host (penalties, logprobs, or a backend that does
  // not draw them); the rest were drawn where the logits are.
  int64_t host_sampled_rows = 0;
  // Constrained rows: token masks applied, and the time spent computing them (on the mask
  // worker, beside the forward pass) and waiting for them after it.
  int64_t masked_rows = 0;
  double mask_seconds = 0.0;
  double mask_wait_seconds = 0.0;
};

class Request;

class EngineCore {
 public:
  static Result<std::unique_ptr<EngineCore>> create(const EngineConfig& config);
  ~EngineCore();

  // Validates and queues a request; returns its id. Errors: empty prompt, prompt longer than
  // the context or the cache, bad sampling parameters.
  Result<uint64_t> add_request(GenerateRequest req);
  // The checks of add_request alone; const and safe from any thread.
  Status validate(const GenerateRequest& req) const;
  // Queues an already validated request under a caller-chosen, unused id.
  void add_validated(GenerateRequest req, uint64_t id);
  // Stops a request; its KV is released. Unknown ids are ignored.
  void abort(uint64_t id);
  // The tool answered: `returned` tokens are appended and the request continues. Errors:
  // unknown id, a request that is not paused.
  Status resume(uint64_t id, const std::vector<int32_t>& returned);
  // Drops the KV of a paused request; a later resume recomputes it.
  Status release(uint64_t id);
  // Where a paused request's KV is now (bench reports resumed turns' first token by it).
  // Errors: unknown id, not paused.
  Result<KvPlace> kv_place(uint64_t id) const;
  // A new request continues paused request `id` (the OpenAI server's resume: the client
  // sends the whole conversation again). `req.prompt` should extend the paused request's
  // tokens; the KV of their common prefix is kept, the rest dropped, and the request then
  // runs under the same id exactly as a fresh request with `req` would (new prompt,
  // parameters and triggers; the counts of the output restart), its cached prefix already
  // computed. Returns how many prompt tokens found their KV in place (0 when the policy had
  // dropped it). Errors: unknown id, not paused, an invalid request.
  Result<int64_t> continue_paused(uint64_t id, GenerateRequest req);
  // Sets the expected duration (seconds) of a paused request's tool, for the oracle
  // estimator. Errors: unknown id, not paused.
  Status set_interception_hint(uint64_t id, double seconds);
  // Runs one step. Returns the outputs of the requests that sampled or finished.
  std::vector<RequestOutput> step();
  // From any thread: a short request is on its way (Engine::submit, a resume). A step in
  // flight that only advances prefills is given up (config().interrupt_prefill, an
  // interruptible backend) unless the step before it was too, so a stream of newcomers
  // cannot starve a long prompt; the caller clears the flag once the newcomer is queued.
  void interrupt_step() { interrupt_.store(true, std::memory_order_relaxed); }
  void clear_interrupt() { interrupt_.store(false, std::memory_order_relaxed); }
  // Prompts of at most this many tokens are short (the scheduler's long-prefill chunk).
  int64_t long_prefill_chunk() const { return scheduler_->long_prefill_chunk(); }
  bool has_work() const { return scheduler_->has_work(); }

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& model_config() const { return source_->config(); }
  const ModelSource& model_source() const { return *source_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  // How the model writes a turn: its tool-call format and reasoning blocks (turn_format()).
  const TurnFormat& turn_format() const { return turn_format_; }
  const EngineConfig& config() const { return config_; }
  const EngineStats& stats() const { return stats_; }
  int64_t max_context() const { return max_context_; }
  int64_t kv_capacity_tokens() const { return scheduler_->capacity_tokens(); }
  // The most tokens a sequence can hold: the context limit, or the KV cache if smaller.
  int64_t token_limit() const { return std::min(max_context_, kv_capacity_tokens()); }
  const BlockAllocator& allocator() const { return *allocator_; }
  const BlockAllocator& host_allocator() const { return *host_allocator_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  const CostModel& cost_model() const { return cost_; }
  const DurationEstimator& estimator() const { return *estimator_; }
  const Policy& policy() const { return *policy_; }
  // The disk tier (null without --kv-disk-dir): tests corrupt its files.
  const DiskKvTier* disk_tier() const { return disk_tier_.get(); }
  double now() const;
  // With config().virtual_step_seconds: moves the virtual clock to `t` (never back).
  void advance_clock(double t);
  // Renders a chat with the model's template and tokenizes it (special tokens parsed).
  Result<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                           const std::vector<ToolDefinition>& tools) const;

 private:
  class Executor;
  class Requests;
  EngineCore();
  // The steps of create(), in order.
  Status create_model();
  Status create_kv_pools();
  Status create_disk_tier();
  Status load_cost_model();
  Status create_step_loop();
  void build_step_input(const StepPlan& plan);
  // fn(backend, device KV, host KV) for rank 0 and then every other rank.
  template <typename Fn>
  void for_each_rank(Fn&& fn) {
    fn(*backend_, *kv_, *host_kv_);
    if (other_ranks_.empty()) return;
    for (OtherRank& r : other_ranks_) {
      r.backend->bind_thread();  // (a GPU's ops on this thread go to its device)
      fn(*r.backend, *r.kv, *r.host_kv);
    }
    backend_->bind_thread();
  }

  EngineConfig config_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
  TurnFormat turn_format_;
  std::vector<int32_t> marker_ids_;   // turn_format_'s markers that are control tokens
  std::unique_ptr<Backend> backend_;  // rank 0's with tensor parallelism
  // Ranks 1.. of a tensor-parallel engine (rank 0 is backend_, kv_, host_kv_); declared before
  // model_, whose rank threads use them, so that they outlive it.
  struct OtherRank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<KvStorage> kv, host_kv;
  };
  std::unique_ptr<HostGroup> tp_group_;
  std::vector<std::unique_ptr<Communicator>> tp_comms_;
  std::vector<OtherRank> other_ranks_;
  std::unique_ptr<StepModel> model_;
  TensorParallelModel* tp_model_ = nullptr;  // model_, when it is a tensor-parallel group
  std::unique_ptr<KvStorage> kv_;
  std::unique_ptr<BlockAllocator> allocator_;
  std::unique_ptr<KvStorage> host_kv_;
  std::unique_ptr<BlockAllocator> host_allocator_;
  std::unique_ptr<DiskKvTier> disk_tier_;
  std::unique_ptr<DiskMover> disk_mover_;
  int64_t disk_blocks_ = 0;  // what the tier's budget holds in host blocks
  CostModel cost_;
  std::unique_ptr<DurationEstimator> estimator_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StepTraceWriter> step_trace_;  // null unless config_.step_trace_path is set
  double t0_ = 0.0;
  double virtual_now_ = 0.0;            // the clock under config_.virtual_step_seconds
  std::atomic<bool> interrupt_{false};  // interrupt_step()
  bool last_step_interrupted_ = false;
  void execute_swaps(const StepPlan& plan, StepTiming& timing);
  std::unordered_map<uint64_t, std::unique_ptr<Request>> active_;
  uint64_t next_id_ = 1;
  int64_t max_context_ = 0;
  StepInput step_input_;
  std::vector<float> logits_;             // [max_seqs, vocab]
  std::vector<RowToSample> sample_rows_;  // this step's sampled rows, in logit-row order
  RowSampling row_sampling_;              // where each is drawn; the device-drawn tokens
  // The vocabulary as constrained decoding sees it (every token id's bytes), made on first use.
  const grammar::Vocabulary& grammar_vocabulary();
  std::unique_ptr<grammar::Vocabulary> vocab_;
  class MaskWorker;
  std::unique_ptr<MaskWorker> mask_worker_;  // constrained rows' masks, beside the forward
  std::vector<Request*> masked_;             // this step's constrained rows' requests
  EngineStats stats_;
  // The step (step_loop.h): the loop, the model as its executor, the requests' side, and
  // the outputs of the step in progress.
  std::unique_ptr<StepLoop> loop_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Requests> requests_;
  std::vector<RequestOutput> outputs_;
};

// EngineCore on its own thread. Callbacks run on the engine thread: keep them short.
class Engine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;
  explicit Engine(std::unique_ptr<EngineCore> core);
  ~Engine();  // stops the thread; pending requests are aborted

  // Queues a request; the callback receives every output, the last one with finished().
  Result<uint64_t> submit(GenerateRequest req, Callback cb);
  void abort(uint64_t id);
  // Runs `fn` on the engine thread between steps (resume, release, inspection).
  void post(std::function<void(EngineCore&)> fn);
  // EngineCore::continue_paused on the engine thread; on success `cb` receives the request's
  // outputs from then on. Blocks until done (an error when the engine stops first).
  // `kv_place` (optional): where the paused request's KV was when the follow-up came.
  Result<int64_t> continue_paused(uint64_t id, GenerateRequest req, Callback cb,
                                  KvPlace* kv_place = nullptr);
  const EngineCore& core() const { return *core_; }

 private:
  void loop();

  std::unique_ptr<EngineCore> core_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<uint64_t, GenerateRequest>> inbox_;
  std::vector<uint64_t> aborts_;
  std::vector<std::function<void(EngineCore&)>> posted_;
  std::unordered_map<uint64_t, Callback> callbacks_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace infercept
