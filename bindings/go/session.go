package colibri

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// SessionOptions configures NewSession. Zero fields take the library's defaults (the model's
// for threads and the policies).
type SessionOptions struct {
	ContextLength   int    // tokens per sequence (0: min(max_position_embeddings, 4096))
	MaxSequences    int    // KV slots (0: 1)
	MaxBatchTokens  int    // tokens per forward call (0: 512)
	MaxLogitRows    int    // logit rows one Batch call may ask for (0: MaxSequences)
	Threads         int    // 0: the model's threads option
	PinThreads      uint32 // PinDefault, PinOff, PinOn
	NonFinitePolicy uint32 // NonFiniteDefault, NonFiniteError, NonFiniteZero
	KVDType         DType  // DTypeF32 (default) or DTypeF16
	ForceScalar     bool   // portable scalar kernels (debugging)
	Seed            uint64 // default sampling seed of this session's generations
	NUMAPolicy      uint32 // NUMADefault, NUMAOff, NUMABind, NUMAInterleave
	NUMANode        int
	MaxISA          uint32 // ISAAuto (default), ISAScalar, ISAAVX2, ISAAVX512: the widest kernels
	Device          uint32 // DeviceCPU (default) or DeviceCUDA: where the forward pass runs
	DeviceIndex     int    // the N of DeviceCUDA (cuda:N)
}

// Devices for SessionOptions.Device (colibri.h COLIBRI_DEVICE_*). A CUDA session needs the
// library's CUDA module, an NVIDIA driver and the device; without one of them NewSession fails
// with a message starting "no CUDA device: " (docs/api.md, "Devices").
const (
	DeviceCPU  = C.COLIBRI_DEVICE_CPU
	DeviceCUDA = C.COLIBRI_DEVICE_CUDA
)

// Kernel instruction-set caps for SessionOptions.MaxISA (colibri.h COLIBRI_ISA_*). One level
// gives the same bits on every CPU that has it; levels differ in the last bits of the logits,
// so a fleet of AVX2 and AVX-512 machines that wants identical outputs uses ISAAVX2. A cap
// above what the CPU has gives its best level (SessionInfo.Backend says which).
const (
	ISAAuto   = C.COLIBRI_ISA_AUTO
	ISAScalar = C.COLIBRI_ISA_SCALAR
	ISAAVX2   = C.COLIBRI_ISA_AVX2
	ISAAVX512 = C.COLIBRI_ISA_AVX512
)

// Session is a KV cache plus the scratch memory and threads to run the model. It is used by
// one goroutine at a time; sessions of one model run concurrently.
type Session struct {
	model  *Model
	mu     sync.Mutex // held by every call that uses handle
	handle *C.colibri_session
}

// sessionOptionsFrom is the C view of opts: the library's defaults, then the non-zero fields.
func sessionOptionsFrom(m *Model, op string, opts SessionOptions) (C.colibri_session_options, error) {
	var options C.colibri_session_options
	var message *C.char
	if err := errorFrom(op, C.cgo_session_options_init(m.lib.api, &options, &message), message); err != nil {
		return options, err
	}
	var bad error
	setIf := func(dst *C.uint32_t, what string, v int) {
		if v != 0 && bad == nil {
			*dst, bad = u32(op, what, v)
		}
	}
	setIf(&options.context_length, "ContextLength", opts.ContextLength)
	setIf(&options.max_sequences, "MaxSequences", opts.MaxSequences)
	setIf(&options.max_batch_tokens, "MaxBatchTokens", opts.MaxBatchTokens)
	setIf(&options.max_logit_rows, "MaxLogitRows", opts.MaxLogitRows)
	setIf(&options.threads, "Threads", opts.Threads)
	setIf(&options.pin_threads, "PinThreads", int(opts.PinThreads))
	setIf(&options.non_finite_policy, "NonFinitePolicy", int(opts.NonFinitePolicy))
	setIf(&options.kv_dtype, "KVDType", int(opts.KVDType))
	if opts.ForceScalar {
		options.force_scalar = 1
	}
	if opts.Seed != 0 {
		options.seed = C.uint64_t(opts.Seed)
	}
	setIf(&options.numa_policy, "NUMAPolicy", int(opts.NUMAPolicy))
	setIf(&options.numa_node, "NUMANode", opts.NUMANode)
	setIf(&options.max_isa, "MaxISA", int(opts.MaxISA))
	setIf(&options.device_kind, "Device", int(opts.Device))
	setIf(&options.device_index, "DeviceIndex", opts.DeviceIndex)
	return options, bad
}

// NewSession creates a session on the model (colibri_session_create).
func (m *Model) NewSession(opts SessionOptions) (*Session, error) {
	options, err := sessionOptionsFrom(m, "new session", opts)
	if err != nil {
		return nil, err
	}
	var message *C.char

	// The read lock: sessions are created concurrently; Close (write lock) waits.
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.open || m.handle == nil {
		return nil, ErrClosed
	}
	var handle *C.colibri_session
	message = nil
	if err := errorFrom("new session", C.cgo_session_create(m.lib.api, m.handle, &options, &handle, &message), message); err != nil {
		return nil, err
	}
	atomic.AddInt64(&m.sessions, 1)
	s := &Session{model: m, handle: handle}
	runtime.SetFinalizer(s, (*Session).Close)
	return s, nil
}

