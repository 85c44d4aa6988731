// Built instead of backend/cuda/ when CUDA is off or nvcc is missing: asking for the CUDA
// backend is then an error the user sees, not a link failure.
#include "backend/cuda/cuda_backend.h"

namespace infercept {

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions&) {
  return make_error(
      "this build of infercept has no CUDA backend (nvcc was not found when it "
      "was configured, or INFERCEPT_CUDA=OFF)");
}

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const>) {
  return make_error("this build of infercept has no CUDA backend, so no NCCL communicator");
}

bool cuda_backend_built() {
  return false;
}

}  // namespace infercept
