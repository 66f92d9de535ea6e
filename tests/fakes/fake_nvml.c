/* A stand-in for libnvidia-ml.so.1 in tests: the GPUs it reports come from the environment.
 *   FAKE_NVML_GPUS="NVIDIA H200,NVIDIA H200"   two GPUs with these names
 *   FAKE_NVML_FAIL_INIT=1                      nvmlInit_v2 fails (NVML_ERROR_DRIVER_NOT_LOADED)
 *   FAKE_NVML_FAULTS=/path/file                faults, read at every call, one per line:
 *       xid GPU N      an XID event N on GPU (delivered once, in file order)
 *       ecc GPU COUNT  COUNT uncorrectable volatile ECC errors on GPU
 *       lost GPU       GPU has fallen off the bus (its handle: NVML_ERROR_GPU_IS_LOST) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define XID_CRITICAL_ERROR 0x8ULL
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
  ++initialized; /* counted, as NVML's: each init needs its shutdown */
  return NVML_SUCCESS;
}

int nvmlShutdown(void) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  --initialized;
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = device_count;
  return NVML_SUCCESS;
}

/* The n-th fault line of `kind` in FAKE_NVML_FAULTS (0-based), its two numbers; 0 if none. */
static int fault(const char* kind, int n, long long* a, long long* b) {
  const char* path = getenv("FAKE_NVML_FAULTS");
  FILE* f = path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  char line[128], word[16];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    long long x = -1, y = -1;
    if (sscanf(line, "%15s %lld %lld", word, &x, &y) < 2 || strcmp(word, kind) != 0) continue;
    if (n-- == 0) {
      *a = x;
      *b = y;
      found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

static int lost(unsigned int index) {
  long long gpu, unused;
  for (int n = 0; fault("lost", n, &gpu, &unused); ++n)
    if (gpu == (long long)index) return 1;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_st** device) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
  if (lost(index)) return NVML_ERROR_GPU_IS_LOST;
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

int nvmlDeviceGetTotalEccErrors(nvmlDevice_st* device, int error_type, int counter_type,
                                unsigned long long* count) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!device || !count) return NVML_ERROR_INVALID_ARGUMENT;
  (void)error_type;
  (void)counter_type;
  long long gpu, n;
  *count = 0;
  for (int i = 0; fault("ecc", i, &gpu, &n); ++i)
    if (gpu >= 0 && gpu < (long long)device_count && &devices[gpu] == device && n > 0)
      *count += (unsigned long long)n;
  return NVML_SUCCESS;
}

typedef struct nvmlEventSet_st {
  int delivered; /* XID lines handed out so far */
} nvmlEventSet_st;

typedef struct {
  nvmlDevice_st* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

static nvmlEventSet_st event_set;

int nvmlEventSetCreate(nvmlEventSet_st** set) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  event_set.delivered = 0;
  *set = &event_set;
  return NVML_SUCCESS;
}

int nvmlDeviceRegisterEvents(nvmlDevice_st* device, unsigned long long types,
                             nvmlEventSet_st* set) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!device || !set || !(types & XID_CRITICAL_ERROR)) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

int nvmlEventSetWait_v2(nvmlEventSet_st* set, nvmlEventData_t* data, unsigned int timeout_ms) {
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
  (void)timeout_ms; /* never waits: the file has the event now or not */
  long long gpu, xid;
  if (!fault("xid", set->delivered, &gpu, &xid) || gpu < 0 || gpu >= (long long)device_count)
    return NVML_ERROR_TIMEOUT;
  ++set->delivered;
  memset(data, 0, sizeof *data);
  data->device = &devices[gpu];
  data->eventType = XID_CRITICAL_ERROR;
  data->eventData = (unsigned long long)xid;
  return NVML_SUCCESS;
}

int nvmlEventSetFree(nvmlEventSet_st* set) {
  (void)set;
  return NVML_SUCCESS;
}
