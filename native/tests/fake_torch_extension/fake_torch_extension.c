/* A stand-in for cachalot's PyTorch extension (native/torch/cachalot_allocator.cpp), for
 * testing cachalot_torch.install() without PyTorch: the same three C entry points.
 *
 * FAKE_EXTENSION_TORCH_VERSION (e.g. "215") is the PyTorch version it says it was built for;
 * FAKE_EXTENSION_REFUSE, when set, makes install fail with PyTorch's refusal, as PyTorch does
 * once its allocator has served memory. Invariant: is_current is 1 only after an install that
 * succeeded. Built with -DFAKE_EXTENSION_NEWER_THAN_LIBRARY it calls a cachalot function no
 * library has, as an extension of a newer build does over an older libcachalot: it does not
 * load. */
#include <stdlib.h>
#include <string.h>

static int installed;

int cachalot_torch_extension_torch_version(void) {
  const char *v = getenv("FAKE_EXTENSION_TORCH_VERSION");
  return v != NULL ? atoi(v) : 0;
}

int cachalot_torch_extension_install(char *message, size_t capacity) {
  if (getenv("FAKE_EXTENSION_REFUSE") != NULL) {
    const char *why = "Can't swap an already initialized allocator";
    if (message != NULL && capacity > 0) {
      strncpy(message, why, capacity - 1);
      message[capacity - 1] = '\0';
    }
    return 1;
  }
  installed++;
  return 0;
}

#ifdef FAKE_EXTENSION_NEWER_THAN_LIBRARY
int cachalot_function_of_a_newer_build(void);
#endif

int cachalot_torch_extension_is_current(void) {
#ifdef FAKE_EXTENSION_NEWER_THAN_LIBRARY
  return cachalot_function_of_a_newer_build();
#else
  return installed > 0;
#endif
}

/* How many installs succeeded: the test checks that install() called it once. */
int fake_extension_installs(void) {
  return installed;
}
