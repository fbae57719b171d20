// Loads the plugin named on the command line with dlopen and runs it: exits 0 when the plugin's
// pool behaved, 1 when it did not, 2 when the plugin (or libsluice.so under it) could not load.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto* run = reinterpret_cast<int (*)()>(dlsym(plugin, "plugin_run"));
  if (run == nullptr) return 2;
  const int result = run();
  std::printf("plugin_run: %s\n", result == 0 ? "ok" : "wrong");
  return result;
}
