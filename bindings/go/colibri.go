// Package colibri runs Mixture-of-Experts language models with libcolibri, loaded at run time.
//
// The package has no Go dependencies and does not link against libcolibri: it dlopen-s the
// shared library (the SONAME libcolibri.so.1, found the way the dynamic linker finds
// libraries, or a path given with WithLibrary / Load), checks its ABI generation and resolves
// its functions into a table. Building needs cgo and a C compiler; running needs the library.
//
//	model, err := colibri.Open("model.colibri")
//	if err != nil { ... }
//	defer model.Close()
//	session, err := model.NewSession(colibri.SessionOptions{})
//	if err != nil { ... }
//	defer session.Close()
//	_, err = session.Generate(ctx, "Once upon a time", colibri.GenerateOptions{MaxTokens: 64},
//		func(piece string) error { fmt.Print(piece); return nil })
//
// Threads. A Model is immutable and safe for concurrent use by any number of goroutines and
// sessions. A Session (and a Stream) is used by one goroutine at a time: a call made while
// another call on the same session is running (from another goroutine, or from the piece
// callback of Generate) fails with a StatusBadState error instead of racing. Different
// sessions of one model run concurrently. The library checks the same below the binding
// (colibri.h, "Misuse"): a session in use by another thread, a callback that calls back
// into its own session, and a freed or foreign handle are StatusBadState, never a crash.
//
// Errors. Failing calls return *Error, which carries the library's status code and the
// message the library stored for that failure. The message is read inside the same C call
// as the failing function, so it cannot be lost or mixed up when goroutines move between OS
// threads. Use errors.Is(err, colibri.StatusNotAnImage) or errors.As(err, &e).
//
// Lifetimes. Close releases a Model, Session or Stream; finalizers release forgotten ones as
// a safety net. Sessions keep their model usable: closing the Model while sessions are open is
// allowed, the memory is released when the last of them closes.
package colibri

