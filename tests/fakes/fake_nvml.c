/* A stand-in for libnvidia-ml.so.1 in tests: the GPUs it reports come from the environment.
 *   FAKE_NVML_GPUS="NVIDIA H200,NVIDIA H200"   two GPUs with these names
 *   FAKE_NVML_FAIL_INIT=1                      nvmlInit_v2 fails (NVML_ERROR_DRIVER_NOT_LOADED) */
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define MAX_GPUS 64
#define MAX_NAME 96

typedef struct nvmlDevice_st {
  char name[MAX_NAME];
} nvmlDevice_st;

static nvmlDevice_st devices[MAX_GPUS];
static unsigned int device_count;
static int initialized;

int nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_FAIL_INIT");
  if (fail && strcmp(fail, "1") == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
  const char* gpus = getenv("FAKE_NVML_GPUS");
  device_count = 0;
  while (gpus && *gpus && device_count < MAX_GPUS) {
    const char* comma = strchr(gpus, ',');
    size_t len = comma ? (size_t)(comma - gpus) : strlen(gpus);
    if (len >= MAX_NAME) len = MAX_NAME - 1;
    memcpy(devices[device_count].name, gpus, len);
    devices[device_count].name[len] = '\0';
    ++device_count;
    gpus = comma ? comma + 1 : "";
  }
  initialized = 1;
  return NVML_SUCCESS;
}

int nvmlShutdown(void) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  initialized = 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = device_count;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_st** device) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned int length) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!device || !name) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(device->name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(name, device->name);
  return NVML_SUCCESS;
}
