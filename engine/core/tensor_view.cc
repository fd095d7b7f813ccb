#include "engine/core/tensor_view.h"

#include "absl/strings/str_cat.h"

namespace specgen {

std::string ShapeString(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) absl::StrAppend(&s, i ? ", " : "", t.shape[i]);
  return s + "]";
}

}  // namespace specgen
