#include "backend/backend.h"

#include <cstdio>
#include <cstring>

#include "status.h"

namespace pkv {

MemoryInfo host_memory() {
  MemoryInfo info;
  std::FILE *f = std::fopen("/proc/meminfo", "r");
  if (!f)
    fail(PKV_ERR_UNSUPPORTED,
         "cannot read /proc/meminfo; set memory_total_bytes or kv_cache_bytes");
  char key[64];
  unsigned long long kib = 0;
  while (std::fscanf(f, "%63s %llu kB ", key, &kib) == 2) {
    if (std::strcmp(key, "MemTotal:") == 0) info.total_bytes = kib * 1024ull;
    if (std::strcmp(key, "MemAvailable:") == 0) info.free_bytes = kib * 1024ull;
  }
  std::fclose(f);
  if (info.total_bytes == 0) fail(PKV_ERR_UNSUPPORTED, "/proc/meminfo has no MemTotal");
  return info;
}

int32_t resolve_device(int32_t device, int32_t device_id) {
  if (device == PKV_DEVICE_CPU) return PKV_DEVICE_CPU;
  std::string why;
  bool usable = cuda_usable(device_id, &why);
  if (device == PKV_DEVICE_AUTO) return usable ? PKV_DEVICE_CUDA : PKV_DEVICE_CPU;
  if (!usable)
    fail(
        PKV_ERR_NO_DEVICE,
        "device is PKV_DEVICE_CUDA (device_id %d) and %s. Set device to PKV_DEVICE_CPU to keep the KV in host "
        "memory, or PKV_DEVICE_AUTO to take a GPU when there is one",
        device_id, why.c_str());
  return PKV_DEVICE_CUDA;
}

#ifndef PKV_HAVE_CUDA
bool cuda_usable(int32_t, std::string *why) {
  *why = "this libpkv was built without CUDA (meson -Dgpu=enabled builds it)";
  return false;
}
MemoryInfo cuda_memory(int32_t) { fail(PKV_ERR_NO_DEVICE, "this libpkv was built without CUDA"); }
std::unique_ptr<Backend> make_cuda_backend(int32_t, const PoolShape &) {
  fail(PKV_ERR_NO_DEVICE, "this libpkv was built without CUDA");
}
#endif

}  // namespace pkv
