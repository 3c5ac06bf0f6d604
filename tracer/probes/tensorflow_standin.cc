// TensorFlow's stand-in device: a PluggableDevice whose memory is host memory and whose
// kernels are one generic kernel that records the op it was given and re-runs it on
// TensorFlow's own CPU kernels through the eager C API (TFE_Execute on a private
// context, each op pinned to the CPU). Built by tracer/probes/tensorflow_standin.py
// against the tensorflow wheel's own headers and libraries, loaded with
// tf.experimental.load_pluggable_device_library; dltrace reads what reached it through
// dltrace_standin_reached().
//
// The kernels registered are the ops named, one per line, in the file
// DLTRACE_TF_STANDIN_OPS names (dltrace's: every op TensorFlow has, but those
// TensorFlow runs on any device itself). A backend skeleton (dltrace scaffold
// tensorflow) compiles this file as its device with DLTRACE_SKELETON defined and its
// own device type: its kernels.cc registers its list, each kernel delegating to
// dltrace_compute until the team replaces it.
//
// An op whose input is a variable's handle (ResourceGather, ResourceApplyAdam) is re-run
// on a copy of the variable in the private context (VarHandleOp, AssignVariableOp), its
// new value read back and stored in the device's variable: the variable itself is
// reached through tensorflow_standin_vars.cc (dltrace_variables_open and the rest).

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/eager/c_api.h"
#include "tensorflow/c/eager/c_api_experimental.h"
#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"

// The device's streams, events and timers: nothing to hold (every copy is done when it returns).
struct SP_Stream_st {};
struct SP_Event_st {};
struct SP_Timer_st {};

