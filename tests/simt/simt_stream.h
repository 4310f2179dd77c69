// simt_stream.h: what tests may ask the emulator's streams, events and graphs (DESIGN.md §6).
//
// The emulator implements the CUDA runtime's streams (cudaStreamCreate[WithFlags], Destroy,
// Synchronize, Query, WaitEvent; the legacy null stream 0 with its implicit syncs), events
// (cudaEventCreate[WithFlags], Record, Query, Synchronize, Destroy) and stream capture
// (cudaStreamBeginCapture, EndCapture, IsCapturing, GetCaptureInfo, cudaGraphInstantiate,
// cudaGraphLaunch, cudaGraphExecDestroy, cudaGraphDestroy) in simt_stream.cpp / simt_graph.cpp.
//
// Two modes run stream work (kernel launches, cudaMemcpyAsync, cudaMemcpy2DAsync,
// cudaMemsetAsync, graph launches):
//   - immediate (the default): the work runs inside the call that submits it.
//   - deferred (env SIMT_STREAMS=deferred, or set_stream_mode): the work is queued per stream and
//     runs only when the host waits for it: cudaStreamSynchronize, cudaDeviceSynchronize,
//     cudaEventSynchronize (up to the record), and the implicit syncs of a synchronous
//     cudaMemcpy / cudaMemset (the null stream and the streams that sync with it) and cudaFree
//     (everything). The latest moment a GPU could run it: a host that reads results without
//     waiting reads stale memory. An async copy from pageable host memory (not cudaHostAlloc'd)
//     takes a snapshot of its source when queued, as CUDA's staging does; a pinned source is read
//     when the copy runs, so rewriting a pinned staging buffer before its upload ran shows.
//     cudaEventQuery / cudaStreamQuery report cudaErrorNotReady until a wait ran the work: a host
//     that polls them without ever waiting spins forever here (a GPU would finish meanwhile).
//
// Capture records a capturing stream's work instead of running it: a kernel node keeps its
// arguments as they were at capture, a copy or memset node its pointers (the source is read at
// each replay). A call CUDA forbids during capture (a sync of the stream, the device or an event,
// cudaMalloc / cudaFree / cudaHostAlloc / cudaFreeHost in the global and thread-local modes, a
// synchronous cudaMemcpy / cudaMemset, an async copy with pageable memory, a query of the
// capturing stream, work on the legacy null stream while a blocking stream captures) returns
// cudaErrorStreamCaptureUnsupported (cudaErrorStreamCaptureImplicit for the null stream),
// invalidates the capture (EndCapture then returns cudaErrorStreamCaptureInvalidated) and is
// counted in StreamCounters::forbidden with its name.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace simt {

enum class StreamMode { immediate, deferred };

// Runs all pending work first (not counted as a host wait), then switches.
void set_stream_mode(StreamMode mode);
StreamMode stream_mode();

struct StreamCounters {
  uint64_t host_waits;               // the sum of the four below
  uint64_t stream_syncs;             // cudaStreamSynchronize
  uint64_t device_syncs;             // cudaDeviceSynchronize
  uint64_t event_syncs;              // cudaEventSynchronize
  uint64_t implicit_syncs;           // synchronous cudaMemcpy / cudaMemset, cudaFree
  uint64_t mallocs, frees;           // cudaMalloc, cudaFree (of a non-null pointer)
  uint64_t host_allocs, host_frees;  // cudaHostAlloc, cudaFreeHost
  uint64_t launches;           // kernel launches submitted (a graph's replayed kernels are not)
  uint64_t graph_launches;     // cudaGraphLaunch
  uint64_t async_copies;       // cudaMemcpyAsync, cudaMemcpy2DAsync, cudaMemsetAsync
  uint64_t pageable_copies;    // async copies with a pageable end: may block the host on a GPU
  uint64_t forbidden;          // calls refused because a stream captures
  const char *last_forbidden;  // the last refused call's name ("" when none)
};

StreamCounters stream_counters();
void reset_stream_counters();

// Queued work items not yet run, over all streams (event records and waits not counted).
size_t pending_work();

// Nodes of a captured graph (kernels, copies, memsets, nested graphs' nodes); 0 for a bad handle.
size_t graph_num_nodes(cudaGraph_t graph);

}  // namespace simt
