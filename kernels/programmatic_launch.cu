#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {

bool ProgrammaticLaunchSupported(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;
}

namespace {
// What the Backend op launchers ask of the device current when first asked, remembered for the process.
struct CurrentDeviceFacts {
  bool programmatic_launch = false;
  int multiprocessors = 132;  // a Hopper H100/H200's count, where the device cannot be asked
};
const CurrentDeviceFacts& FactsOfCurrentDevice() {
  static const CurrentDeviceFacts facts = [] {
    CurrentDeviceFacts f;
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return f;
    }
    f.programmatic_launch = ProgrammaticLaunchSupported(device);
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) {
      f.multiprocessors = count;
    } else {
      (void)cudaGetLastError();
    }
    return f;
  }();
  return facts;
}
}  // namespace

bool ProgrammaticLaunchOnCurrentDevice() { return FactsOfCurrentDevice().programmatic_launch; }
int MultiprocessorsOnCurrentDevice() { return FactsOfCurrentDevice().multiprocessors; }

}  // namespace specgen::kernels