/*
#cgo CFLAGS: -std=gnu99 -Wall
#cgo LDFLAGS: -ldl
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ABIVersion is the ABI generation this binding was built for (COLIBRI_ABI_VERSION of the
// bundled colibri.h); Load refuses a library of another generation.
const ABIVersion = C.COLIBRI_ABI_VERSION

// DefaultLibrary is the name dlopen-ed when no path is given.
const DefaultLibrary = "libcolibri.so.1"

// Status is a libcolibri status code. Negative values are errors; Status implements error so
// that errors.Is(err, StatusCorrupt) works on the errors this package returns.
type Status int32

// The status codes of colibri.h. New codes may be added in later versions: treat an unknown
// negative value as an error.
const (
	StatusOK              Status = C.COLIBRI_OK
	StatusDone            Status = C.COLIBRI_DONE
	StatusPending         Status = C.COLIBRI_PENDING
	StatusInvalidArgument Status = C.COLIBRI_ERROR_INVALID_ARGUMENT
	StatusIO              Status = C.COLIBRI_ERROR_IO
	StatusNotAnImage      Status = C.COLIBRI_ERROR_NOT_AN_IMAGE
	StatusCorrupt         Status = C.COLIBRI_ERROR_CORRUPT
	StatusUnsupported     Status = C.COLIBRI_ERROR_UNSUPPORTED
	StatusNonFinite       Status = C.COLIBRI_ERROR_NON_FINITE
	StatusOutOfMemory     Status = C.COLIBRI_ERROR_OUT_OF_MEMORY
	StatusBufferTooSmall  Status = C.COLIBRI_ERROR_BUFFER_TOO_SMALL
	StatusContextFull     Status = C.COLIBRI_ERROR_CONTEXT_FULL
	StatusBadState        Status = C.COLIBRI_ERROR_BAD_STATE
	StatusCallback        Status = C.COLIBRI_ERROR_CALLBACK
	StatusInternal        Status = C.COLIBRI_ERROR_INTERNAL
	StatusBusy            Status = C.COLIBRI_ERROR_BUSY
)

var statusNames = map[Status]string{
	StatusOK: "ok", StatusDone: "done", StatusInvalidArgument: "invalid argument", StatusIO: "input/output error",
	StatusNotAnImage: "not a colibri image", StatusCorrupt: "corrupt image", StatusUnsupported: "unsupported",
	StatusNonFinite: "non-finite value", StatusOutOfMemory: "out of memory",
	StatusBufferTooSmall: "buffer too small", StatusContextFull: "context full", StatusBadState: "bad state",
	StatusCallback: "callback failed", StatusInternal: "internal error", StatusPending: "pending", StatusBusy: "busy",
}

// String names the status (as colibri_status_string does; "status N" for a code this binding
// does not know).
func (s Status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("status %d", int32(s))
}

// Error makes Status usable as an errors.Is target.
func (s Status) Error() string { return "colibri: " + s.String() }

// Error is a failed libcolibri call: the operation, the status code and the library's message.
type Error struct {
	Op      string // the binding's operation, e.g. "open", "generate"
	Status  Status
	Message string // what failed and how to fix it (from colibri_last_error)
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Status.String()
	}
	if e.Op == "" {
		return "colibri: " + msg
	}
	return "colibri: " + e.Op + ": " + msg
}

// Is reports whether target is the Status of e (errors.Is(err, colibri.StatusIO)).
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// u32 converts an int argument to the C API's uint32_t, refusing a value that would wrap
// (a negative count, or sequence 1<<32 silently becoming sequence 0).
func u32(op, what string, v int) (C.uint32_t, error) {
	if v < 0 || uint64(v) > math.MaxUint32 {
		return 0, &Error{Op: op, Status: StatusInvalidArgument,
			Message: fmt.Sprintf("%s %d is out of range (0..%d)", what, v, uint64(math.MaxUint32))}
	}
	return C.uint32_t(v), nil
}

// ErrClosed is returned by calls on a closed Model, Session or Stream.
var ErrClosed = errors.New("colibri: use of a closed model, session or stream")

// errorFrom turns a status and the malloc'd message of a shim call into an error (nil for
// status >= 0) and frees the message.
func errorFrom(op string, status C.int32_t, message *C.char) error {
	if message != nil {
		defer C.free(unsafe.Pointer(message))
	}
	if status >= 0 {
		return nil
	}
	return &Error{Op: op, Status: Status(status), Message: C.GoString(message)}
}

func busy(op string) error {
	return &Error{Op: op, Status: StatusBadState,
		Message: "the session is in use by another call (sessions are used by one goroutine at a time; the piece callback must not use its own session)"}
}

// Library is a loaded libcolibri. Loading the same path twice gives the same *Library.
type Library struct {
	api     *C.colibri_go_api
	path    string
	version string
	abi     uint32

	logHandler atomic.Value // logHandler
	logHandle  cgo.Handle
	logOnce    sync.Once
}

var libraries struct {
	sync.Mutex
	byPath map[string]*Library
}

// Load dlopen-s libcolibri from path ("" = DefaultLibrary, searched like the dynamic linker
// does), checks that its ABI generation is ABIVersion and resolves its functions. The library
// stays loaded for the life of the process.
func Load(path string) (*Library, error) {
	libraries.Lock()
	defer libraries.Unlock()
	if lib, ok := libraries.byPath[path]; ok {
		return lib, nil
	}
	var cpath *C.char
	if path != "" {
		cpath = C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
	}
	var message *C.char
	var status C.int32_t
	api := C.cgo_load(cpath, &status, &message)
	if api == nil {
		defer C.free(unsafe.Pointer(message))
		return nil, &Error{Op: "load", Status: Status(status), Message: C.GoString(message)}
	}
	lib := &Library{api: api, path: path, version: C.GoString(C.cgo_version_string(api)),
		abi: uint32(C.cgo_abi_version(api))}
	if libraries.byPath == nil {
		libraries.byPath = map[string]*Library{}
	}
	libraries.byPath[path] = lib
	return lib, nil
}

// Version is the loaded library's release, "MAJOR.MINOR.PATCH".
func (l *Library) Version() string { return l.version }

// ABIVersion is the loaded library's ABI generation (equal to the package's ABIVersion).
func (l *Library) ABIVersion() uint32 { return l.abi }

// Path is the path the library was loaded from ("" for DefaultLibrary).
func (l *Library) Path() string { return l.path }

// StatusString is the library's name for a status code.
func (l *Library) StatusString(s Status) string {
	return C.GoString(C.cgo_status_string(l.api, C.int32_t(s)))
}

// LogLevel is a COLIBRI_LOG_* level.
type LogLevel int32

// Log levels; LogOff as the minimum level delivers nothing.
const (
	LogDebug   LogLevel = C.COLIBRI_LOG_DEBUG
	LogInfo    LogLevel = C.COLIBRI_LOG_INFO
	LogWarning LogLevel = C.COLIBRI_LOG_WARNING
	LogError   LogLevel = C.COLIBRI_LOG_ERROR
	LogOff     LogLevel = C.COLIBRI_LOG_OFF
)

type logHandler struct{ fn func(LogLevel, string) }

// SetLogHandler installs the library's process-wide log handler: messages at minLevel or above
// go to fn, which may be called from several goroutines at once and must not call back into
// the library. fn nil turns logging off.
func (l *Library) SetLogHandler(minLevel LogLevel, fn func(level LogLevel, message string)) error {
	l.logOnce.Do(func() { l.logHandle = cgo.NewHandle(l) }) // never deleted: in-flight calls may still log
	l.logHandler.Store(logHandler{fn})
	handle := C.uintptr_t(l.logHandle)
	if fn == nil {
		handle = 0
	}
	var message *C.char
	status := C.cgo_set_log_callback(l.api, handle, C.int32_t(minLevel), &message)
	return errorFrom("set log handler", status, message)
}

//export colibriGoLog
func colibriGoLog(handle C.uintptr_t, level C.int32_t, message *C.char) {
	lib, ok := cgo.Handle(handle).Value().(*Library)
	if !ok {
		return
	}
	if h, ok := lib.logHandler.Load().(logHandler); ok && h.fn != nil {
		lvl, text := LogLevel(level), C.GoString(message)
		// A log line has no caller to hand a panic to: a panic or Goexit in the handler ends
		// only the handler's goroutine, never unwinds through libcolibri's frames.
		callIsolated(func() { h.fn(lvl, text) })
	}
}

// callIsolated runs f on its own goroutine and waits for it, so that nothing f does unwinds
// through the C frames of the cgo call that invoked the Go callback: a panic is recovered
// there, and runtime.Goexit (what t.FailNow calls) ends only that goroutine. exited reports
// that f did not return normally; panicVal is the recovered value (nil after Goexit, and
// after panic(nil), which recover cannot tell apart before Go 1.21).
func callIsolated(f func()) (exited bool, panicVal interface{}) {
	done := make(chan struct{})
	go func() {
		returned := false
		defer func() {
			if !returned {
				exited, panicVal = true, recover()
			}
			close(done)
		}()
		f()
		returned = true
	}()
	<-done
	return exited, panicVal
}

// DType is a COLIBRI_DTYPE_* element type.
type DType uint32

// Element types.
const (
	DTypeF32  DType = C.COLIBRI_DTYPE_F32
	DTypeF16  DType = C.COLIBRI_DTYPE_F16
	DTypeBF16 DType = C.COLIBRI_DTYPE_BF16
	DTypeQ8   DType = C.COLIBRI_DTYPE_Q8
	// Image format v2 weights: int4 with f16 group scales, int8 with f16 scales per 32, OCP MX FP4.
	DTypeQ4    DType = C.COLIBRI_DTYPE_Q4
	DTypeQ8F16 DType = C.COLIBRI_DTYPE_Q8F16
	DTypeMXFP4 DType = C.COLIBRI_DTYPE_MXFP4
)

func (d DType) String() string {
	switch d {
	case DTypeF32:
		return "f32"
	case DTypeF16:
		return "f16"
	case DTypeBF16:
		return "bf16"
	case DTypeQ8:
		return "q8"
	case DTypeQ4:
		return "q4"
	case DTypeQ8F16:
		return "q8f16"
	case DTypeMXFP4:
		return "mxfp4"
	}
	return "unknown"
}

//go:generate cp ../../capi/colibri.h colibri.h
