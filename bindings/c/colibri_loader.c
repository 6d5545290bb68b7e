/* bindings/c/colibri_loader.c — dlopen + dlsym into the colibri_api table (colibri_loader.h). */
#include "colibri_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int colibri_api_load(colibri_api *api, const char *path, char *error, size_t error_size) {
  const char *name = path ? path : "libcolibri.so.1";
  void *library;
  void *symbol;
  uint32_t (*abi_version)(void);

  memset(api, 0, sizeof *api);
  if (error && error_size > 0) error[0] = '\0';
  library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    if (error) snprintf(error, error_size, "cannot load %s: %s", name, dlerror());
    return -1;
  }
  /* The ABI generation first: the other symbols' signatures are only known for ours. */
  symbol = dlsym(library, "colibri_abi_version");
  if (!symbol) {
    if (error) snprintf(error, error_size, "%s is not libcolibri: it has no colibri_abi_version", name);
    dlclose(library);
    return -1;
  }
  memcpy(&abi_version, &symbol, sizeof symbol); /* object → function pointer without a cast */
  if (abi_version() != COLIBRI_ABI_VERSION) {
    if (error)
      snprintf(error, error_size, "%s has ABI version %u, this program was built for %d (libcolibri.so.%d)", name,
               (unsigned)abi_version(), COLIBRI_ABI_VERSION, COLIBRI_ABI_VERSION);
    dlclose(library);
    return -1;
  }
#define COLIBRI_LOADER_RESOLVE(ret, fn, params)                                                          \
  symbol = dlsym(library, "colibri_" #fn);                                                               \
  if (!symbol) {                                                                                         \
    if (error)                                                                                           \
      snprintf(error, error_size, "%s lacks colibri_" #fn " (it is older than this program's colibri.h %s)", name, \
               COLIBRI_VERSION_STRING);                                                                  \
    dlclose(library);                                                                                    \
    memset(api, 0, sizeof *api);                                                                         \
    return -1;                                                                                           \
  }                                                                                                      \
  memcpy(&api->fn, &symbol, sizeof symbol);
  COLIBRI_LOADER_FUNCTIONS(COLIBRI_LOADER_RESOLVE)
#undef COLIBRI_LOADER_RESOLVE
  api->library = library;
  api->loaded_abi_version = abi_version();
  return 0;
}

void colibri_api_unload(colibri_api *api) {
  if (api->library) dlclose(api->library);
  memset(api, 0, sizeof *api);
}
