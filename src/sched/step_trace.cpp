#include "sched/step_trace.h"

#include <cerrno>
#include <cstring>

namespace infercept {

StepTraceRow step_trace_row(const StepPlan& plan, const Scheduler& sched,
                            const BlockAllocator& device, double t) {
  StepTraceRow r;
  r.t = t;
  StepShape shape;
  describe_step(plan, shape);
  r.sequences = shape.sequences;
  r.context_tokens = shape.context_tokens;
  r.sampled_rows = shape.sampled_rows;
  for (const StepChunk& c : shape.chunks) {
    r.chunk_context_tokens += c.context;
    if (!r.chunk_list.empty()) r.chunk_list += ';';
    r.chunk_list += std::to_string(c.rows) + ':' + std::to_string(c.context);
  }
  for (const ScheduledSeq& ss : plan.scheduled) {
    if (ss.is_prompt()) {
      r.prompt_rows += ss.n_tokens;
      r.chunks++;
    } else {
      r.decode_rows++;
    }
  }
  r.longest_blocks = longest_blocks(plan);
  r.free_blocks = device.n_free();
  r.running = (int64_t)sched.n_running();
  r.paused = (int64_t)sched.n_paused();
  r.waiting = (int64_t)sched.n_waiting();
  r.preempted = (int64_t)plan.preempted.size();
  r.dropped_tokens = plan.dropped_tokens;
  r.discards = plan.n_discards;
  r.swap_in_blocks = (int64_t)plan.swap_in.size();
  r.swap_out_blocks = (int64_t)plan.swap_out.size();
  return r;
}

bool plan_did_something(const StepPlan& plan) {
  return !plan.empty() || !plan.preempted.empty() || plan.dropped_tokens > 0 || plan.n_discards > 0;
}

Result<std::unique_ptr<StepTraceWriter>> StepTraceWriter::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    return make_error("cannot write the step trace '", path, "': ", std::strerror(errno));
  std::fputs(
      "t,seconds,sequences,decode_rows,prompt_rows,chunks,context_tokens,free_blocks,running,"
      "paused,waiting,preempted,dropped_tokens,discards,swap_in_blocks,swap_out_blocks,"
      "sampled_rows,chunk_context_tokens,chunk_list,longest_blocks,replayed\n",
      f);
  return std::unique_ptr<StepTraceWriter>(new StepTraceWriter(f));
}

StepTraceWriter::~StepTraceWriter() {
  std::fclose(f_);
}

void StepTraceWriter::write(const StepTraceRow& r) {
  std::fprintf(
      f_,
      "%.6f,%.6f,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,"
      "%lld,%s,%lld,%lld\n",
      r.t, r.seconds, (long long)r.sequences, (long long)r.decode_rows, (long long)r.prompt_rows,
      (long long)r.chunks, (long long)r.context_tokens, (long long)r.free_blocks,
      (long long)r.running, (long long)r.paused, (long long)r.waiting, (long long)r.preempted,
      (long long)r.dropped_tokens, (long long)r.discards, (long long)r.swap_in_blocks,
      (long long)r.swap_out_blocks, (long long)r.sampled_rows, (long long)r.chunk_context_tokens,
      r.chunk_list.c_str(), (long long)r.longest_blocks, (long long)r.replayed);
}

}  // namespace infercept
