// The few NVML entry points herd uses, declared as in nvml.h (which Debian does not ship), for
// dlopen/dlsym of libnvidia-ml.so.1: the GPU probe (system_gpu_probe.cpp) and the health watch
// (health_watch.cpp).
#pragma once

namespace herd::agent::nvml {

using nvmlReturn_t = int;  // NVML_SUCCESS == 0
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
// nvmlEventData_t (nvml.h, as nvmlEventSetWait_v2 fills it).
struct EventData {
  nvmlDevice_t device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kErrorNotSupported = 3;
constexpr nvmlReturn_t kErrorTimeout = 10;
constexpr nvmlReturn_t kErrorGpuIsLost = 15;
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
constexpr int kMemoryErrorTypeUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                 // NVML_VOLATILE_ECC: since the driver loaded
constexpr unsigned int kNameBufferSize = 96;    // NVML_DEVICE_NAME_V2_BUFFER_SIZE

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);
using RegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, EventData*, unsigned int);
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);
using GetTotalEccErrorsFn = nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*);

}  // namespace herd::agent::nvml
