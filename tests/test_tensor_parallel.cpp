// Tensor parallelism on the CPU backend: a model split over N ranks (each a CPU backend with
// its share of the weights and of the KV heads, model/tensor_parallel.h), stepping together
// through the in-process all-reduce, computes what the whole model computes. The only
// difference is the order of two sums per layer (each rank's partial product, then the sum
// over ranks), so logits agree to float rounding and greedy tokens are the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "engine/random_checkpoint.h"
#include "gguf_writer.h"
#include "io/tensor_source.h"
#include "model/host_communicator.h"
#include "model/llama.h"
#include "model/tensor_parallel_model.h"
#include "test_util.h"

namespace infercept {
namespace {

constexpr int32_t kBlocks = 8, kBlockSize = 16;

KvGeometry geometry(const ModelConfig& c) {
  return {c.n_layers, kBlocks, kBlockSize, c.n_kv_heads, c.head_dim, DType::f16};
}

// One step of one sequence whose cache holds tokens[0, from): feeds [from, to), logits of the
// last row.
StepInput step_of(const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
  StepInput in;
  for (int64_t p = from; p < to; ++p) {
    in.tokens.push_back(tokens[(size_t)p]);
    in.positions.push_back((int32_t)p);
    in.slots.push_back((int32_t)p);  // identity block table
  }
  in.logit_rows.push_back((int32_t)(to - from - 1));
  in.q_start = {0};
  in.q_len = {(int32_t)(to - from)};
  in.ctx_len = {(int32_t)to};
  in.max_blocks = kBlocks;
  for (int32_t b = 0; b < kBlocks; ++b) in.block_tables.push_back(b);
  return in;
}

int32_t argmax(const std::vector<float>& v) {
  return (int32_t)(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding of `steps` tokens after `prompt` (one step for the prompt, then one per
// token) by `forward`, which runs a step and returns its logits. All logits, step by step.
template <typename Forward>
std::vector<std::vector<float>> greedy(std::vector<int32_t> tokens, int steps, Forward forward) {
  std::vector<std::vector<float>> out;
  int64_t fed = 0;
  for (int i = 0; i < steps; ++i) {
    out.push_back(forward(step_of(tokens, fed, (int64_t)tokens.size())));
    fed = (int64_t)tokens.size();
    tokens.push_back(argmax(out.back()));
  }
  return out;
}

// max_diff: of the logit range, the most any logit may differ.
void expect_same_run(const ModelSource& src, int world, double max_diff) {
  const ModelConfig& c = src.config();
  const std::vector<int32_t> prompt = {1, 504, 3575, 282, 4649, 314, 1489, 28264, 24, 94, 725};
  std::vector<int32_t> in_vocab = prompt;
  for (int32_t& t : in_vocab) t %= (int32_t)c.vocab_size;
  const int steps = 12;

  auto whole_backend = make_cpu_backend(1);
  auto whole = LlamaModel::create(src, *whole_backend, 64, 1);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  auto whole_kv = whole_backend->create_kv_storage(geometry(c));
  ASSERT_TRUE(whole_kv.ok());
  const auto reference = greedy(in_vocab, steps, [&](const StepInput& in) {
    std::vector<float> logits((size_t)c.vocab_size);
    (*whole)->forward(in, **whole_kv, logits.data());
    return logits;
  });

  HostGroup group(world);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<HostCommunicator>> comms;
  std::vector<Backend*> backend_ptrs;
  std::vector<Communicator*> comm_ptrs;
  for (int r = 0; r < world; ++r) {
    backends.push_back(make_cpu_backend(1));
    comms.push_back(std::make_unique<HostCommunicator>(group, r));
    backend_ptrs.push_back(backends.back().get());
    comm_ptrs.push_back(comms.back().get());
  }
  auto tp = TensorParallelModel::create(src, backend_ptrs, comm_ptrs, 64, 1);
  ASSERT_TRUE(tp.ok()) << tp.error().message;
  const ModelConfig& s = (*tp)->shard_config();
  EXPECT_EQ(s.n_heads * world, c.n_heads);
  EXPECT_EQ(s.n_kv_heads * world, c.n_kv_heads);
  EXPECT_EQ(s.d_ff * world, c.d_ff);
  std::vector<std::unique_ptr<KvStorage>> kvs;
  std::vector<KvStorage*> kv_ptrs;
  for (int r = 0; r < world; ++r) {
    auto kv = backends[(size_t)r]->create_kv_storage(geometry(s));
    ASSERT_TRUE(kv.ok());
    kvs.push_back(std::move(*kv));
    kv_ptrs.push_back(kvs.back().get());
  }
  const auto sharded = greedy(in_vocab, steps, [&](const StepInput& in) {
    std::vector<float> logits((size_t)c.vocab_size);
    (*tp)->forward(in, kv_ptrs, logits.data());
    return logits;
  });

  ASSERT_EQ(sharded.size(), reference.size());
  double worst = 0.0, sum = 0.0;
  int64_t n = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    // Same token chosen at every step: both runs fed the same sequence.
    EXPECT_EQ(argmax(sharded[i]), argmax(reference[i])) << "step " << i;
    const auto [lo, hi] = std::minmax_element(reference[i].begin(), reference[i].end());
    const double range = std::max(1e-6, (double)(*hi - *lo));
    for (size_t v = 0; v < reference[i].size(); ++v) {
      const double d = std::fabs((double)sharded[i][v] - reference[i][v]) / range;
      worst = std::max(worst, d);
      sum += d;
      ++n;
    }
  }
  std::printf("%s, %d ranks: logit difference mean %.3g, largest %.3g of the logit range\n",
              c.name.c_str(), world, sum / (double)n, worst);
  EXPECT_LT(worst, max_diff);
  EXPECT_LT(sum / (double)n, max_diff / 10);
}

TEST(TensorParallel, DefaultModelOverThreeRanksMatchesTheWholeModel) {
  // SmolLM2-135M: 9 query heads, 3 KV heads, FFN 1536, q4_1 matrices (wo's share per rank:
  // 3 heads x 64 = 192 inputs, six blocks of 32).
  auto src = open_model_source(testing::default_model_path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  // The CPU backend quantizes activations to q8 blocks for quantized weights: a residual that
  // differs in its last bit can round an activation to the next q8 step, so the reordered sums
  // move logits by up to a few hundredths of their range; the tokens stay the same.
  expect_same_run(**src, 3, 0.05);
}

class TensorParallelArch : public ::testing::TestWithParam<std::pair<const char*, int>> {};

// The architectures' own parts split too: Qwen2's q/k/v biases with their heads, Qwen3's
// per-head q/k norms replicated, Mistral as Llama.
TEST_P(TensorParallelArch, RanksMatchTheWholeModel) {
  const auto [shape_name, world] = GetParam();
  auto shape = find_llama_shape(shape_name);
  ASSERT_TRUE(shape.ok()) << shape.error().message;
  const std::string dir =
      ::testing::TempDir() + "/tp_" + shape_name + "_" + std::to_string(getpid());
  RandomCheckpointOptions o;
  o.shape = *shape;
  o.out_dir = dir;
  o.tokenizer_source = testing::default_model_path();
  o.n_threads = 2;
  auto written = write_random_checkpoint(o);
  ASSERT_TRUE(written.ok()) << written.error().message;
  auto src = open_model_source(dir);
  ASSERT_TRUE(src.ok()) << src.error().message;
  expect_same_run(**src, world, 1e-4);  // bf16 weights, f32 activations: rounding alone
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelArch,
                         ::testing::Values(std::pair{"tiny", 2}, std::pair{"tiny", 4},
                                           std::pair{"qwen2-tiny", 2}, std::pair{"qwen3-tiny", 4},
                                           std::pair{"mistral-tiny", 2}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.first) + "_" +
                                           std::to_string(info.param.second);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// What cannot be split is refused with the reason, before any weight is loaded.
TEST(TensorParallel, UnsplittableShapesAreRefusedWithTheReason) {
  ModelConfig c;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.d_ff = 1536;
  EXPECT_TRUE(check_tensor_parallel(c, 1, DType::q4_1).ok());
  EXPECT_TRUE(check_tensor_parallel(c, 3, DType::q4_1).ok());
  auto two = check_tensor_parallel(c, 2, DType::q4_1);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("query heads (9)"), std::string::npos) << two.error().message;
  c.n_heads = 12;
  c.n_kv_heads = 6;
  c.head_dim = 8;  // 12 / 3 x 8 = 32 inputs per rank: one q4_1 block; 12 / 6 x 8 = 16: half
  c.d_ff = 192;
  EXPECT_TRUE(check_tensor_parallel(c, 3, DType::q4_1).ok());
  auto six = check_tensor_parallel(c, 6, DType::q4_1);
  ASSERT_FALSE(six.ok());
  EXPECT_NE(six.error().message.find("blocks of 32"), std::string::npos) << six.error().message;
  EXPECT_TRUE(check_tensor_parallel(c, 6, DType::bf16).ok());
  EXPECT_FALSE(check_tensor_parallel(c, 0, DType::bf16).ok());
}

// A file may quantize one tensor differently from the first layer's, which
// check_tensor_parallel judges the split by: loading a rank whose slice of that tensor cuts its
// quantization blocks is an error naming the tensor, never a crash or a wrong slice.
TEST(TensorParallel, ASliceThatCutsAnotherTensorsBlocksIsAnErrorNamingIt) {
  testing::TinyLlama m;
  m.d_ff = 32;                              // 16 FFN inputs a rank over 2: half a q4_1 block
  m.q4_1_tensor = "blk.1.ffn_down.weight";  // blk.0 and everything else f32
  testing::GgufWriter w;
  testing::add_tiny_llama(w, m);
  const std::string path =
      ::testing::TempDir() + "/tp_mixed_quant_" + std::to_string(getpid()) + ".gguf";
  {
    std::ofstream f(path, std::ios::binary);
    f << w.build();
    ASSERT_TRUE(f.good());
  }
  auto src = open_model_source(path);
  ASSERT_TRUE(src.ok()) << src.error().message;
  HostGroup group(2);
  HostCommunicator comm0(group, 0), comm1(group, 1);
  Communicator* comms[] = {&comm0, &comm1};
  for (int rank : {0, 1}) {
    auto backend = make_cpu_backend({});
    ASSERT_TRUE(backend);
    auto model = LlamaModel::create(**src, *backend, 8, 1, comms[rank]);
    ASSERT_FALSE(model.ok()) << "rank " << rank;
    const std::string& msg = model.error().message;
    EXPECT_NE(msg.find("blk.1.ffn_down.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not whole blocks of 32"), std::string::npos) << msg;
  }
  // Over one rank nothing is sliced: the same file loads.
  auto backend = make_cpu_backend({});
  ASSERT_TRUE(backend);
  EXPECT_TRUE(LlamaModel::create(**src, *backend, 8, 1).ok());
  std::filesystem::remove(path);
}

// The host all-reduce: every rank ends with the sum, the same bits on all.
TEST(HostCommunicator, EveryRankGetsTheSum) {
  for (int world : {1, 2, 3, 5}) {
    HostGroup group(world);
    const int64_t rows = 7, cols = 13;
    std::vector<std::vector<float>> data((size_t)world, std::vector<float>(rows * cols));
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < rows * cols; ++i)
        data[(size_t)r][(size_t)i] = 0.25f * (float)(r + 1) * (float)i;
    auto backend = make_cpu_backend(1);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        HostCommunicator comm(group, r);
        Tensor t{data[(size_t)r].data(), DType::f32, rows, cols, cols};
        for (int rep = 0; rep < 3; ++rep)
          comm.all_reduce_sum(*backend, t.slice_rows(0, rows - rep));
      });
    for (auto& t : threads) t.join();
    // Three calls: rows [0, 7) summed once, [0, 6) twice more, [0, 5) three times over.
    const float n = (float)world * (float)(world + 1) / 2.0f;
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < rows * cols; ++i) {
        const int64_t row = i / cols;
        const int sums = row < rows - 2 ? 3 : (row < rows - 1 ? 2 : 1);
        float expect = 0.25f * (float)i;
        for (int k = 0; k < sums; ++k) expect = (k == 0 ? expect * n : expect * (float)world);
        ASSERT_FLOAT_EQ(data[(size_t)r][(size_t)i], expect) << "world " << world << " rank " << r;
      }
  }
}

}  // namespace
}  // namespace infercept
