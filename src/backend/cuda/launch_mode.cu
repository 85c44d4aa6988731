#include "backend/cuda/launch_mode.h"

namespace infercept::cuda {
namespace {
bool g_programmatic_launch = false;
}  // namespace

bool programmatic_launch() {
  return g_programmatic_launch;
}
void set_programmatic_launch(bool on) {
  g_programmatic_launch = on;
}

}  // namespace infercept::cuda