// Close frees the session. A Stream still open on it fails afterwards and must still be
// closed. Closing twice is a no-op. Close waits for a running call on the session, so it must
// not be called from that call's piece callback.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handle == nil {
		return nil
	}
	runtime.SetFinalizer(s, nil)
	C.cgo_session_free(s.model.lib.api, s.handle)
	s.handle = nil
	m := s.model
	m.mu.Lock()
	atomic.AddInt64(&m.sessions, -1)
	m.releaseLocked()
	m.mu.Unlock()
	return nil
}

// Model is the model the session runs.
func (s *Session) Model() *Model { return s.model }

// use runs fn with the session handle, refusing (instead of racing) when another call holds
// the session.
func (s *Session) use(op string, fn func(h *C.colibri_session) error) error {
	if !s.mu.TryLock() {
		return busy(op)
	}
	defer s.mu.Unlock()
	if s.handle == nil {
		return ErrClosed
	}
	err := fn(s.handle)
	runtime.KeepAlive(s)
	return err
}

func (s *Session) api() *C.colibri_go_api { return s.model.lib.api }

// SessionInfo is the effective configuration of a session.
type SessionInfo struct {
	ContextLength   int
	MaxSequences    int
	MaxBatchTokens  int
	MaxLogitRows    int
	ThreadCount     int
	KVDType         DType
	PinThreads      uint32
	NonFinitePolicy uint32
	NUMAPolicy      uint32
	NUMANode        int
	Backend         string // "cpu-avx512", "cpu-avx2", "cpu-scalar"
	KVCacheBytes    uint64
	Seed            uint64
}

// Info is the session's effective configuration.
func (s *Session) Info() (SessionInfo, error) {
	var out SessionInfo
	err := s.use("session info", func(h *C.colibri_session) error {
		var i C.colibri_session_info
		var message *C.char
		if err := errorFrom("session info", C.cgo_session_get_info(s.api(), h, &i, &message), message); err != nil {
			return err
		}
		out = SessionInfo{ContextLength: int(i.context_length), MaxSequences: int(i.max_sequences),
			MaxBatchTokens: int(i.max_batch_tokens), MaxLogitRows: int(i.max_logit_rows),
			ThreadCount: int(i.thread_count), KVDType: DType(i.kv_dtype), PinThreads: uint32(i.pin_threads),
			NonFinitePolicy: uint32(i.non_finite_policy), NUMAPolicy: uint32(i.numa_policy),
			NUMANode: int(i.numa_node), Backend: C.GoString(i.backend), KVCacheBytes: uint64(i.kv_cache_bytes),
			Seed: uint64(i.seed)}
		return nil
	})
	return out, err
}

// Reset forgets every sequence.
func (s *Session) Reset() error {
	return s.use("reset", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("reset", C.cgo_session_reset(s.api(), h, &message), message)
	})
}

// ResetSequence forgets one sequence.
func (s *Session) ResetSequence(sequence int) error {
	seq, err := u32("reset sequence", "sequence", sequence)
	if err != nil {
		return err
	}
	return s.use("reset sequence", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("reset sequence", C.cgo_session_reset_sequence(s.api(), h, seq, &message), message)
	})
}

// SequenceLength is the number of tokens a sequence holds.
func (s *Session) SequenceLength(sequence int) (int, error) {
	var length C.uint32_t
	seq, err := u32("sequence length", "sequence", sequence)
	if err != nil {
		return 0, err
	}
	err = s.use("sequence length", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("sequence length", C.cgo_session_sequence_length(s.api(), h, seq, &length, &message), message)
	})
	return int(length), err
}

func int32Ptr(v []int32) *C.int32_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&v[0]))
}

func uint32Ptr(v []uint32) *C.uint32_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.uint32_t)(unsafe.Pointer(&v[0]))
}

func floatPtr(v []float32) *C.float {
	if len(v) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&v[0]))
}

// Prefill appends tokens to a sequence and runs them through the model; afterwards Logits(0)
// are the last token's.
func (s *Session) Prefill(sequence int, tokens []int32) error {
	seq, err := u32("prefill", "sequence", sequence)
	if err != nil {
		return err
	}
	return s.use("prefill", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("prefill", C.cgo_session_prefill(s.api(), h, seq, int32Ptr(tokens), C.size_t(len(tokens)), &message), message)
	})
}

// Decode appends one token to a sequence and computes its logits (row 0).
func (s *Session) Decode(sequence int, token int32) error {
	seq, err := u32("decode", "sequence", sequence)
	if err != nil {
		return err
	}
	return s.use("decode", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("decode", C.cgo_session_decode(s.api(), h, seq, C.int32_t(token), &message), message)
	})
}

// BatchEntry is one entry of a Batch call: a token of a sequence at a position.
type BatchEntry struct {
	Sequence   int
	Position   int // -1: continue the sequence; 0 (the zero value) is position 0, not "append"
	Token      int32
	WantLogits bool // compute this entry's logits (rows in entry order)
}

