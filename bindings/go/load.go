package pkv

// Loading libpkv. The package is built against pkv.h (cgo: pkg-config pkv) but opens the library
// when it initializes, by its SONAME (libpkv.so.1, no development symlink needed), so that a
// program that cannot find it gets an error saying where it looked and what to set, rather than
// the dynamic loader's refusal to start. PKV_LIBRARY, when set, names the file to load instead.

// #include <stdlib.h>
// #include <pkv/pkv.h>
// #include "load.h"
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// LibraryName is the file the package loads: libpkv's SONAME, libpkv.so.<ABI major>.
var LibraryName = fmt.Sprintf("libpkv.so.%d", ABIVersion)

var (
	libraryPath  string
	libraryError error // why libpkv cannot be used: not found, too old, another ABI
)

// LoadError is nil when libpkv was loaded as the package initialized and matches this binding,
// else the error that every call returns: it says where the library was looked for and what
// to set. A program may check it first.
func LoadError() error { return libraryError }

// LibraryPath is the file libpkv was loaded from, "" when it was not.
func LibraryPath() string { return libraryPath }

func loadLibrary() error {
	path, fromEnv := os.LookupEnv("PKV_LIBRARY")
	if path == "" {
		path, fromEnv = LibraryName, false
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	lib := C.pkvgo_open(cpath, &cerr)
	if lib == nil {
		reason := C.GoString(cerr)
		if fromEnv {
			return fmt.Errorf("cannot load libpkv from PKV_LIBRARY=%s (%s): set PKV_LIBRARY to the "+
				"file %s of an installed pkv, or unset it to search LD_LIBRARY_PATH", path, reason, LibraryName)
		}
		ldPath := os.Getenv("LD_LIBRARY_PATH")
		if ldPath == "" {
			ldPath = "unset"
		} else {
			ldPath = "=" + ldPath
		}
		return fmt.Errorf("cannot load %s (%s). It was looked for in LD_LIBRARY_PATH (%s), the "+
			"program's RUNPATH, the ld.so cache and /lib, /usr/lib. Set LD_LIBRARY_PATH to the "+
			"directory that holds %s (where pkv was installed: pkg-config --variable=libdir pkv), "+
			"or PKV_LIBRARY to the file", LibraryName, reason, ldPath, LibraryName)
	}
	var missing *C.char
	if C.pkvgo_resolve(lib, &missing) != 0 {
		return fmt.Errorf("%s (%s) lacks %s: the library is older than this binding (pkv %d.%d.%d); "+
			"install a newer pkv", LibraryName, C.GoString(C.pkvgo_path(lib)), C.GoString(missing),
			VersionMajor, VersionMinor, VersionPatch)
	}
	libraryPath = C.GoString(C.pkvgo_path(lib))
	return nil
}

func init() {
	checkLayouts()
	err := loadLibrary()
	if err == nil {
		if abi := uint32(C.pkv_abi_version()); abi != ABIVersion {
			err = fmt.Errorf("%s (%s) has ABI %d, this binding needs %d", LibraryName, libraryPath, abi, ABIVersion)
		}
	}
	if err != nil {
		libraryError = &Error{Status: StatusUnsupported, Message: err.Error()}
		C.pkvgo_load_error = C.CString(err.Error()) // kept for the process's life
	}
}
