#include "libdist/src/collectives/nccl_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define COHORT_HAVE_NCCL_H 1
#endif
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
// cudaPointerGetAttributes writes the whole of CUDA's struct into ours.
static_assert(sizeof(dist::internal::CudaPointerAttributes) >= sizeof(cudaPointerAttributes),
              "CudaPointerAttributes is smaller than this CUDA's cudaPointerAttributes");
#endif

namespace dist::internal {
namespace {

using InitRankConfigFn = NcclResult (*)(NcclComm*, int, NcclUniqueId, int, void*);
using StreamCreateWithFlagsFn = CudaError (*)(CudaStream*, unsigned int);
InitRankConfigFn g_init_rank_config = nullptr;
StreamCreateWithFlagsFn g_stream_create_with_flags = nullptr;
int g_loaded_version = 0;

// ncclConfig_t with blocking = 0 and everything else left to NCCL. With nccl.h at build time,
// its own initializer; without, the prefix every NCCL >= 2.14 reads (size, magic, version,
// blocking, ...), whose `size` tells NCCL how much of the struct the caller knows.
struct MinimalConfig {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char* net_name;
  int split_share;
};

NcclResult InitRankNonBlocking(NcclComm* comm, int nranks, NcclUniqueId id, int rank) {
#ifdef COHORT_HAVE_NCCL_H
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return g_init_rank_config(comm, nranks, id, rank, &config);
#else
  MinimalConfig config{sizeof(MinimalConfig),
                       0xcafebeef,
                       static_cast<unsigned>(g_loaded_version),
                       0,
                       INT_MIN,
                       INT_MIN,
                       INT_MIN,
                       nullptr,
                       INT_MIN};
  return g_init_rank_config(comm, nranks, id, rank, &config);
#endif
}

CudaError StreamCreateNonBlocking(CudaStream* stream) {
  constexpr unsigned int kCudaStreamNonBlocking = 1;
  return g_stream_create_with_flags(stream, kCudaStreamNonBlocking);
}

CudaError (*g_event_create_with_flags)(CudaEvent*, unsigned int) = nullptr;
CudaError EventCreateNoTiming(CudaEvent* event) {
  constexpr unsigned int kCudaEventDisableTiming = 2;
  return g_event_create_with_flags(event, kCudaEventDisableTiming);
}
CudaError (*g_stream_wait_event)(CudaStream, CudaEvent, unsigned int) = nullptr;
CudaError StreamWaitEventNoFlags(CudaStream stream, CudaEvent event) {
  return g_stream_wait_event(stream, event, 0);
}

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*out) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
  }
  return *out != nullptr;
}

}  // namespace

std::string NcclApi::Describe() const {
  return absl::StrCat("NCCL ", version / 10000, ".", (version % 10000) / 100, ".", version % 100);
}

