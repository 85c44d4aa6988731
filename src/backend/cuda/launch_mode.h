// The process-wide launch mode the kernels' launch code consults: whether kernels that
// support it are launched as programmatic dependents (sm_90 and later). Set from
// CudaBackendOptions::programmatic when a backend is made (cuda_backend.h).
#pragma once

namespace infercept::cuda {

bool programmatic_launch();
void set_programmatic_launch(bool on);

}  // namespace infercept::cuda
