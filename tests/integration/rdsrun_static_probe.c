/* A statically linked program (built with -static by tools/meson.build) for
 * test_rdsrun.py: rdsrun must refuse it, since no dynamic loader runs and
 * LD_PRELOAD is never read. If it does run, it says so. */
#include <stdio.h>

int main(void) {
  puts("static probe ran");
  return 0;
}
