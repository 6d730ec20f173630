// Package onesync puts the onesync SQLite VFS into the SQLite that
// github.com/mattn/go-sqlite3 compiles in, so that a database opened through it
// is a onesync store: a failure-atomic page store that commits with one write and
// one flush, with SQLite's full semantics on top.
//
// Importing the package registers the VFS (no warm-up needed):
//
//	import (
//		"database/sql"
//
//		_ "onesync.dev/go/onesync"
//	)
//
//	db, err := sql.Open("sqlite3", "file:/data/app.onesync?vfs=onesync")
//
// The VFS is Rust code linked in from lib/libonesync.a (built by
// `onesync-package go`); it reaches SQLite only through the routine table SQLite
// hands its entry point, so it works with whichever SQLite mattn/go-sqlite3 links
// (its bundled one, or the system's with the libsqlite3 build tag). It cannot work
// with the sqlite_omit_load_extension build tag: such a SQLite hands automatic
// extensions no routine table, and Register then says so.
package onesync

/*
#cgo LDFLAGS: ${SRCDIR}/lib/libonesync.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#include <stdio.h>

// SQLite's own routines, from the SQLite that mattn/go-sqlite3 compiles in (resolved
// at link time; sqlite3.h is not included, so that no second copy of it is needed).
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_api_routines sqlite3_api_routines;
int sqlite3_auto_extension(void (*entry)(void));
int sqlite3_cancel_auto_extension(void (*entry)(void));
int sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs);
int sqlite3_close(sqlite3 *db);
const char *sqlite3_errmsg(sqlite3 *db);
int sqlite3_compileoption_used(const char *option);

// The entry points of lib/libonesync.a (crate onesync-vfs, src/sys/entry.rs).
int sqlite3_onesync_auto_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);
int sqlite3_onesync_default_auto_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);

// Registers the entry point with sqlite3_auto_extension, then opens and closes one
// in-memory connection: SQLite runs automatic extensions only after a connection's
// main database is open, so this first run is what registers the VFS before any
// open names it. Returns SQLite's result code, the reason in msg.
static int onesync_install(int make_default, char *msg, size_t len) {
	if (sqlite3_compileoption_used("OMIT_LOAD_EXTENSION")) {
		snprintf(msg, len, "onesync: this SQLite is built without extension loading "
			"(build tag sqlite_omit_load_extension), so automatic extensions get no "
			"routine table");
		return 1;
	}
	void (*plain)(void) = (void (*)(void))sqlite3_onesync_auto_init;
	void (*dflt)(void) = (void (*)(void))sqlite3_onesync_default_auto_init;
	if (make_default) {
		sqlite3_cancel_auto_extension(plain);
	}
	int rc = sqlite3_auto_extension(make_default ? dflt : plain);
	if (rc != 0) {
		snprintf(msg, len, "onesync: sqlite3_auto_extension failed (%d)", rc);
		return rc;
	}
	sqlite3 *db = 0;
	rc = sqlite3_open_v2(":memory:", &db, 0x02 | 0x04, 0); // READWRITE | CREATE
	if (rc != 0) {
		snprintf(msg, len, "onesync: registering the VFS: %s",
			db ? sqlite3_errmsg(db) : "out of memory");
	}
	sqlite3_close(db);
	return rc;
}
*/
import "C"

import (
	"errors"
	"strings"
	"sync"

	// The SQLite whose routines the C code above names.
	_ "github.com/mattn/go-sqlite3"
)

// VFSName is the name to open stores with: `vfs=onesync` in a "file:" URI.
const VFSName = "onesync"

var (
	mu          sync.Mutex
	registered  bool
	registerErr error
	isDefault   bool
)

func init() {
	// The error, if any, is kept for Register to return; opens naming the VFS then
	// fail with "no such vfs: onesync".
	_ = Register()
}

// Register registers the onesync VFS (not as the default) with mattn/go-sqlite3's
// SQLite, and on every connection opened from then on the check that puts the
// reason a store open was refused into the error. Importing the package already did; Register returns what that did.
func Register() error {
	mu.Lock()
	defer mu.Unlock()
	if !registered {
		registered = true
		registerErr = install(false)
	}
	return registerErr
}

// MakeDefault makes onesync SQLite's default VFS, for code that cannot name one
// (a DSN without vfs=): a new database is then a store, a store opens as one, and
// an existing plain SQLite file opens as it always did (through the previous
// default VFS). Connections opened before keep their VFS.
func MakeDefault() error {
	mu.Lock()
	defer mu.Unlock()
	if isDefault {
		return nil
	}
	if err := install(true); err != nil {
		return err
	}
	isDefault = true
	return nil
}

// URI is the DSN that opens the store at path: "file:PATH?vfs=onesync", with
// '%', '?', '#' and spaces in PATH percent-encoded. Append "&name=value" for
// more URI parameters (e.g. onesync_sync_interval_ms=5).
func URI(path string) string {
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23", " ", "%20").Replace(path)
	return "file:" + escaped + "?vfs=" + VFSName
}

func install(makeDefault bool) error {
	var msg [512]C.char
	flag := C.int(0)
	if makeDefault {
		flag = 1
	}
	if C.onesync_install(flag, &msg[0], C.size_t(len(msg))) != 0 {
		return errors.New(C.GoString(&msg[0]))
	}
	return nil
}
