// A fake NVML: the four calls of libnvidia-ml.so.1 that discovery makes
// (topology/discover.cc readNvml), answering for a fixture tree's GPUs as the
// test tells it through the environment, read at nvmlInit_v2:
//   CRIHOOK_FAKE_NVML_GPUS  "<PCI bus id>=<bytes>;...": the GPUs NVML knows
//                           and their memory; "<PCI bus id>=!<rc>": one whose
//                           nvmlDeviceGetMemoryInfo returns rc. A bus id not
//                           listed is not found (NVML_ERROR_NOT_FOUND).
//   CRIHOOK_FAKE_NVML_INIT  what nvmlInit_v2 returns (0 when unset).
// Built with FAKE_NVML_WITHOUT_MEMORY_INFO it lacks nvmlDeviceGetMemoryInfo,
// as an NVML too old or broken would. Bus ids compare as NVML's do: by
// number, so "0000:1a:00.0" is "00000000:1A:00.0".

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;

struct BusId {
  unsigned domain, bus, device, function;
  bool operator==(const BusId&) const = default;
};

struct FakeGpu {
  BusId id;
  unsigned long long total;
  int memory_rc;
};

constexpr int kMaxGpus = 64;
FakeGpu gpus[kMaxGpus];
int gpu_count = 0;
int inits = 0;  // nvmlInit_v2 calls not yet shut down

bool parseBusId(const char* text, BusId& id) {
  int end = 0;
  const int fields =
      std::sscanf(text, "%x:%x:%x.%x%n", &id.domain, &id.bus, &id.device, &id.function, &end);
  return fields == 4 && (text[end] == '\0' || text[end] == '=');
}

void readGpus() {
  gpu_count = 0;
  const char* spec = std::getenv("CRIHOOK_FAKE_NVML_GPUS");
  for (const char* entry = spec; entry != nullptr && *entry != '\0' && gpu_count < kMaxGpus;) {
    FakeGpu g{};
    const char* value = std::strchr(entry, '=');
    if (value != nullptr && parseBusId(entry, g.id)) {
      if (value[1] == '!') {
        g.memory_rc = std::atoi(value + 2);
      } else {
        g.total = std::strtoull(value + 1, nullptr, 10);
      }
      gpus[gpu_count++] = g;
    }
    entry = std::strchr(entry, ';');
    if (entry != nullptr) ++entry;
  }
}

struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};

}  // namespace

EXPORT int nvmlInit_v2() {
  const char* rc = std::getenv("CRIHOOK_FAKE_NVML_INIT");
  if (rc != nullptr && std::atoi(rc) != 0) return std::atoi(rc);
  if (inits++ == 0) readGpus();
  return kSuccess;
}

EXPORT int nvmlShutdown() {
  if (inits == 0) return kUninitialized;
  --inits;
  return kSuccess;
}

EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (inits == 0) return kUninitialized;
  BusId id{};
  if (bus_id == nullptr || device == nullptr || !parseBusId(bus_id, id)) return kInvalidArgument;
  for (int i = 0; i < gpu_count; ++i) {
    if (gpus[i].id == id) {
      *device = &gpus[i];
      return kSuccess;
    }
  }
  return kNotFound;
}

#ifndef FAKE_NVML_WITHOUT_MEMORY_INFO
EXPORT int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  if (inits == 0) return kUninitialized;
  if (device == nullptr || memory == nullptr) return kInvalidArgument;
  const FakeGpu& g = *static_cast<const FakeGpu*>(device);
  if (g.memory_rc != 0) return g.memory_rc;
  *memory = {g.total, g.total, 0};
  return kSuccess;
}
#endif
