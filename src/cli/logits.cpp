// `infercept logits`: the last-position logits of token sequences, written as a float32
// .npy [n_sequences, vocab]; what bench/compare_logits.py holds against another engine's
// (HF transformers on the same checkpoint and device, bench/hf_reference.py).
// --one-token-steps: each sequence goes in one token a step (decode steps of one row over the
// cache so far, the path a batch-1 decode takes) instead of one prefill step.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "engine/model_group.h"
#include "kv/block_allocator.h"

namespace infercept::cli {

namespace {

// The token file: a JSON list of non-empty lists of ids, or an object holding one under
// "tokens" or "sequences".
Result<std::vector<std::vector<int32_t>>> read_token_sequences(const std::string& path) {
  std::ifstream tf(path);
  if (!tf) return make_error("cannot read ", path);
  auto j = nlohmann::json::parse(tf, nullptr, false);
  if (j.is_object())
    j = j.contains("tokens") ? j["tokens"] : j.value("sequences", nlohmann::json());
  if (!j.is_array() || j.empty())
    return make_error(path, ": expected a JSON list of token-id lists");
  std::vector<std::vector<int32_t>> seqs;
  for (auto& s : j) {
    if (!s.is_array() || s.empty())
      return make_error(path, ": every sequence must be a non-empty list");
    seqs.emplace_back();
    for (auto& t : s) {
      if (!t.is_number_integer()) return make_error(path, ": token ids must be integers");
      seqs.back().push_back(t.get<int32_t>());
    }
  }
  return seqs;
}

// .npy v1.0: magic, header length, a Python dict literal padded to 64 bytes, then the data.
Status write_npy(const std::string& path, const std::vector<float>& data, size_t rows,
                 int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return make_error("cannot write ", path);
  const uint16_t hlen = (uint16_t)header.size();
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&hlen), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(data.data()),
          (std::streamsize)(data.size() * sizeof(float)));
  if (!f.good()) return make_error("cannot write ", path);
  return ok_status();
}

// Each sequence's last-position logits, one sequence after another in the same cache from
// position 0: [n_sequences, vocab]. `one_token_steps`: one token a step (decode steps of one
// row over the cache so far) instead of one prefill step.
Result<std::vector<float>> last_logits(const ModelSource& src, const EngineConfig& cfg,
                                       const std::vector<std::vector<int32_t>>& seqs,
                                       bool one_token_steps, std::string* backend_name) {
  const ModelConfig& mc = src.config();
  size_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.size());
  // With --tensor-parallel-size N the ranks each hold their share of the KV heads; rank 0's
  // logits are the group's (engine/model_group.h).
  TRY_ASSIGN(ModelGroup group, create_model_group(cfg, src, (int64_t)longest, 1));
  *backend_name = group.backends[0]->name();
  if (group.world() > 1) *backend_name += " x " + std::to_string(group.world()) + " ranks";
  StepModel* model = group.model.get();
  const KvGeometry g = rank_kv_geometry(*model, cfg.block_size, cfg.kv_dtype,
                                        BlockTable::blocks_for((int64_t)longest, cfg.block_size));
  TRY_ASSIGN(std::vector<RankKv> rank_kv, create_rank_kv(group.ranks(), group.group, g, 0));
  KvStorage* kv = rank_kv[0].kv.get();
  std::vector<float> all;
  std::vector<float> row((size_t)mc.vocab_size);
  // One step of tokens [p0, p0 + len) of a sequence over the cache so far (positions and
  // slots equal: one sequence at a time, its blocks in order); the last row's logits into
  // `row` when `last`.
  auto step = [&](const std::vector<int32_t>& s, int32_t p0, int32_t len, bool last) {
    StepInput in;
    in.tokens.assign(s.begin() + p0, s.begin() + p0 + len);
    for (int32_t p = p0; p < p0 + len; ++p) {
      in.positions.push_back(p);
      in.slots.push_back(p);
    }
    in.q_start = {0};
    in.q_len = {len};
    in.ctx_len = {p0 + len};
    in.max_blocks = (int32_t)g.n_blocks;
    for (int32_t b = 0; b < in.max_blocks; ++b) in.block_tables.push_back(b);
    if (last) in.logit_rows = {len - 1};
    model->forward(in, *kv, last ? row.data() : nullptr);
  };
  for (const auto& s : seqs) {
    const int32_t n = (int32_t)s.size();
    if (one_token_steps)
      for (int32_t p = 0; p < n; ++p) step(s, p, 1, p == n - 1);
    else
      step(s, 0, n, true);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

}  // namespace

int run_logits(int argc, char** argv) {
  CLI::App app{
      "Writes the last-position logits of token sequences as a float32 .npy "
      "[n_sequences, vocab].",
      "infercept logits"};
  set_up_app(app, "infercept logits --tokens-file tokens.json --out logits.npy");
  EngineFlags engine_flags;
  std::string tokens_path, out_path;
  bool one_token_steps = false;
  app.add_option("--tokens-file", tokens_path, "JSON list of token-id lists (required)");
  app.add_option("--out", out_path, "the .npy to write (required)");
  app.add_flag("--one-token-steps", one_token_steps,
               "feed each sequence one token a step (decode steps) instead of one prefill");
  add_engine_flags(app, engine_flags);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  if (tokens_path.empty() || out_path.empty())
    return fail(Error{"--tokens-file and --out are required"});
  auto cfg = engine_config_from(engine_flags);
  if (!cfg.ok()) return fail(cfg.error());
  auto sequences = read_token_sequences(tokens_path);
  if (!sequences.ok()) return fail(sequences.error());
  const std::vector<std::vector<int32_t>>& seqs = *sequences;
  auto src = open_model_source(cfg->model_path);
  if (!src.ok()) return fail(src.error());
  const ModelConfig& mc = (*src)->config();
  for (const auto& s : seqs)
    for (int32_t t : s)
      if (t < 0 || t >= mc.vocab_size)
        return fail(Error{"token id " + std::to_string(t) + " is outside the vocabulary"});
  std::string backend_name;
  auto all = last_logits(**src, *cfg, seqs, one_token_steps, &backend_name);
  if (!all.ok()) return fail(all.error());
  if (Status st = write_npy(out_path, *all, seqs.size(), mc.vocab_size); !st.ok())
    return fail(st.error());
  std::printf("wrote %s: %zu x %lld logits (%s)\n", out_path.c_str(), seqs.size(),
              (long long)mc.vocab_size, backend_name.c_str());
  return 0;
}

}  // namespace infercept::cli
