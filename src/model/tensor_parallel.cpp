#include "model/tensor_parallel.h"

#include <string>

namespace infercept {

Status check_tensor_parallel(const ModelConfig& c, int world, DType weight_dtype) {
  if (world < 1) return make_error("tensor parallel size must be at least 1");
  if (world == 1) return ok_status();
  auto divides = [&](const char* what, int64_t n) -> Status {
    if (n % world != 0)
      return make_error("tensor parallel size ", std::to_string(world), " does not divide ", what,
                        " (", std::to_string(n), ")");
    return ok_status();
  };
  TRY(divides("the query heads", c.n_heads));
  TRY(divides("the key/value heads", c.n_kv_heads));
  TRY(divides("the FFN width", c.d_ff));
  const int64_t block = dtype_block_elems(weight_dtype);
  const int64_t wo_inputs = c.n_heads / world * c.head_dim, down_inputs = c.d_ff / world;
  if (wo_inputs % block != 0 || down_inputs % block != 0)
    return make_error("tensor parallel size ", std::to_string(world), ": a rank's share of ",
                      wo_inputs % block != 0 ? "the attention output's" : "the FFN's", " inputs (",
                      std::to_string(wo_inputs % block != 0 ? wo_inputs : down_inputs),
                      ") is not a whole number of ", dtype_name(weight_dtype), " blocks of ",
                      std::to_string(block));
  return ok_status();
}

ModelConfig shard_config(const ModelConfig& c, int world) {
  ModelConfig s = c;
  s.n_heads = c.n_heads / world;
  s.n_kv_heads = c.n_kv_heads / world;
  s.d_ff = c.d_ff / world;
  return s;
}

}  // namespace infercept
