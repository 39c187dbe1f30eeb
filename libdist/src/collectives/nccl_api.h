#pragma once

// NCCL and the CUDA runtime, loaded at run time (dlopen of libnccl.so.2 and libcudart.so) behind
// a table of function pointers, so that libdist builds, links and runs where neither is
// installed, and tests run the NCCL backend's logic against a fake table on a CPU.
//
// The types mirror NCCL's and CUDA's C ABI (values from nccl.h 2.x, stable since 2.0).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "dist/collectives.h"

namespace dist::internal {

using NcclResult = int;  // ncclResult_t
inline constexpr NcclResult kNcclSuccess = 0;
inline constexpr NcclResult kNcclUnhandledCudaError = 1;
inline constexpr NcclResult kNcclSystemError = 2;
inline constexpr NcclResult kNcclInternalError = 3;
inline constexpr NcclResult kNcclInvalidArgument = 4;
inline constexpr NcclResult kNcclInvalidUsage = 5;
inline constexpr NcclResult kNcclRemoteError = 6;
inline constexpr NcclResult kNcclInProgress = 7;

using NcclComm = struct NcclCommOpaque*;  // ncclComm_t
struct NcclUniqueId {
  char internal[128];
};
using CudaError = int;  // cudaError_t
inline constexpr CudaError kCudaSuccess = 0;
inline constexpr CudaError kCudaErrorNotReady = 600;
using CudaStream = void*;  // cudaStream_t
using CudaEvent = void*;   // cudaEvent_t
// cudaStreamCaptureStatus: 0 none, 1 active, 2 invalidated.
inline constexpr int kCudaStreamCaptureStatusNone = 0;
inline constexpr int kCudaStreamCaptureModeRelaxed = 2;

// cudaPointerAttributes (CUDA >= 10): memory type 2 is device, 3 managed. CUDA 13 added
// `long reserved[8]`, which cudaPointerGetAttributes writes too: without it the call overwrote
// the caller's stack (seen on an H100: a jump into the stack). nccl_api.cc checks the size
// against the CUDA header when it is there.
struct CudaPointerAttributes {
  int type;
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};

struct NcclApi {
  // NCCL
  NcclResult (*GetVersion)(int* version);
  NcclResult (*GetUniqueId)(NcclUniqueId* id);
  // Nonblocking init (config.blocking = 0): returns kNcclInProgress; poll CommGetAsyncError.
  NcclResult (*CommInitRankNonBlocking)(NcclComm* comm, int nranks, NcclUniqueId id, int rank);
  NcclResult (*CommGetAsyncError)(NcclComm comm, NcclResult* error);
  NcclResult (*CommFinalize)(NcclComm comm);
  NcclResult (*CommDestroy)(NcclComm comm);
  NcclResult (*CommAbort)(NcclComm comm);
  const char* (*GetErrorString)(NcclResult result);
  const char* (*GetLastError)(NcclComm comm);
  NcclResult (*AllReduce)(const void* send, void* recv, size_t count, int type, int op,
                          NcclComm comm, CudaStream stream);
  NcclResult (*AllGather)(const void* send, void* recv, size_t send_count, int type, NcclComm comm,
                          CudaStream stream);
  NcclResult (*ReduceScatter)(const void* send, void* recv, size_t recv_count, int type, int op,
                              NcclComm comm, CudaStream stream);
  NcclResult (*Broadcast)(const void* send, void* recv, size_t count, int type, int root,
                          NcclComm comm, CudaStream stream);
  NcclResult (*Send)(const void* send, size_t count, int type, int peer, NcclComm comm,
                     CudaStream stream);
  NcclResult (*Recv)(void* recv, size_t count, int type, int peer, NcclComm comm,
                     CudaStream stream);
  NcclResult (*GroupStart)();
  NcclResult (*GroupEnd)();
  // CUDA runtime
  CudaError (*GetDeviceCount)(int* count);
  CudaError (*GetDevice)(int* device);
  CudaError (*SetDevice)(int device);
  CudaError (*StreamCreate)(CudaStream* stream);  // cudaStreamCreateWithFlags(non-blocking)
  CudaError (*StreamDestroy)(CudaStream stream);
  CudaError (*StreamQuery)(CudaStream stream);
  CudaError (*StreamIsCapturing)(CudaStream stream, int* capture_status);
  // cudaStreamWaitEvent(stream, event, 0).
  CudaError (*StreamWaitEvent)(CudaStream stream, CudaEvent event);
  CudaError (*EventCreate)(CudaEvent* event);  // cudaEventCreateWithFlags(disable timing)
  CudaError (*EventDestroy)(CudaEvent event);
  CudaError (*EventRecord)(CudaEvent event, CudaStream stream);
  CudaError (*EventQuery)(CudaEvent event);
  // cudaThreadExchangeStreamCaptureMode: the calling thread's capture mode (0 global, 1 thread
  // local, 2 relaxed) is set to *mode, and *mode receives the previous one.
  CudaError (*ThreadExchangeStreamCaptureMode)(int* mode);
  CudaError (*PointerGetAttributes)(CudaPointerAttributes* attributes, const void* pointer);
  CudaError (*Malloc)(void** pointer, size_t bytes);
  CudaError (*Free)(void* pointer);
  CudaError (*Memcpy)(void* dst, const void* src, size_t bytes, int kind);  // kind 4: default
  const char* (*CudaGetErrorString)(CudaError error);

  int version = 0;               // NCCL_VERSION_CODE of the loaded library, e.g. 22809.
  std::string Describe() const;  // "NCCL 2.28.9"
};

// The real NCCL of this machine, loaded once. Unavailable with the reason when libnccl.so.2 or
// libcudart cannot be loaded, lacks a symbol, or no GPU is visible (the message says which, and
// what to install or set). LoadNcclFrom() takes the libraries' names (tests).
absl::StatusOr<const NcclApi*> LoadNccl();
absl::StatusOr<NcclApi> LoadNcclFrom(const std::string& nccl_library,
                                     const std::string& cudart_library);

// The NCCL codes of our types and ops.
int NcclDataType(DataType type);
int NcclReduceOp(ReduceOp op);

}  // namespace dist::internal
