// The command line as its users meet it: the built `infercept` binary run as a child process.
// Every subcommand answers --help and -h with its flags and an example (exit 0); positional
// arguments, unknown flags and values of the wrong type are errors that name them (exit
// non-zero, before any model is loaded or port bound); `--flag value`, `--flag=value` and the
// short options mean the same; a single-valued flag given twice takes the last value;
// generate ends its text with a newline; the progress line of bench and simulate appears only
// on a terminal.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace infercept {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs the binary with `args`; stdout and stderr captured apart (each to a file, so neither
// pipe can fill while the other is read).
CliRun run_cli(const std::vector<std::string>& args) {
  // Per process: ctest runs the tests of this file side by side.
  const std::string base = ::testing::TempDir() + "/cli_" + std::to_string(getpid());
  const std::string out_path = base + "_out.txt", err_path = base + "_err.txt";
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = open("/dev/null", O_RDONLY);
    dup2(out, 1);
    dup2(err, 2);
    dup2(in, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(INFERCEPT_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(INFERCEPT_BINARY, argv.data());
    _exit(127);
  }
  CliRun r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = testing::read_file(out_path);
  r.err = testing::read_file(err_path);
  return r;
}

// Runs the binary with stdout and stderr on a pseudo-terminal; returns what it wrote there.
std::string run_on_terminal(const std::vector<std::string>& args, int* exit_code) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(INFERCEPT_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(INFERCEPT_BINARY, argv.data());
    _exit(127);
  }
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    s.append(buf, (size_t)n);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return s;
}

