// Per-layer tables the CUDA kernels read from the device: attention sinks (each layer's
// [q_heads] logits, pkv_set_attention_sinks) and fp8 KV scales (each layer's [tensors][kv_heads],
// K then V; the MLA latent: K's alone). Both are allocated when the engine is created, device
// memory and a pinned host mirror, so a layer's first attention call only queues an upload
// (asynchronous, and legal inside a CUDA graph capture: the source is pinned) and allocates
// nothing. The mirror is rewritten only when the host's values differ from what was uploaded,
// which pkv allows only while no sequence (so no queued work reading them) exists. Host code over
// the CUDA runtime API (the emulator provides it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace pkv {

class LayerTable {
 public:
  LayerTable() = default;
  LayerTable(const LayerTable &) = delete;
  LayerTable &operator=(const LayerTable &) = delete;
  ~LayerTable() { release(); }

  // Room for `layers` rows of `width` floats; once, at create (an error leaves it empty).
  cudaError_t reserve(uint32_t layers, uint32_t width) {
    const size_t bytes = size_t(layers) * width * sizeof(float);
    cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&dev_), bytes ? bytes : 1);
    if (err == cudaSuccess)
      err =
          cudaHostAlloc(reinterpret_cast<void **>(&host_), bytes ? bytes : 1, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      release();
      return err;
    }
    layers_ = layers, width_ = width;
    uploaded_.assign(layers, 0);
    return cudaSuccess;
  }
  bool reserved() const { return dev_ != nullptr; }

  // The device row of `layer`, holding parts[0..n) (each `width / n` floats, host memory) once
  // the queued upload has run: queued on stream when they differ from what was uploaded.
  cudaError_t row(uint32_t layer, const float *const *parts, uint32_t n, cudaStream_t stream,
                  const float **out) {
    *out = nullptr;
    if (!dev_ || layer >= layers_ || n == 0 || width_ % n) return cudaErrorInvalidValue;
    const size_t part = width_ / n;
    float *h = host_ + size_t(layer) * width_;
    bool same = uploaded_[layer] != 0;
    for (uint32_t i = 0; i < n && same; ++i)
      same = std::memcmp(h + i * part, parts[i], part * sizeof(float)) == 0;
    if (!same) {
      for (uint32_t i = 0; i < n; ++i) std::memcpy(h + i * part, parts[i], part * sizeof(float));
      if (const cudaError_t err =
              cudaMemcpyAsync(dev_ + size_t(layer) * width_, h, width_ * sizeof(float),
                              cudaMemcpyHostToDevice, stream)) {
        uploaded_[layer] = 0;  // not uploaded: the next call tries again
        return err;
      }
      uploaded_[layer] = 1;
    }
    *out = dev_ + size_t(layer) * width_;
    return cudaSuccess;
  }

 private:
  void release() {
    cudaFree(dev_);
    if (host_) cudaFreeHost(host_);
    dev_ = nullptr, host_ = nullptr;
    layers_ = width_ = 0;
  }
  float *dev_ = nullptr;   // [layers][width] device
  float *host_ = nullptr;  // the same, pinned: what was uploaded last
  uint32_t layers_ = 0, width_ = 0;
  std::vector<uint8_t> uploaded_;
};

}  // namespace pkv