// Batch runs one forward pass over entries of several sequences (colibri_session_batch).
// With no entry asking for logits, the last entry's are computed.
func (s *Session) Batch(entries []BatchEntry) error {
	n := len(entries)
	sequences, positions, tokens, want := make([]uint32, n), make([]uint32, n), make([]int32, n), make([]uint32, n)
	usePositions, anyLogits := false, false
	for i, e := range entries {
		seq, err := u32("batch", fmt.Sprintf("entry %d: Sequence", i), e.Sequence)
		if err != nil {
			return err
		}
		sequences[i], tokens[i] = uint32(seq), e.Token
		if e.Position >= 0 {
			usePositions = true
		}
		if e.WantLogits {
			want[i], anyLogits = 1, true
		}
	}
	if usePositions {
		for i, e := range entries {
			if e.Position < 0 {
				return &Error{Op: "batch", Status: StatusInvalidArgument,
					Message: "either every entry gives a position or none does"}
			}
			pos, err := u32("batch", fmt.Sprintf("entry %d: Position", i), e.Position)
			if err != nil {
				return err
			}
			positions[i] = uint32(pos)
		}
	}
	var pPositions, pWant *C.uint32_t
	if usePositions {
		pPositions = uint32Ptr(positions)
	}
	if anyLogits {
		pWant = uint32Ptr(want)
	}
	return s.use("batch", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("batch", C.cgo_session_batch(s.api(), h, uint32Ptr(sequences), pPositions, int32Ptr(tokens), pWant, C.size_t(n), &message), message)
	})
}

// Logits is a copy of row `row` of the last forward pass's logits (vocab_size floats).
func (s *Session) Logits(row int) ([]float32, error) {
	out := make([]float32, s.model.info.VocabSize)
	err := s.use("logits", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("logits", C.cgo_session_copy_logits(s.api(), h, C.size_t(row), floatPtr(out), C.size_t(len(out)), nil, &message), message)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MoELayer runs layer `layer`'s MoE block on hidden ([rows, hidden_size], row-major) and
// returns its output. routeExperts and routeWeights ([rows, top_k]) are both nil (the model's
// router decides) or both given (a static routing table).
func (s *Session) MoELayer(layer int, hidden []float32, routeExperts []int32, routeWeights []float32) ([]float32, error) {
	hs := s.model.info.HiddenSize
	if hs == 0 || len(hidden)%hs != 0 {
		return nil, &Error{Op: "moe layer", Status: StatusInvalidArgument, Message: "len(hidden) is not a multiple of hidden_size"}
	}
	rows := len(hidden) / hs
	k := s.model.info.TopK
	if (routeExperts == nil) != (routeWeights == nil) ||
		(routeExperts != nil && (len(routeExperts) != rows*k || len(routeWeights) != rows*k)) {
		return nil, &Error{Op: "moe layer", Status: StatusInvalidArgument,
			Message: "routeExperts and routeWeights must both be nil or both hold rows*top_k entries"}
	}
	out := make([]float32, len(hidden))
	err := s.use("moe layer", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("moe layer", C.cgo_session_moe_layer(s.api(), h, C.uint32_t(layer), floatPtr(hidden), C.size_t(rows),
			int32Ptr(routeExperts), floatPtr(routeWeights), floatPtr(out), &message), message)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StageTime is the time spent in one stage of the forward pass.
type StageTime struct {
	Name string // "embedding", "attention", "router", "topk", "dispatch", "experts", "merge", "lm_head"
	Time time.Duration
}

// Stats are a session's counters since creation or ResetStats.
type Stats struct {
	Stages            []StageTime
	WeightBytesRead   uint64
	Tokens            uint64
	ForwardCalls      uint64
	NonFiniteRows     uint64
	ExpertActivations uint64
}

// Stats reads the session's counters.
func (s *Session) Stats() (Stats, error) {
	var out Stats
	err := s.use("stats", func(h *C.colibri_session) error {
		var st C.colibri_stats
		var message *C.char
		if err := errorFrom("stats", C.cgo_session_get_stats(s.api(), h, &st, &message), message); err != nil {
			return err
		}
		for i := 0; i < int(st.stage_count) && i < C.COLIBRI_STATS_MAX_STAGES; i++ {
			out.Stages = append(out.Stages, StageTime{Name: C.GoString(C.cgo_stage_name(s.api(), C.uint32_t(i))),
				Time: time.Duration(st.stage_ns[i])})
		}
		out.WeightBytesRead, out.Tokens = uint64(st.weight_bytes_read), uint64(st.tokens)
		out.ForwardCalls, out.NonFiniteRows = uint64(st.forward_calls), uint64(st.non_finite_rows)
		out.ExpertActivations = uint64(st.expert_activations)
		return nil
	})
	return out, err
}

// ResetStats zeroes the session's counters.
func (s *Session) ResetStats() error {
	return s.use("reset stats", func(h *C.colibri_session) error {
		var message *C.char
		return errorFrom("reset stats", C.cgo_session_reset_stats(s.api(), h, &message), message)
	})
}