bool has_server() {
#ifdef INFERCEPT_HAVE_SERVER
  return true;
#else
  return false;
#endif
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every subcommand with a flag its help must list.
const std::vector<std::pair<std::string, std::string>> kCommands = {
    {"serve", "--port"},
    {"generate", "--prompt"},
    {"chat", "--system"},
    {"info", "--model"},
    {"bench", "--workload"},
    {"simulate", "--profile"},
    {"profile", "--max-tokens-profiled"},
    {"bench-decode", "--batch"},
    {"bench-forward", "--batches"},
    {"logits", "--tokens-file"},
    {"make-model", "--shape"},
};

TEST(Cli, EveryCommandAnswersHelp) {
  for (const auto& [cmd, flag] : kCommands) {
    if (cmd == "serve" && !has_server()) continue;
    for (const std::string help : {"--help", "-h"}) {
      SCOPED_TRACE(cmd + " " + help);
      const CliRun r = run_cli({cmd, help});
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_TRUE(contains(r.out, "infercept " + cmd)) << r.out;
      EXPECT_TRUE(contains(r.out, flag)) << r.out;
      EXPECT_TRUE(contains(r.out, "Example:\n  infercept " + cmd)) << r.out;
      EXPECT_EQ(r.err, "");
    }
  }
}

TEST(Cli, HelpShowsDefaults) {
  if (has_server()) {
    const CliRun serve = run_cli({"serve", "--help"});
    EXPECT_TRUE(contains(serve.out, "-p,--port INT=8000")) << serve.out;
    EXPECT_TRUE(contains(serve.out, "--policy TEXT=minwaste")) << serve.out;
    EXPECT_TRUE(contains(serve.out, "--temperature FLOAT=1")) << serve.out;
  }
  const CliRun gen = run_cli({"generate", "--help"});
  EXPECT_TRUE(contains(gen.out, "--max-tokens INT=256")) << gen.out;
  EXPECT_TRUE(contains(gen.out, "--temperature FLOAT=0")) << gen.out;
  const CliRun sim = run_cli({"simulate", "--help"});
  EXPECT_TRUE(contains(sim.out, "--profile TEXT=h200-llama2-7b")) << sim.out;
}

TEST(Cli, TopLevelHelpListsEveryCommand) {
  const CliRun r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const auto& [cmd, flag] : kCommands) EXPECT_TRUE(contains(r.out, "  " + cmd + " ")) << cmd;
  EXPECT_NE(run_cli({}).exit_code, 0);
  const CliRun unknown = run_cli({"sevre"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(contains(unknown.err, "'sevre'")) << unknown.err;
}

TEST(Cli, PositionalArgumentIsAnError) {
  struct Case {
    std::vector<std::string> args;
    std::string named;
  };
  std::vector<Case> cases = {
      {{"generate", "hello", "--prompt", "x"}, "hello"},
      {{"info", "model.gguf"}, "model.gguf"},
      {{"simulate", "--rate", "1", "3600"}, "3600"},
      {{"make-model", "tiny", "--out", "/nonexistent/x", "--shape", "tiny"}, "tiny"},
  };
  if (has_server()) {
    cases.push_back({{"serve", "9000"}, "9000"});
    // `--port 9000 8000`: the second number is not a second port.
    cases.push_back({{"serve", "--port", "9000", "8000"}, "8000"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.named);
    const CliRun r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(contains(r.err, "not expected: " + c.named)) << r.err;
    EXPECT_TRUE(contains(r.err, "infercept " + c.args[0] + " --help")) << r.err;
  }
}

TEST(Cli, UnknownFlagIsAnErrorInEveryCommand) {
  for (const auto& [cmd, flag] : kCommands) {
    if (cmd == "serve" && !has_server()) continue;
    SCOPED_TRACE(cmd);
    const CliRun r = run_cli({cmd, "--no-such-flag", "1"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(contains(r.err, "--no-such-flag")) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // A flag of another command is unknown here too.
  const CliRun r = run_cli({"info", "--port", "9000"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "--port")) << r.err;
}

TEST(Cli, ValueOfTheWrongTypeIsAnError) {
  struct Case {
    std::vector<std::string> args;
    std::string flag, value;
  };
  std::vector<Case> cases = {
      {{"bench-decode", "--batch", "1.5"}, "--batch", "1.5"},
      {{"simulate", "--rate", "fast"}, "--rate", "fast"},
      {{"generate", "--prompt", "x", "--max-tokens=many"}, "--max-tokens", "many"},
      {{"simulate", "--gpus", "0"}, "--gpus", "0"},  // out of range
      {{"make-model", "--shape", "llama9", "--out", "/tmp/x"}, "--shape", "llama9"},
      {{"generate", "--prompt", "x", "--kv-dtype", "f8"}, "--kv-dtype", "f8"},
      {{"bench", "--prefix-cache", "maybe"}, "--prefix-cache", "maybe"},
      {{"bench", "--shared-prefix", "-5"}, "--shared-prefix", "-5"},
  };
  if (has_server()) {
    cases.push_back({{"serve", "--port", "abc"}, "--port", "abc"});
    cases.push_back({{"serve", "--prefix-cache", "2"}, "--prefix-cache", "2"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flag + " " + c.value);
    const CliRun r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(contains(r.err, c.flag)) << r.err;
    EXPECT_TRUE(contains(r.err, c.value)) << r.err;
  }
  // A flag that needs a value and has none.
  const CliRun r = run_cli({"simulate", "--rate"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "--rate")) << r.err;
}

TEST(Cli, SpellingsOfAFlagMeanTheSame) {
  const std::string model = testing::default_model_path();
  const CliRun spaced = run_cli({"info", "--model", model});
  ASSERT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_TRUE(contains(spaced.out, "architecture:")) << spaced.out;
  EXPECT_EQ(run_cli({"info", "--model=" + model}).out, spaced.out);
  EXPECT_EQ(run_cli({"info", "-m", model}).out, spaced.out);
  // The flag's value is used, not the default: a missing file is an error naming it.
  const CliRun missing = run_cli({"info", "--model=/nonexistent/m.gguf"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.err, "/nonexistent/m.gguf")) << missing.err;
}

TEST(Cli, RepeatedFlagTakesTheLastValueAndRepeatableOnesAddUp) {
  const std::string base = ::testing::TempDir() + "/cli_" + std::to_string(getpid());
  const std::string json_path = base + "_sim.json", trace_path = base + "_trace.jsonl";
  const CliRun r =
      run_cli({"simulate", "--policy", "swap", "--policy=preserve", "--rate", "2", "--duration",
               "20", "--gpus", "2", "--tokens", "*.generate=2-4", "--tokens=*.returned=5-6",
               "--trace-out", trace_path, "--json", json_path, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // --quiet
  const auto j = nlohmann::json::parse(testing::read_file(json_path));
  EXPECT_EQ(j["policy"], "preserve");
  EXPECT_EQ(j["gpus"], 2);
  EXPECT_EQ(j["duration_s"], 20.0);
  // Both --tokens overrides reached the workload: every segment generates 2-4 tokens and
  // every tool returns 5-6.
  const std::string trace = testing::read_file(trace_path);
  ASSERT_FALSE(trace.empty());
  size_t lines = 0, pos = 0;
  while (pos < trace.size()) {
    const size_t end = trace.find('\n', pos);
    const auto t = nlohmann::json::parse(trace.substr(pos, end - pos));
    for (const auto& seg : t["segments"]) {
      EXPECT_GE(seg["generate_tokens"].get<int>(), 2);
      EXPECT_LE(seg["generate_tokens"].get<int>(), 4);
      if (seg.contains("return_tokens") && seg.contains("tool")) {
        EXPECT_GE(seg["return_tokens"].get<int>(), 5);
        EXPECT_LE(seg["return_tokens"].get<int>(), 6);
      }
    }
    ++lines;
    pos = end == std::string::npos ? trace.size() : end + 1;
  }
  EXPECT_GT(lines, 10u);
}

TEST(Cli, GenerateEndsItsTextWithANewline) {
  // Greedy, so the --json run names the text the streamed run prints.
  const std::vector<std::string> args = {
      "generate",  "--model", testing::default_model_path(), "--prompt", "The capital of France is",
      "--threads", "2"};
  for (const std::string max_tokens : {"2", "4"}) {
    SCOPED_TRACE(max_tokens);
    std::vector<std::string> json_args = args, text_args = args;
    json_args.insert(json_args.end(), {"--max-tokens", max_tokens, "--json"});
    text_args.insert(text_args.end(), {"--max-tokens=" + max_tokens});
    const CliRun js = run_cli(json_args);
    ASSERT_EQ(js.exit_code, 0) << js.err;
    const std::string text = nlohmann::json::parse(js.out)["text"];
    const CliRun r = run_cli(text_args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // The text, then one newline unless it already ended with one; statistics on stderr.
    const bool ends_in_newline = !text.empty() && text.back() == '\n';
    EXPECT_EQ(r.out, ends_in_newline ? text : text + "\n");
    EXPECT_TRUE(contains(r.err, max_tokens + " generated")) << r.err;
  }
}

// --chat-template-file replaces the model's template: the prompt's ids are what it renders;
// a template the interpreter cannot use stops the start-up with the construct named.
TEST(Cli, ChatTemplateFile) {
  const std::string dir = ::testing::TempDir() + "/cli_tmpl_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string plain =
      write("plain.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string bad = write("bad.jinja", "{{ messages|frobnicate }}");
  const std::vector<std::string> args = {"generate",     "--model",  testing::default_model_path(),
                                         "--chat",       "--prompt", "Hello there",
                                         "--max-tokens", "1",        "--json",
                                         "--threads",    "2"};
  auto with = [&](const std::string& file) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--chat-template-file", file});
    return run_cli(a);
  };
  const CliRun ok = with(plain);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  // "Hello there" alone, no turn markers and no BOS: the template writes the whole prompt.
  const auto ids = nlohmann::json::parse(ok.out)["prompt_token_ids"];
  const CliRun model_template = run_cli(args);
  ASSERT_EQ(model_template.exit_code, 0) << model_template.err;
  EXPECT_LT(ids.size(), nlohmann::json::parse(model_template.out)["prompt_token_ids"].size());
  const CliRun refused = with(bad);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(contains(refused.err, "filter 'frobnicate'")) << refused.err;
  // render-template renders a template with a JSON context, and can report client spans.
  const std::string ctx =
      write("ctx.json", R"({"messages": [{"role": "user", "content": "a<b"}]})");
  const CliRun r = run_cli({"render-template", "--template", plain, "--context", ctx});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "a<b");
  const CliRun spans =
      run_cli({"render-template", "--template", plain, "--context", ctx, "--spans"});
  ASSERT_EQ(spans.exit_code, 0) << spans.err;
  EXPECT_EQ(nlohmann::json::parse(spans.out)["literal"], nlohmann::json::parse("[[0, 3]]"));
  std::filesystem::remove_all(dir);
}

TEST(Cli, ProgressLineOnlyOnATerminal) {
  const std::vector<std::string> args = {"simulate", "--rate", "2", "--duration", "60", "--quiet"};
  const CliRun piped = run_cli(args);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err, "");
  int code = -1;
  const std::string tty = run_on_terminal(args, &code);
  EXPECT_EQ(code, 0) << tty;
  EXPECT_TRUE(contains(tty, "\r\033[Ksimulate: ")) << tty;
  EXPECT_TRUE(contains(tty, "requests over 60 s of arrivals")) << tty;
  EXPECT_TRUE(contains(tty, " requests done, ")) << tty;  // the simulator's progress callback
}

TEST(Cli, BenchShowsProgressOnATerminal) {
  const std::string model = testing::default_model_path();
  const std::vector<std::string> args = {"bench", "--model",         model,  "--workload",
                                         "chat",  "--rate",          "20",   "--duration",
                                         "1.5",   "--drain",         "3",    "--time-scale",
                                         "0.01",  "--context-scale", "0.05", "--kv-cache-tokens",
                                         "2048",  "--threads",       "2",    "--quiet"};
  const CliRun piped = run_cli(args);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find('\r'), std::string::npos) << piped.err;
  int code = -1;
  const std::string tty = run_on_terminal(args, &code);
  EXPECT_EQ(code, 0) << tty;
  EXPECT_TRUE(contains(tty, "\r\033[Kbench: ")) << tty;
  EXPECT_TRUE(contains(tty, " requests done, ")) << tty;
}

// Long agent sessions at CPU scale (a 164-token shared prefix, 3 tool calls a session, pauses
// in milliseconds): every session completes, every one after the first finds the shared system
// prompt in the prefix cache, and the trace written with --trace-out replays from its file
// with the same shared prefix. (The drain is long so that a slow machine, a sanitizer build
// among parallel tests, still finishes every session: bench stops as soon as all are done.)
TEST(Cli, BenchSessionsCompleteAndHitThePrefixCache) {
  const std::string model = testing::default_model_path();
  const std::string base = ::testing::TempDir() + "/cli_sessions_" + std::to_string(getpid());
  const std::vector<std::string> common = {"bench", "--model",           model,  "--time-scale",
                                           "0.001", "--kv-cache-tokens", "4096", "--threads",
                                           "2",     "--drain",           "600",  "--quiet"};
  auto bench = [&](std::vector<std::string> extra, const std::string& json_path) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--json", json_path});
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::ifstream in(json_path);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  };
  const nlohmann::json j =
      bench({"--workload", "sessions", "--rate", "8", "--duration", "2", "--seed", "3",
             "--context-scale", "0.02", "--session", "turns=3,1", "--trace-out", base + ".jsonl"},
            base + "_run.json");
  ASSERT_TRUE(j.is_object());
  const int64_t submitted = j["summary"]["submitted"];
  EXPECT_GE(submitted, 6);
  EXPECT_EQ(j["summary"]["completed"], submitted);
  EXPECT_EQ(j["skipped"], 0);
  EXPECT_GE(j["interceptions"].get<int64_t>(), submitted);
  // Every resumed turn's first token is counted once under where its KV was.
  const nlohmann::json& rt = j["resume_ttft_s"];
  ASSERT_TRUE(rt["by_kv"].is_object()) << rt.dump();
  int64_t by_kv = 0;
  for (const auto& [place, p] : rt["by_kv"].items()) {
    EXPECT_TRUE(place == "device" || place == "host" || place == "disk" || place == "recompute")
        << place;
    by_kv += p["count"].get<int64_t>();
  }
  EXPECT_GT(rt["count"].get<int64_t>(), 0);
  EXPECT_EQ(by_kv, rt["count"].get<int64_t>()) << rt.dump();
  const nlohmann::json& pc = j["prefix_cache"];
  EXPECT_EQ(pc["shared_prefix_tokens"], 164);  // 8192 x 0.02
  // Every session but the first (and one arriving in the same step) reuses the full blocks of
  // the shared prefix: at least 8 blocks of 16 tokens.
  EXPECT_GE(pc["hit_tokens"].get<int64_t>(), (submitted - 2) * 128) << pc.dump();
  EXPECT_GT(pc["hit_rate"].get<double>(), 0.5) << pc.dump();

  const nlohmann::json replay =
      bench({"--workload", base + ".jsonl", "--shared-prefix", "164"}, base + "_replay.json");
  ASSERT_TRUE(replay.is_object());
  EXPECT_EQ(replay["summary"]["submitted"], submitted);
  EXPECT_EQ(replay["summary"]["completed"], submitted);
  EXPECT_EQ(replay["interceptions"], j["interceptions"]);
  EXPECT_EQ(replay["prefix_cache"]["shared_prefix_tokens"], 164);
  EXPECT_EQ(replay["prefix_cache"]["query_tokens"], pc["query_tokens"]);
  for (const char* suffix : {".jsonl", "_run.json", "_replay.json"})
    std::filesystem::remove(base + suffix);
}

// A float32 .npy as `infercept logits` writes it (format 1.0, C order): its values.
std::vector<float> read_npy_f32(const std::string& path) {
  const std::string bytes = testing::read_file(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return {};
  const size_t header = (unsigned char)bytes[8] | ((size_t)(unsigned char)bytes[9] << 8);
  const size_t start = 10 + header;
  std::vector<float> v((bytes.size() - start) / sizeof(float));
  std::memcpy(v.data(), bytes.data() + start, v.size() * sizeof(float));
  return v;
}

// --tensor-parallel-size on the commands that build a model without the engine: `logits`
// over two ranks gives one rank's logits (a bf16 checkpoint: f32 activations, only the sums'
// order differs), and `bench-forward` times the group, each rank holding half of the KV heads
// and of the layers' weights; a size the heads do not divide is an error naming it.
TEST(Cli, LogitsAndBenchForwardSplitOverTensorParallelRanks) {
  const std::string base = ::testing::TempDir() + "/cli_tp_" + std::to_string(getpid());
  const std::string model = base + "_qwen2";
  CliRun made = run_cli({"make-model", "--shape", "qwen2-tiny", "--out", model, "--tokenizer",
                         "byte", "--threads", "2"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  {
    std::ofstream t(base + "_tokens.json");
    t << "[[1, 72, 101, 108, 108, 111], [1, 84, 104, 101, 32, 113, 117, 105, 99, 107, 32, 98]]";
  }
  std::vector<float> logits[2];
  for (int tp : {1, 2}) {
    const std::string out = base + "_tp" + std::to_string(tp) + ".npy";
    const CliRun run =
        run_cli({"logits", "--model", model, "--tokens-file", base + "_tokens.json", "--out", out,
                 "--threads", "2", "--tensor-parallel-size", std::to_string(tp)});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    logits[tp - 1] = read_npy_f32(out);
    std::filesystem::remove(out);
  }
  ASSERT_EQ(logits[0].size(), 2u * 49152u);
  ASSERT_EQ(logits[1].size(), logits[0].size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    max_diff = std::max(max_diff, (double)std::fabs(logits[1][i] - logits[0][i]));
    max_abs = std::max(max_abs, (double)std::fabs(logits[0][i]));
  }
  EXPECT_GT(max_abs, 0.0);
  EXPECT_LT(max_diff, 1e-4 * max_abs) << max_diff << " of " << max_abs;

  nlohmann::json j[2];
  for (int tp : {1, 2}) {
    const std::string out = base + "_bf" + std::to_string(tp) + ".json";
    const CliRun run = run_cli({"bench-forward",
                                "--model",
                                model,
                                "--threads",
                                "2",
                                "--batches",
                                "1,2",
                                "--context",
                                "32",
                                "--prefill",
                                "32",
                                "--tfwd",
                                "1",
                                "--chunks",
                                "4",
                                "--repeats",
                                "1",
                                "--swap-blocks",
                                "2",
                                "--swap-batch",
                                "1",
                                "--tensor-parallel-size",
                                std::to_string(tp),
                                "--json-out",
                                out});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    std::ifstream in(out);
    j[tp - 1] = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j[tp - 1].is_object());
    std::filesystem::remove(out);
  }
  EXPECT_EQ(j[0]["tensor_parallel_size"], 1);
  EXPECT_EQ(j[1]["tensor_parallel_size"], 2);
  EXPECT_EQ(j[1]["kv_bytes_per_token"].get<double>() * 2, j[0]["kv_bytes_per_token"].get<double>());
  EXPECT_LT(j[1]["weights_gb"].get<double>(), j[0]["weights_gb"].get<double>());
  EXPECT_EQ(j[1]["decode"].size(), 2u);
  EXPECT_EQ(j[1]["swap"].size(), 3u);

  const CliRun three = run_cli({"logits", "--model", model, "--tokens-file", base + "_tokens.json",
                                "--out", base + "_tp3.npy", "--tensor-parallel-size", "3"});
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.err.find("does not divide"), std::string::npos) << three.err;
  std::filesystem::remove_all(model);
  std::filesystem::remove(base + "_tokens.json");
}

}  // namespace
}  // namespace infercept
