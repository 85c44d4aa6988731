#include "backend/cuda/weight_upload.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "core/half.h"
#include "core/quant.h"

namespace infercept::cuda {

Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows, int64_t cols, DType act,
                             const std::function<void*(size_t)>& alloc) {
  if (rows == 1 && dtype == DType::f32) {  // vectors (norms, biases) stay f32
    void* p = alloc((size_t)cols * 4);
    if (p == nullptr)
      return make_error("out of GPU memory for a ", std::to_string(cols), "-vector");
    CUDA_CHECK(cudaMemcpy(p, data, (size_t)cols * 4, cudaMemcpyHostToDevice));
    // A pageable cudaMemcpy may return before its DMA lands, and the compute stream does
    // not order against the legacy stream: wait (start-up only).
    CUDA_CHECK(cudaDeviceSynchronize());
    return Weight{p, DType::f32, 1, cols, (size_t)cols * 4};
  }
  const size_t row_out = (size_t)cols * 2;
  char* p = static_cast<char*>(alloc(row_out * (size_t)rows));
  if (p == nullptr)
    return make_error("out of GPU memory for a ", std::to_string(rows), "x", std::to_string(cols),
                      " weight");
  if (dtype == act) {
    CUDA_CHECK(cudaMemcpy(p, data, row_out * (size_t)rows, cudaMemcpyHostToDevice));
  } else {
    // Convert on the host in slabs of rows: dequantize to f32, round to the activation type.
    if (cols % dtype_block_elems(dtype) != 0)
      return make_error("cannot convert a ", std::string(dtype_name(dtype)), " row of ",
                        std::to_string(cols), " elements");
    const size_t in_row = dtype_row_bytes(dtype, cols);
    const int64_t slab = std::max<int64_t>(1, (8 << 20) / (int64_t)row_out);
    std::vector<float> f((size_t)cols);
    std::vector<uint16_t> h((size_t)(slab * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += slab) {
      const int64_t nr = std::min(slab, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        const void* src = static_cast<const char*>(data) + (size_t)(r0 + r) * in_row;
        if (dtype == DType::f32)
          std::memcpy(f.data(), src, (size_t)cols * 4);
        else
          dequantize_row(dtype, src, f.data(), cols);
        uint16_t* dst = h.data() + (size_t)(r * cols);
        for (int64_t c = 0; c < cols; ++c)
          dst[c] = act == DType::bf16 ? fp32_to_bf16(f[(size_t)c]) : fp32_to_fp16(f[(size_t)c]);
      }
      CUDA_CHECK(cudaMemcpy(p + (size_t)r0 * row_out, h.data(), (size_t)nr * row_out,
                            cudaMemcpyHostToDevice));
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());  // see above
  return Weight{p, act, rows, cols, row_out};
}

}  // namespace infercept::cuda
