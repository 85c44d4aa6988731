// NCCL's all-reduce for a tensor-parallel group of CUDA backends in one process (declared in
// cuda_backend.h). The library is opened at run time: a binary that never asks for a group
// needs no NCCL, and the device machines ship it with PyTorch rather than on the system path.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <set>

#include "backend/cuda/cuda_backend_impl.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define INFERCEPT_HAVE_NCCL_HEADER 1
#endif

namespace infercept {

#ifdef INFERCEPT_HAVE_NCCL_HEADER
namespace {

// The entry points used, resolved once from libnccl.so.2.
struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

Result<const NcclApi*> nccl_api() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      error = std::string("cannot load NCCL (libnccl.so.2): ") + (why ? why : "not found") +
              "; install it (the CUDA toolkit's NCCL or the nvidia-nccl-cu13 wheel) and put "
              "its lib folder on LD_LIBRARY_PATH";
      return;
    }
    api.comm_init_all =
        reinterpret_cast<decltype(api.comm_init_all)>(dlsym(lib, "ncclCommInitAll"));
    api.all_reduce = reinterpret_cast<decltype(api.all_reduce)>(dlsym(lib, "ncclAllReduce"));
    api.comm_destroy = reinterpret_cast<decltype(api.comm_destroy)>(dlsym(lib, "ncclCommDestroy"));
    api.error_string =
        reinterpret_cast<decltype(api.error_string)>(dlsym(lib, "ncclGetErrorString"));
    if (!api.comm_init_all || !api.all_reduce || !api.comm_destroy || !api.error_string)
      error = "libnccl.so.2 lacks an entry point infercept uses";
  });
  if (!error.empty()) return make_error(error);
  return &api;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::f32:
      return ncclFloat32;
    default:
      break;
  }
  CHECK_MSG(false, ("an all-reduce of a tensor in " + std::string(dtype_name(t))).c_str());
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclApi& api, ncclComm_t comm, int rank, int world)
      : api_(api), comm_(comm), rank_(rank), world_(world) {}
  ~NcclCommunicator() override { api_.comm_destroy(comm_); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(Backend& backend, Tensor t) override {
    CHECK_MSG(t.stride == t.cols || t.rows <= 1, "the all-reduce needs a contiguous tensor");
    auto& cuda = static_cast<cuda_impl::CudaBackend&>(backend);
    const ncclResult_t r =
        api_.all_reduce(t.data, t.data, (size_t)(t.rows * t.cols), nccl_type(t.dtype), ncclSum,
                        comm_, cuda.compute_stream());
    CHECK_MSG(r == ncclSuccess, (std::string("ncclAllReduce: ") + api_.error_string(r)).c_str());
  }

 private:
  const NcclApi& api_;
  ncclComm_t comm_;
  const int rank_, world_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const> backends) {
  std::vector<int> devices;
  for (Backend* b : backends) {
    auto* cuda = dynamic_cast<cuda_impl::CudaBackend*>(b);
    if (cuda == nullptr) return make_error("an NCCL group needs CUDA backends");
    devices.push_back(cuda->device());
  }
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return make_error("two tensor-parallel ranks on one GPU");
  // NVLink multicast can put a host's shared GPUs out of service: off in every process.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  TRY_ASSIGN(const NcclApi* api, nccl_api());
  std::vector<ncclComm_t> comms(devices.size());
  const ncclResult_t r = api->comm_init_all(comms.data(), (int)devices.size(), devices.data());
  if (r != ncclSuccess) return make_error("ncclCommInitAll: ", api->error_string(r));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < comms.size(); ++i)
    out.push_back(std::make_unique<NcclCommunicator>(*api, comms[i], (int)i, (int)comms.size()));
  return std::move(out);  // (nvcc does not move a local into a Result by itself)
}

#else  // no nccl.h where this was built

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const>) {
  return make_error("this build of infercept found no NCCL header (nccl.h), so no NCCL group");
}

#endif

}  // namespace infercept
