// The stand-in device's route to a resource variable's value, for the ops that take one
// (ResourceGather, ResourceApplyAdam, ResourceScatterAdd...).
//
// Why C++ and not the C API: tensorflow/c/kernels_experimental.h declares the
// PluggableDevice's variable functions (TF_GetInputTensorFromVariable,
// TF_AssignVariable, TF_AssignUpdateVariable, TF_MaybeLockVariableInputMutexesInOrder),
// but the tensorflow wheel exports none of them (no .so in it defines them: the
// stand-in would not load). They are thin wrappers over TensorFlow's C++ framework
// (LookupResource<Var>, the variable's mutex, its tensor), which the wheel does export
// for custom ops; this file does the same through it, built as custom ops are (the
// wheel's headers, tf.sysconfig's flags). What it does is what those functions do: find
// the variable the handle input names on this device, lock it, hand its value over,
// and store an updated value back; the arithmetic stays TensorFlow's CPU kernels'.
//
// A backend skeleton copies this file beside device.cc: a port replaces it with the
// C API's functions once its TensorFlow exports them.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace {

struct Opened {
  tensorflow::Var* var = nullptr;
  int input = 0;
};

}  // namespace

extern "C" {

// The variables behind the resource inputs ``inputs[0..n)`` of the op being computed,
// each looked up on this device and locked (in address order, as TensorFlow locks an
// optimizer's variables), or nullptr with ``status`` set (not a variable, not
// initialized).
void* dltrace_variables_open(TF_OpKernelContext* c, const int* inputs, int n, TF_Status* status) {
  auto* ctx = reinterpret_cast<tensorflow::OpKernelContext*>(c);
  auto* opened = new std::vector<Opened>;
  for (int k = 0; k < n; ++k) {
    tensorflow::Var* var = nullptr;
    absl::Status found = tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, inputs[k]), &var);
    if (!found.ok()) {
      for (auto& o : *opened) o.var->Unref();
      delete opened;
      std::string said = "input " + std::to_string(inputs[k]) + " is not a variable on the device: " +
                         std::string(found.message());
      TF_SetStatus(status, TF_FAILED_PRECONDITION, said.c_str());
      return nullptr;
    }
    opened->push_back({var, inputs[k]});
  }
  std::vector<tensorflow::Var*> order;
  for (auto& o : *opened) order.push_back(o.var);
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (auto* var : order) var->mu()->lock();
  for (auto& o : *opened) {
    if (!o.var->is_initialized) {
      std::string said = "the variable of input " + std::to_string(o.input) + " is not initialized";
      TF_SetStatus(status, TF_FAILED_PRECONDITION, said.c_str());
      for (auto* var : order) var->mu()->unlock();
      for (auto& p : *opened) p.var->Unref();
      delete opened;
      return nullptr;
    }
  }
  TF_SetStatus(status, TF_OK, "");
  return opened;
}

// The value of the k-th opened variable, copied into a new host tensor (the caller's).
TF_Tensor* dltrace_variable_value(void* handle, int k, TF_Status* status) {
  const tensorflow::Tensor& value = *(*static_cast<std::vector<Opened>*>(handle))[k].var->tensor();
  if (!tensorflow::DataTypeCanUseMemcpy(value.dtype())) {
    TF_SetStatus(status, TF_UNIMPLEMENTED, "a variable of this element type is not copied by the stand-in");
    return nullptr;
  }
  std::vector<int64_t> dims(value.dims());
  for (int d = 0; d < value.dims(); ++d) dims[d] = value.dim_size(d);
  auto size = value.tensor_data().size();
  TF_Tensor* out = TF_AllocateTensor(static_cast<TF_DataType>(value.dtype()), dims.data(),
                                     static_cast<int>(dims.size()), size);
  if (size) std::memcpy(TF_TensorData(out), value.tensor_data().data(), size);
  TF_SetStatus(status, TF_OK, "");
  return out;
}

// Store ``value`` as the k-th opened variable's value where it differs from it: a new
// buffer of the device's (host memory), so that a tensor read from the variable before
// keeps its value (a resource variable's copy-on-write).
void dltrace_variable_store(TF_OpKernelContext* c, void* handle, int k, TF_Tensor* value, TF_Status* status) {
  auto* ctx = reinterpret_cast<tensorflow::OpKernelContext*>(c);
  tensorflow::Var* var = (*static_cast<std::vector<Opened>*>(handle))[k].var;
  tensorflow::Tensor* now = var->tensor();
  size_t size = TF_TensorByteSize(value);
  TF_SetStatus(status, TF_OK, "");
  if (static_cast<int>(now->dtype()) == static_cast<int>(TF_TensorType(value)) && now->tensor_data().size() == size &&
      std::memcmp(now->tensor_data().data(), TF_TensorData(value), size) == 0) {
    return;
  }
  tensorflow::TensorShape shape;
  for (int d = 0; d < TF_NumDims(value); ++d) shape.AddDim(TF_Dim(value, d));
  tensorflow::Tensor fresh;
  absl::Status made = ctx->allocate_temp(static_cast<tensorflow::DataType>(TF_TensorType(value)), shape, &fresh);
  if (!made.ok()) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, std::string(made.message()).c_str());
    return;
  }
  if (size) std::memcpy(const_cast<char*>(fresh.tensor_data().data()), TF_TensorData(value), size);
  *now = fresh;
}

// Unlock and release what dltrace_variables_open opened.
void dltrace_variables_close(void* handle) {
  auto* opened = static_cast<std::vector<Opened>*>(handle);
  std::vector<tensorflow::Var*> order;
  for (auto& o : *opened) order.push_back(o.var);
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (auto* var : order) var->mu()->unlock();
  for (auto& o : *opened) o.var->Unref();
  delete opened;
}

}  // extern "C"
