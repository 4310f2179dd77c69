// Attention sinks on the device for the CUDA backend: each layer's [q_heads] logits
// (pkv_set_attention_sinks), uploaded at the layer's first attention call and again whenever the
// host's differ from the copy last uploaded. pkv refuses new sinks once a sequence exists, so that
// is once per layer in practice. Host code over the CUDA runtime API (the emulator provides it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace pkv {

class SinkTable {
 public:
  SinkTable() = default;
  SinkTable(const SinkTable &) = delete;
  SinkTable &operator=(const SinkTable &) = delete;
  ~SinkTable() {
    for (Entry &e : layers_) cudaFree(e.dev);
  }

  // The device copy of `layer`'s n logits (host memory), queued on stream when they changed; an
  // error of cudaMalloc or of the copy is returned and *out left null.
  cudaError_t layer(uint32_t layer, const float *sinks, uint32_t n, cudaStream_t stream,
                    const float **out) {
    *out = nullptr;
    if (layer >= layers_.size()) layers_.resize(size_t(layer) + 1);
    Entry &e = layers_[layer];
    if (e.host.size() != n) {
      cudaFree(e.dev);
      e.dev = nullptr, e.host.clear();
      if (const cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&e.dev), n * sizeof(float)))
        return err;
    }
    if (e.host.size() != n || std::memcmp(e.host.data(), sinks, n * sizeof(float)) != 0) {
      // The copy reads e.host, which stays as it is until the logits change: pkv_set_attention_sinks
      // is refused while sequences (and so queued work reading them) exist.
      e.host.assign(sinks, sinks + n);
      if (const cudaError_t err = cudaMemcpyAsync(e.dev, e.host.data(), n * sizeof(float),
                                                  cudaMemcpyHostToDevice, stream)) {
        e.host.clear();  // not uploaded: the next call tries again
        return err;
      }
    }
    *out = e.dev;
    return cudaSuccess;
  }

 private:
  struct Entry {
    std::vector<float> host;  // what e.dev holds (or is being copied to hold)
    float *dev = nullptr;     // [n] device
  };
  std::vector<Entry> layers_;  // by the model's layer
};

}  // namespace pkv