namespace {

#ifndef DLTRACE_DEVICE_TYPE
#define DLTRACE_DEVICE_TYPE "STANDIN"
#endif
constexpr char kPlatformName[] = "DLTRACE_" DLTRACE_DEVICE_TYPE;
constexpr char kDeviceType[] = DLTRACE_DEVICE_TYPE;
constexpr char kCpu[] = "/job:localhost/replica:0/task:0/device:CPU:0";

// ---------------------------------------------------------------- what reached the device

std::mutex reached_mutex;
std::vector<std::string> reached;  // "Op" or "Op<TAB>T<TAB>its TF_DataType", in call order

void record(const std::string& op) {
  std::lock_guard<std::mutex> lock(reached_mutex);
  reached.push_back(op);
}

// ---------------------------------------------------------------- the device: host memory

void allocate(const SP_Device*, uint64_t size, int64_t, SP_DeviceMemoryBase* mem) {
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = size ? std::aligned_alloc(64, (size + 63) / 64 * 64) : nullptr;
  mem->size = size;
}
void deallocate(const SP_Device*, SP_DeviceMemoryBase* mem) {
  std::free(mem->opaque);
  mem->opaque = nullptr;
  mem->size = 0;
}
void* host_allocate(const SP_Device*, uint64_t size) { return std::aligned_alloc(64, (size + 63) / 64 * 64); }
void host_deallocate(const SP_Device*, void* mem) { std::free(mem); }
TF_Bool allocator_stats(const SP_Device*, SP_AllocatorStats* stats) {
  stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  stats->bytes_in_use = 0;
  return true;
}
TF_Bool memory_usage(const SP_Device*, int64_t* free, int64_t* total) {
  *free = int64_t{1} << 34;
  *total = int64_t{1} << 34;
  return true;
}
void create_stream(const SP_Device*, SP_Stream* stream, TF_Status* status) {
  *stream = new SP_Stream_st;
  TF_SetStatus(status, TF_OK, "");
}
void destroy_stream(const SP_Device*, SP_Stream stream) { delete stream; }
void stream_dependency(const SP_Device*, SP_Stream, SP_Stream, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void stream_status(const SP_Device*, SP_Stream, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void create_event(const SP_Device*, SP_Event* event, TF_Status* status) {
  *event = new SP_Event_st;
  TF_SetStatus(status, TF_OK, "");
}
void destroy_event(const SP_Device*, SP_Event event) { delete event; }
SE_EventStatus event_status(const SP_Device*, SP_Event) { return SE_EVENT_COMPLETE; }
void record_event(const SP_Device*, SP_Stream, SP_Event, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void wait_event(const SP_Device* const, SP_Stream, SP_Event, TF_Status* const status) {
  TF_SetStatus(status, TF_OK, "");
}
void dtoh(const SP_Device*, SP_Stream, void* dst, const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* status) {
  if (size) std::memcpy(dst, src->opaque, size);
  TF_SetStatus(status, TF_OK, "");
}
void htod(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const void* src, uint64_t size, TF_Status* status) {
  if (size) std::memcpy(dst->opaque, src, size);
  TF_SetStatus(status, TF_OK, "");
}
void dtod(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t size,
          TF_Status* status) {
  if (size) std::memcpy(dst->opaque, src->opaque, size);
  TF_SetStatus(status, TF_OK, "");
}
void sync_dtoh(const SP_Device* d, void* dst, const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* status) {
  dtoh(d, nullptr, dst, src, size, status);
}
void sync_htod(const SP_Device* d, SP_DeviceMemoryBase* dst, const void* src, uint64_t size, TF_Status* status) {
  htod(d, nullptr, dst, src, size, status);
}
void sync_dtod(const SP_Device* d, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t size,
               TF_Status* status) {
  dtod(d, nullptr, dst, src, size, status);
}
void block_event(const SP_Device*, SP_Event, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void block_stream(const SP_Device*, SP_Stream, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void synchronize(const SP_Device*, TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
void mem_zero(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint64_t size, TF_Status* status) {
  if (size) std::memset(location->opaque, 0, size);
  TF_SetStatus(status, TF_OK, "");
}
void mem_set(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
             TF_Status* status) {
  if (size) std::memset(location->opaque, pattern, size);
  TF_SetStatus(status, TF_OK, "");
}
void mem_set32(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* location, uint32_t pattern, uint64_t size,
               TF_Status* status) {
  auto* words = static_cast<uint32_t*>(location->opaque);
  for (uint64_t i = 0; i < size / 4; ++i) words[i] = pattern;
  TF_SetStatus(status, TF_OK, "");
}
TF_Bool host_callback(const SP_Device*, SP_Stream, SE_StatusCallbackFn fn, void* arg) {
  TF_Status* status = TF_NewStatus();
  fn(arg, status);
  bool ok = TF_GetCode(status) == TF_OK;
  TF_DeleteStatus(status);
  return ok;
}

void device_count(const SP_Platform*, int* count, TF_Status* status) {
  *count = 1;
  TF_SetStatus(status, TF_OK, "");
}
void create_device(const SP_Platform*, SE_CreateDeviceParams* params, TF_Status* status) {
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->ordinal = params->ordinal;
  params->device->hardware_name = "dltrace stand-in (host memory, TensorFlow's CPU kernels)";
  params->device->device_vendor = "dltrace";
  params->device->pci_bus_id = "";
  TF_SetStatus(status, TF_OK, "");
}
void destroy_device(const SP_Platform*, SP_Device*) {}
void create_device_fns(const SP_Platform*, SE_CreateDeviceFnsParams* params, TF_Status* status) {
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  TF_SetStatus(status, TF_OK, "");
}
void destroy_device_fns(const SP_Platform*, SP_DeviceFns*) {}
void create_stream_executor(const SP_Platform*, SE_CreateStreamExecutorParams* params, TF_Status* status) {
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->host_memory_allocate = host_allocate;
  se->host_memory_deallocate = host_deallocate;
  se->get_allocator_stats = allocator_stats;
  se->device_memory_usage = memory_usage;
  se->create_stream = create_stream;
  se->destroy_stream = destroy_stream;
  se->create_stream_dependency = stream_dependency;
  se->get_stream_status = stream_status;
  se->create_event = create_event;
  se->destroy_event = destroy_event;
  se->get_event_status = event_status;
  se->record_event = record_event;
  se->wait_for_event = wait_event;
  se->memcpy_dtoh = dtoh;
  se->memcpy_htod = htod;
  se->memcpy_dtod = dtod;
  se->sync_memcpy_dtoh = sync_dtoh;
  se->sync_memcpy_htod = sync_htod;
  se->sync_memcpy_dtod = sync_dtod;
  se->block_host_for_event = block_event;
  se->block_host_until_done = block_stream;
  se->synchronize_all_activity = synchronize;
  se->mem_zero = mem_zero;
  se->memset = mem_set;
  se->memset32 = mem_set32;
  se->host_callback = host_callback;
  TF_SetStatus(status, TF_OK, "");
}
void destroy_stream_executor(const SP_Platform*, SP_StreamExecutor*) {}
uint64_t nanoseconds(SP_Timer) { return 0; }
void create_timer_fns(const SP_Platform*, SP_TimerFns* timer, TF_Status* status) {
  timer->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer->nanoseconds = nanoseconds;
  TF_SetStatus(status, TF_OK, "");
}
void destroy_timer_fns(const SP_Platform*, SP_TimerFns*) {}
void destroy_platform(SP_Platform*) {}
void destroy_platform_fns(SP_PlatformFns*) {}

// ---------------------------------------------------------------- the generic kernel

// The few protobuf wire-format reads a NodeDef's attributes take (field 5: map<string,
// AttrValue>, each entry a key (1) and a value (2)), kept as the AttrValue's own bytes.
bool varint(const std::string& b, size_t* at, uint64_t* out) {
  *out = 0;
  for (int shift = 0; *at < b.size() && shift < 64; shift += 7) {
    uint8_t byte = static_cast<uint8_t>(b[(*at)++]);
    *out |= uint64_t{byte & 0x7fu} << shift;
    if (!(byte & 0x80u)) return true;
  }
  return false;
}

bool skip(const std::string& b, size_t* at, uint64_t wire) {
  uint64_t n;
  switch (wire) {
    case 0: return varint(b, at, &n);
    case 1: *at += 8; return *at <= b.size();
    case 2: if (!varint(b, at, &n) || n > b.size() - *at) return false; *at += n; return true;
    case 5: *at += 4; return *at <= b.size();
    default: return false;
  }
}

bool fields(const std::string& b, const std::function<bool(uint64_t, const std::string&)>& each) {
  size_t at = 0;
  while (at < b.size()) {
    uint64_t key;
    if (!varint(b, &at, &key)) return false;
    if ((key & 7) == 2) {
      uint64_t n;
      if (!varint(b, &at, &n) || n > b.size() - at) return false;
      if (!each(key >> 3, b.substr(at, n))) return false;
      at += n;
    } else if (!skip(b, &at, key & 7)) {
      return false;
    }
  }
  return true;
}

struct Kernel {
  std::string op;
  std::vector<std::pair<std::string, std::string>> attrs;  // name -> serialized AttrValue
  std::string called;  // what a call records: the op, with its element type T where it has one
};

TFE_Context* cpu_context() {
  static TFE_Context* context = [] {
    TF_Status* status = TF_NewStatus();
    TFE_ContextOptions* options = TFE_NewContextOptions();
    TFE_ContextOptionsSetAsync(options, 0);
    TFE_Context* made = TFE_NewContext(options, status);
    TFE_DeleteContextOptions(options);
    TF_DeleteStatus(status);
    return made;
  }();
  return context;
}


// ---------------------------------------------------------------- variables, on the CPU

// The variable ops' route to a variable on this device (tensorflow_standin_vars.cc: what
// kernels_experimental.h's TF_GetInputTensorFromVariable and TF_AssignUpdateVariable do,
// which the wheel does not export).
extern "C" {
void* dltrace_variables_open(TF_OpKernelContext* ctx, const int* inputs, int n, TF_Status* status);
TF_Tensor* dltrace_variable_value(void* variables, int k, TF_Status* status);
void dltrace_variable_store(TF_OpKernelContext* ctx, void* variables, int k, TF_Tensor* value, TF_Status* status);
void dltrace_variables_close(void* variables);
}

// One op on the private CPU context, with ``set`` setting its attributes; its outputs.
std::vector<TFE_TensorHandle*> on_cpu(const char* name, const std::vector<TFE_TensorHandle*>& args, int n,
                                      const std::function<void(TFE_Op*)>& set, TF_Status* status) {
  std::vector<TFE_TensorHandle*> out(n > 0 ? n : 1, nullptr);
  TFE_Op* op = TFE_NewOp(cpu_context(), name, status);
  if (TF_GetCode(status) == TF_OK) TFE_OpSetDevice(op, kCpu, status);
  if (TF_GetCode(status) == TF_OK) set(op);
  for (auto* a : args) if (TF_GetCode(status) == TF_OK) TFE_OpAddInput(op, a, status);
  if (TF_GetCode(status) == TF_OK) TFE_Execute(op, out.data(), &n, status);
  if (op) TFE_DeleteOp(op);
  out.resize(TF_GetCode(status) == TF_OK ? n : 0);
  return out;
}

// A variable on the private CPU context holding ``value`` (a copy of the device's), for
// the op to be re-run on TensorFlow's CPU kernel with; nullptr where it failed.
TFE_TensorHandle* cpu_variable(TF_Tensor* value, TF_Status* status) {
  static std::atomic<uint64_t> made{0};
  std::string name = "dltrace_standin_variable_" + std::to_string(made++);
  TF_DataType dtype = TF_TensorType(value);
  std::vector<int64_t> dims(TF_NumDims(value));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(value, static_cast<int>(d));
  auto handle = on_cpu("VarHandleOp", {}, 1, [&](TFE_Op* op) {
    TFE_OpSetAttrType(op, "dtype", dtype);
    TFE_OpSetAttrShape(op, "shape", dims.data(), static_cast<int>(dims.size()), status);
    TFE_OpSetAttrString(op, "shared_name", name.data(), name.size());
  }, status);
  if (handle.empty()) return nullptr;
  TFE_TensorHandle* given = TFE_NewTensorHandle(value, status);
  if (TF_GetCode(status) == TF_OK) {
    on_cpu("AssignVariableOp", {handle[0], given}, 0, [&](TFE_Op* op) { TFE_OpSetAttrType(op, "dtype", dtype); },
           status);
  }
  if (given) TFE_DeleteTensorHandle(given);
  return handle[0];
}

// The CPU variable's value after the op, as a host tensor (the caller's); nullptr where
// it failed.
TF_Tensor* cpu_variable_value(TFE_TensorHandle* variable, TF_DataType dtype, TF_Status* status) {
  auto read = on_cpu("ReadVariableOp", {variable}, 1, [&](TFE_Op* op) { TFE_OpSetAttrType(op, "dtype", dtype); },
                     status);
  if (read.empty()) return nullptr;
  TF_Tensor* out = TFE_TensorHandleResolve(read[0], status);
  TFE_DeleteTensorHandle(read[0]);
  return TF_GetCode(status) == TF_OK ? out : nullptr;
}

// Destroy the CPU variable (whatever the step's status: its own).
void cpu_variable_delete(TFE_TensorHandle* variable) {
  TF_Status* status = TF_NewStatus();
  on_cpu("DestroyResourceOp", {variable}, 0, [&](TFE_Op* op) { TFE_OpSetAttrBool(op, "ignore_lookup_error", 1); },
         status);
  TFE_DeleteTensorHandle(variable);
  TF_DeleteStatus(status);
}

}  // namespace

extern "C" {

// The generic kernel, as TF_NewKernelBuilder takes it: what it was built for (the
// NodeDef's op and attributes), then each call recorded and re-run on the CPU.
void* dltrace_create_kernel(TF_OpKernelConstruction* ctx) {
  auto* kernel = new Kernel;
  TF_Status* status = TF_NewStatus();
  TF_Buffer* def = TF_OpKernelConstruction_GetNodeDef(ctx, status);
  if (TF_GetCode(status) == TF_OK) {
    std::string bytes(static_cast<const char*>(def->data), def->length);
    fields(bytes, [&](uint64_t field, const std::string& value) {
      if (field == 2) {
        kernel->op = value;
      } else if (field == 5) {
        std::string name, attr;
        fields(value, [&](uint64_t f, const std::string& v) {
          if (f == 1) name = v;
          if (f == 2) attr = v;
          return true;
        });
        kernel->attrs.emplace_back(name, attr);
        size_t at = 0;
        uint64_t key, type;
        if (name == "T" && varint(attr, &at, &key) && key == ((6 << 3) | 0) && varint(attr, &at, &type)) {
          kernel->called = kernel->op + "\tT\t" + std::to_string(type);  // AttrValue.type (field 6)
        }
      }
      return true;
    });
    TF_DeleteBuffer(def);
    if (kernel->called.empty()) kernel->called = kernel->op;
  } else {
    TF_OpKernelConstruction_Failure(ctx, status);
  }
  TF_DeleteStatus(status);
  return kernel;
}

void dltrace_delete_kernel(void* kernel) { delete static_cast<Kernel*>(kernel); }

void dltrace_compute(void* k, TF_OpKernelContext* ctx) {
  auto* kernel = static_cast<Kernel*>(k);
  record(kernel->called);
  TF_Status* status = TF_NewStatus();
  TFE_Op* op = TFE_NewOp(cpu_context(), kernel->op.c_str(), status);
  std::vector<TFE_TensorHandle*> inputs;
  std::vector<TF_Tensor*> held;
  std::vector<int> resources;  // the inputs that are a variable's handle (ResourceGather's, ResourceApplyAdam's)
  std::vector<TFE_TensorHandle*> copies;  // each one's copy on the CPU, in resources' order
  std::vector<TF_DataType> types;  // and its element type
  for (int i = 0; i < TF_NumInputs(ctx); ++i) {
    if (TF_InputDatatype(ctx, i) == TF_RESOURCE) resources.push_back(i);
  }
  void* variables = nullptr;
  if (!resources.empty() && TF_GetCode(status) == TF_OK) {
    variables = dltrace_variables_open(ctx, resources.data(), static_cast<int>(resources.size()), status);
  }
  if (TF_GetCode(status) == TF_OK) TFE_OpSetDevice(op, kCpu, status);
  for (const auto& attr : kernel->attrs) {
    if (TF_GetCode(status) != TF_OK) break;
    TFE_OpSetAttrValueProto(op, attr.first.c_str(), attr.second.data(), attr.second.size(), status);
  }
  for (int i = 0; i < TF_NumInputs(ctx) && TF_GetCode(status) == TF_OK; ++i) {
    if (TF_InputDatatype(ctx, i) == TF_RESOURCE) {
      TF_Tensor* value = dltrace_variable_value(variables, static_cast<int>(copies.size()), status);
      TFE_TensorHandle* copy = TF_GetCode(status) == TF_OK ? cpu_variable(value, status) : nullptr;
      if (copy) {
        copies.push_back(copy);
        types.push_back(TF_TensorType(value));
        TFE_OpAddInput(op, copy, status);
      }
      if (value) TF_DeleteTensor(value);
      continue;
    }
    TF_Tensor* tensor = nullptr;
    TF_GetInput(ctx, i, &tensor, status);  // its buffer is host memory: the device's memory is
    if (TF_GetCode(status) != TF_OK) break;
    held.push_back(tensor);
    TFE_TensorHandle* handle = TFE_NewTensorHandle(tensor, status);
    if (TF_GetCode(status) != TF_OK) break;
    inputs.push_back(handle);
    TFE_OpAddInput(op, handle, status);
  }
  int n = TF_NumOutputs(ctx);
  std::vector<TFE_TensorHandle*> outputs(n > 0 ? n : 1, nullptr);
  if (TF_GetCode(status) == TF_OK) TFE_Execute(op, outputs.data(), &n, status);
  for (int i = 0; i < n && TF_GetCode(status) == TF_OK; ++i) {
    TF_Tensor* result = TFE_TensorHandleResolve(outputs[i], status);
    if (TF_GetCode(status) != TF_OK) break;
    TF_SetOutput(ctx, i, result, status);
    TF_DeleteTensor(result);
  }
  for (size_t v = 0; v < copies.size() && TF_GetCode(status) == TF_OK; ++v) {  // what the op did to each variable
    TF_Tensor* updated = cpu_variable_value(copies[v], types[v], status);
    if (updated) dltrace_variable_store(ctx, variables, static_cast<int>(v), updated, status);
    if (updated) TF_DeleteTensor(updated);
  }
  if (TF_GetCode(status) != TF_OK) {
    std::string said = "dltrace stand-in: " + kernel->op + " on the CPU: " + TF_Message(status);
    TF_SetStatus(status, TF_GetCode(status), said.c_str());
    TF_OpKernelContext_Failure(ctx, status);
  }
  for (auto* h : copies) cpu_variable_delete(h);
  if (variables) dltrace_variables_close(variables);
  for (auto* h : outputs) if (h) TFE_DeleteTensorHandle(h);
  for (auto* h : inputs) TFE_DeleteTensorHandle(h);
  for (auto* t : held) TF_DeleteTensor(t);
  if (op) TFE_DeleteOp(op);
  TF_DeleteStatus(status);
}

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = kPlatformName;
  params->platform->type = kDeviceType;
  params->platform->supports_unified_memory = false;
  params->platform->use_bfc_allocator = false;
  params->platform->force_memory_growth = false;
  params->platform_fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  params->platform_fns->get_device_count = device_count;
  params->platform_fns->create_device = create_device;
  params->platform_fns->destroy_device = destroy_device;
  params->platform_fns->create_device_fns = create_device_fns;
  params->platform_fns->destroy_device_fns = destroy_device_fns;
  params->platform_fns->create_stream_executor = create_stream_executor;
  params->platform_fns->destroy_stream_executor = destroy_stream_executor;
  params->platform_fns->create_timer_fns = create_timer_fns;
  params->platform_fns->destroy_timer_fns = destroy_timer_fns;
  params->destroy_platform = destroy_platform;
  params->destroy_platform_fns = destroy_platform_fns;
  TF_SetStatus(status, TF_OK, "");
}

#ifndef DLTRACE_SKELETON
void TF_InitKernel() {
  const char* list = std::getenv("DLTRACE_TF_STANDIN_OPS");
  if (list == nullptr) return;
  std::ifstream ops(list);
  std::string line;
  TF_Status* status = TF_NewStatus();
  while (std::getline(ops, line)) {  // "Op", or "Op<TAB>attr<TAB>TF_DataType": that type of attr only
    if (line.empty()) continue;
    size_t tab = line.find('\t');
    std::string name = line.substr(0, tab);
    TF_KernelBuilder* builder = TF_NewKernelBuilder(name.c_str(), kDeviceType, dltrace_create_kernel, dltrace_compute,
                                                    dltrace_delete_kernel);
    std::string kernel_name = name + "_dltrace_standin";
    if (tab != std::string::npos) {
      size_t second = line.find('\t', tab + 1);
      std::string attr = line.substr(tab + 1, second - tab - 1);
      int type = std::atoi(line.substr(second + 1).c_str());
      TF_KernelBuilder_TypeConstraint(builder, attr.c_str(), static_cast<TF_DataType>(type), status);
      kernel_name += "_" + std::to_string(type);
    }
    if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder(kernel_name.c_str(), builder, status);
    TF_SetStatus(status, TF_OK, "");  // an op that cannot take the generic kernel goes without one
  }
  TF_DeleteStatus(status);
}
#endif

// What reached the device since the last call, one call per line: the op, and its
// element type where it has one ("Conv2D<TAB>T<TAB>1"); the buffer is the plugin's own,
// valid until the next call.
const char* dltrace_standin_reached() {
  static std::string said;
  std::lock_guard<std::mutex> lock(reached_mutex);
  said.clear();
  for (const auto& op : reached) said += op + "\n";
  reached.clear();
  return said.c_str();
}

}  // extern "C"
