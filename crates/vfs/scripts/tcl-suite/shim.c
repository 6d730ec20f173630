/*
** Compiled into SQLite's `testfixture` (as SQLITE_EXTRA_INIT) by `run`: at the end of every
** sqlite3_initialize(), including the ones after the suite's sqlite3_shutdown() calls, it
** makes onesync SQLite's default VFS, so every open of the suite, from TCL and from C, goes
** through it. The library is the one named by ONESYNC_SO; without it the testfixture is
** stock (the baseline run).
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

typedef int (*onesync_entry)(sqlite3 *, char **, const void *);

int onesync_tcl_init(const char *unused) {
  static onesync_entry entry = 0;
  const char *path = getenv("ONESYNC_SO");
  sqlite3_vfs *vfs;
  int rc;
  (void)unused;
  if (path == 0 || path[0] == 0) return SQLITE_OK;
  if (entry == 0) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == 0) {
      fprintf(stderr, "onesync shim: %s\n", dlerror());
      return SQLITE_ERROR;
    }
    entry = (onesync_entry)dlsym(lib, "sqlite3_onesync_default_auto_init");
    if (entry == 0) {
      fprintf(stderr, "onesync shim: %s\n", dlerror());
      return SQLITE_ERROR;
    }
  }
  /* sqlite3_shutdown() forgets automatic extensions (and sqlite3_os_init() makes unix the
  ** default again): register both anew after each initialization, as an application that
  ** shuts SQLite down must. */
  rc = sqlite3_auto_extension((void (*)(void))entry);
  if (rc != SQLITE_OK) return rc;
  vfs = sqlite3_vfs_find("onesync");
  if (vfs == 0) {
    /* The entry point's first run (at a connection's open) registers the VFS. */
    sqlite3 *db = 0;
    sqlite3_open(":memory:", &db);
    sqlite3_close(db);
    vfs = sqlite3_vfs_find("onesync");
    if (vfs == 0) {
      fprintf(stderr, "onesync shim: the onesync VFS did not register\n");
      return SQLITE_ERROR;
    }
  }
  return sqlite3_vfs_register(vfs, 1);
}