absl::StatusOr<NcclApi> LoadNcclFrom(const std::string& nccl_library,
                                     const std::string& cudart_library) {
  void* nccl = dlopen(nccl_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!nccl) {
    return absl::UnavailableError(absl::StrCat(
        "the NCCL backend is unavailable: cannot load ", nccl_library, " (", dlerror(),
        "). Install NCCL (e.g. the nvidia-nccl-cu13 wheel or the CUDA image's libnccl2) and add "
        "its directory to LD_LIBRARY_PATH, or use the host backend (COHORT_COLLECTIVES=host)"));
  }
  void* cudart = dlopen(cudart_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!cudart) {
    return absl::UnavailableError(absl::StrCat(
        "the NCCL backend is unavailable: cannot load the CUDA runtime ", cudart_library, " (",
        dlerror(), "); install the CUDA runtime or use COHORT_COLLECTIVES=host"));
  }
  NcclApi api{};
  std::string missing;
  Bind(nccl, "ncclGetVersion", &api.GetVersion, &missing);
  Bind(nccl, "ncclGetUniqueId", &api.GetUniqueId, &missing);
  Bind(nccl, "ncclCommInitRankConfig", &g_init_rank_config, &missing);
  Bind(nccl, "ncclCommGetAsyncError", &api.CommGetAsyncError, &missing);
  Bind(nccl, "ncclCommFinalize", &api.CommFinalize, &missing);
  Bind(nccl, "ncclCommDestroy", &api.CommDestroy, &missing);
  Bind(nccl, "ncclCommAbort", &api.CommAbort, &missing);
  Bind(nccl, "ncclGetErrorString", &api.GetErrorString, &missing);
  Bind(nccl, "ncclGetLastError", &api.GetLastError, &missing);
  Bind(nccl, "ncclAllReduce", &api.AllReduce, &missing);
  Bind(nccl, "ncclAllGather", &api.AllGather, &missing);
  Bind(nccl, "ncclReduceScatter", &api.ReduceScatter, &missing);
  Bind(nccl, "ncclBroadcast", &api.Broadcast, &missing);
  Bind(nccl, "ncclSend", &api.Send, &missing);
  Bind(nccl, "ncclRecv", &api.Recv, &missing);
  Bind(nccl, "ncclGroupStart", &api.GroupStart, &missing);
  Bind(nccl, "ncclGroupEnd", &api.GroupEnd, &missing);
  Bind(cudart, "cudaGetDeviceCount", &api.GetDeviceCount, &missing);
  Bind(cudart, "cudaGetDevice", &api.GetDevice, &missing);
  Bind(cudart, "cudaSetDevice", &api.SetDevice, &missing);
  Bind(cudart, "cudaStreamCreateWithFlags", &g_stream_create_with_flags, &missing);
  Bind(cudart, "cudaStreamDestroy", &api.StreamDestroy, &missing);
  Bind(cudart, "cudaStreamQuery", &api.StreamQuery, &missing);
  Bind(cudart, "cudaStreamIsCapturing", &api.StreamIsCapturing, &missing);
  Bind(cudart, "cudaStreamWaitEvent", &g_stream_wait_event, &missing);
  Bind(cudart, "cudaEventCreateWithFlags", &g_event_create_with_flags, &missing);
  Bind(cudart, "cudaEventDestroy", &api.EventDestroy, &missing);
  Bind(cudart, "cudaEventRecord", &api.EventRecord, &missing);
  Bind(cudart, "cudaEventQuery", &api.EventQuery, &missing);
  Bind(cudart, "cudaThreadExchangeStreamCaptureMode", &api.ThreadExchangeStreamCaptureMode,
       &missing);
  Bind(cudart, "cudaPointerGetAttributes", &api.PointerGetAttributes, &missing);
  Bind(cudart, "cudaGetErrorString", &api.CudaGetErrorString, &missing);
  Bind(cudart, "cudaMalloc", &api.Malloc, &missing);
  Bind(cudart, "cudaFree", &api.Free, &missing);
  Bind(cudart, "cudaMemcpy", &api.Memcpy, &missing);
  if (!missing.empty()) {
    return absl::UnavailableError(
        absl::StrCat("the NCCL backend is unavailable: ", nccl_library, " / ", cudart_library,
                     " lack ", missing, " (NCCL >= 2.14 is needed); use COHORT_COLLECTIVES=host"));
  }
  api.GetVersion(&api.version);
  g_loaded_version = api.version;
  api.CommInitRankNonBlocking = &InitRankNonBlocking;
  api.StreamCreate = &StreamCreateNonBlocking;
  api.EventCreate = &EventCreateNoTiming;
  api.StreamWaitEvent = &StreamWaitEventNoFlags;
  int devices = 0;
  const CudaError err = api.GetDeviceCount(&devices);
  if (err != kCudaSuccess || devices == 0) {
    return absl::UnavailableError(absl::StrCat(
        "the NCCL backend is unavailable: ", api.Describe(), " loaded, but no GPU is visible (",
        err != kCudaSuccess ? api.CudaGetErrorString(err) : "cudaGetDeviceCount found 0 devices",
        "); the host backend runs instead under COHORT_COLLECTIVES=auto"));
  }
  return api;
}

absl::StatusOr<const NcclApi*> LoadNccl() {
  static absl::StatusOr<NcclApi>* loaded = [] {
    // Without a GPU device node there is nothing to load 200 MB of NCCL for.
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/nvidia0", F_OK) != 0) {
      return new absl::StatusOr<NcclApi>(absl::UnavailableError(
          "the NCCL backend is unavailable: no GPU on this host (/dev/nvidia0 and /dev/nvidiactl "
          "are absent); the host backend runs instead under COHORT_COLLECTIVES=auto"));
    }
    absl::StatusOr<NcclApi> api = LoadNcclFrom("libnccl.so.2", "libcudart.so.13");
    if (!api.ok() && absl::StrContains(api.status().message(), "CUDA runtime")) {
      api = LoadNcclFrom("libnccl.so.2", "libcudart.so");
    }
    return new absl::StatusOr<NcclApi>(std::move(api));
  }();
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

int NcclDataType(DataType type) {
  switch (type) {
    case DataType::kInt32:
      return 2;
    case DataType::kInt64:
      return 4;
    case DataType::kFloat16:
      return 6;
    case DataType::kFloat32:
      return 7;
    case DataType::kFloat64:
      return 8;
    case DataType::kBFloat16:
      return 9;
  }
  return 7;
}

int NcclReduceOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 0;
    case ReduceOp::kProd:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kMin:
      return 3;
    case ReduceOp::kAvg:
      return 4;
  }
  return 0;
}

}  // namespace dist::internal
