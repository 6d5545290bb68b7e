package colibri

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"math"
	"runtime"
	"runtime/cgo"
	"time"
	"unsafe"
)

// SeedFromSession as SamplerOptions.Seed uses the session's seed (SessionOptions.Seed).
const SeedFromSession uint64 = math.MaxUint64

// SamplerOptions is the sampling chain: penalties -> temperature -> top-k -> top-p -> min-p ->
// seeded draw. Start from DefaultSamplerOptions or GreedySampler: every field is used as is.
type SamplerOptions struct {
	Temperature       float32 // >= 0; 0 = greedy (argmax, ties to the lower id)
	TopK              int     // 0 = off
	TopP              float32 // (0, 1]; 1 = off
	MinP              float32 // [0, 1]; 0 = off
	RepetitionPenalty float32 // > 0; 1 = off
	PresencePenalty   float32
	FrequencyPenalty  float32
	PenaltyLastN      int    // tokens of history the penalties see; 0 = off
	Seed              uint64 // SeedFromSession: the session's seed
}

// DefaultSamplerOptions are the library's defaults (colibri_sampler_options_init of ABI 1).
func DefaultSamplerOptions() SamplerOptions {
	return SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1,
		PenaltyLastN: 64, Seed: SeedFromSession}
}

// GreedySampler picks the most likely token at every step.
func GreedySampler() SamplerOptions {
	return SamplerOptions{Temperature: 0, TopK: 0, TopP: 1, MinP: 0, RepetitionPenalty: 1, Seed: SeedFromSession}
}

// GenerateOptions configures Generate and Stream. The zero value generates up to 256 tokens in
// sequence 0 with the library's default sampler, stopping at the model's EOS ids.
type GenerateOptions struct {
	MaxTokens   int             // 0: 256
	Sequence    int             // session sequence slot (reset first)
	IgnoreEOS   bool            // keep going past EOS tokens
	Sampler     *SamplerOptions // nil: the library's defaults
	EOSTokens   []int32         // nil or empty: the model's EOS ids (IgnoreEOS: stop at none)
	StopStrings []string        // text that ends generation (not part of the output)
}

// FinishReason says why a generation ended.
type FinishReason uint32

// Finish reasons.
const (
	FinishNone      FinishReason = C.COLIBRI_FINISH_NONE // still running
	FinishLength    FinishReason = C.COLIBRI_FINISH_LENGTH
	FinishEOS       FinishReason = C.COLIBRI_FINISH_EOS
	FinishStop      FinishReason = C.COLIBRI_FINISH_STOP
	FinishCancelled FinishReason = C.COLIBRI_FINISH_CANCELLED
	FinishDeadline  FinishReason = C.COLIBRI_FINISH_DEADLINE // an engine request's Timeout passed
	FinishError     FinishReason = C.COLIBRI_FINISH_ERROR    // an engine request failed
)

func (f FinishReason) String() string {
	switch f {
	case FinishNone:
		return "none"
	case FinishLength:
		return "length"
	case FinishEOS:
		return "eos"
	case FinishStop:
		return "stop"
	case FinishCancelled:
		return "cancelled"
	case FinishDeadline:
		return "deadline"
	case FinishError:
		return "error"
	}
	return "unknown"
}

// Result describes a finished (or running) generation.
type Result struct {
	FinishReason    FinishReason
	PromptTokens    int
	GeneratedTokens int // sampled tokens, including a final EOS
	PrefillTime     time.Duration
	DecodeTime      time.Duration
}

func resultFrom(r *C.colibri_generate_result) Result {
	return Result{FinishReason: FinishReason(r.finish_reason), PromptTokens: int(r.prompt_token_count),
		GeneratedTokens: int(r.generated_token_count), PrefillTime: time.Duration(r.prefill_ns),
		DecodeTime: time.Duration(r.decode_ns)}
}

// generateArgs holds the C view of GenerateOptions (free must be called).
type generateArgs struct {
	args  C.cgo_generate_args
	eos   []int32
	stops cStrings
}

func newGenerateArgs(op string, o GenerateOptions) (*generateArgs, error) {
	g := &generateArgs{eos: o.EOSTokens}
	var err error
	convert := func(dst *C.uint32_t, what string, v int) {
		if err == nil {
			*dst, err = u32(op, what, v)
		}
	}
	convert(&g.args.max_tokens, "MaxTokens", o.MaxTokens)
	convert(&g.args.sequence, "Sequence", o.Sequence)
	if o.IgnoreEOS {
		g.args.ignore_eos = 1
	}
	if o.EOSTokens != nil {
		g.args.has_eos = 1
	}
	if s := o.Sampler; s != nil {
		g.args.has_sampler = 1
		c := &g.args.sampler
		c.struct_size = C.uint32_t(unsafe.Sizeof(*c))
		c.temperature, c.top_p, c.min_p = C.float(s.Temperature), C.float(s.TopP), C.float(s.MinP)
		convert(&c.top_k, "Sampler.TopK", s.TopK)
		c.repetition_penalty, c.presence_penalty = C.float(s.RepetitionPenalty), C.float(s.PresencePenalty)
		c.frequency_penalty = C.float(s.FrequencyPenalty)
		convert(&c.penalty_last_n, "Sampler.PenaltyLastN", s.PenaltyLastN)
		c.seed = C.uint64_t(s.Seed)
	}
	if err != nil {
		return nil, err
	}
	g.stops = newCStrings(o.StopStrings)
	return g, nil
}

func (g *generateArgs) free() { g.stops.free() }

// pieceState is what the C callback reaches through its cgo handle.
type pieceState struct {
	ctx      context.Context
	fn       func(string) error
	err      error // why the callback stopped the generation
	exited   bool  // fn did not return: it panicked (panicVal) or called runtime.Goexit
	panicVal interface{}
}

//export colibriGoPiece
func colibriGoPiece(handle C.uintptr_t, piece *C.char, size C.size_t) C.int32_t {
	st := cgo.Handle(handle).Value().(*pieceState)
	if err := st.ctx.Err(); err != nil {
		st.err = err
		return 1
	}
	if st.fn == nil {
		return 0
	}
	text := C.GoStringN(piece, C.int(size))
	var err error
	if st.exited, st.panicVal = callIsolated(func() { err = st.fn(text) }); st.exited {
		return 1
	}
	if err != nil {
		st.err = err
		return 1
	}
	return 0
}

// Generate tokenizes prompt (with the tokenizer's special tokens, e.g. BOS) and generates from
// it, calling fn with each piece of text (complete UTF-8; fn may be nil). It stops early when
// ctx is done or fn returns an error: the result's FinishReason is then FinishCancelled and the
// error is ctx.Err() or fn's error. ctx is checked before the prompt is processed and between
// pieces (a long prefill is not interrupted). fn must not use this session; it runs on a
// goroutine of its own while Generate waits, so that nothing it does unwinds through the C
// library: a panic in fn stops the generation and is re-raised by Generate, and
// runtime.Goexit in fn (t.FailNow), or panic(nil), stops it and ends Generate's goroutine.
func (s *Session) Generate(ctx context.Context, prompt string, opts GenerateOptions, fn func(piece string) error) (Result, error) {
	ids, err := s.model.tokenize(true, prompt, AddSpecial)
	if err != nil {
		return Result{}, err
	}
	return s.GenerateTokens(ctx, ids, opts, fn)
}

// GenerateTokens is Generate from token ids (see Model.Tokenize and Model.ChatRender).
func (s *Session) GenerateTokens(ctx context.Context, prompt []int32, opts GenerateOptions, fn func(piece string) error) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{FinishReason: FinishCancelled}, err
	}
	g, err := newGenerateArgs("generate", opts)
	if err != nil {
		return Result{}, err
	}
	defer g.free()
	st := &pieceState{ctx: ctx, fn: fn}
	handle := cgo.NewHandle(st)
	defer handle.Delete()
	var result C.colibri_generate_result
	err = s.use("generate", func(h *C.colibri_session) error {
		var message *C.char
		status := C.cgo_generate(s.api(), h, int32Ptr(prompt), C.size_t(len(prompt)), &g.args, int32Ptr(g.eos),
			C.size_t(len(g.eos)), g.stops.array, C.size_t(g.stops.n), C.uintptr_t(handle), &result, &message)
		return errorFrom("generate", status, message)
	})
	runtime.KeepAlive(prompt)
	if st.exited {
		if st.panicVal != nil {
			panic(st.panicVal)
		}
		runtime.Goexit() // fn called runtime.Goexit (t.FailNow), or panic(nil): end this goroutine too
	}
	if err != nil {
		return resultFrom(&result), err
	}
	return resultFrom(&result), st.err
}

// Stream is the pull form of Generate: Next returns one piece at a time. The session is busy
// (its other calls fail) until the stream is closed.
type Stream struct {
	session *Session
	handle  *C.colibri_stream
	done    bool
}

// Stream tokenizes prompt (with special tokens) and starts a generation; the prompt is
// processed now.
func (s *Session) Stream(prompt string, opts GenerateOptions) (*Stream, error) {
	ids, err := s.model.tokenize(true, prompt, AddSpecial)
	if err != nil {
		return nil, err
	}
	return s.StreamTokens(ids, opts)
}

// StreamTokens is Stream from token ids.
func (s *Session) StreamTokens(prompt []int32, opts GenerateOptions) (*Stream, error) {
	g, err := newGenerateArgs("stream", opts)
	if err != nil {
		return nil, err
	}
	defer g.free()
	var handle *C.colibri_stream
	err = s.use("stream", func(h *C.colibri_session) error {
		var message *C.char
		status := C.cgo_stream_open(s.api(), h, int32Ptr(prompt), C.size_t(len(prompt)), &g.args, int32Ptr(g.eos),
			C.size_t(len(g.eos)), g.stops.array, C.size_t(g.stops.n), &handle, &message)
		return errorFrom("stream", status, message)
	})
	runtime.KeepAlive(prompt)
	if err != nil {
		return nil, err
	}
	st := &Stream{session: s, handle: handle}
	runtime.SetFinalizer(st, (*Stream).Close)
	return st, nil
}

// useStream runs fn under the session's lock (the stream shares its session's thread rules).
func (st *Stream) use(op string, fn func(h *C.colibri_stream) error) error {
	s := st.session
	if !s.mu.TryLock() {
		return busy(op)
	}
	defer s.mu.Unlock()
	if st.handle == nil {
		return ErrClosed
	}
	err := fn(st.handle)
	runtime.KeepAlive(st)
	return err
}

// Next produces the next piece of text. ok is false when the generation has ended (then err
// is nil) or failed (err says why).
func (st *Stream) Next() (piece string, ok bool, err error) {
	err = st.use("stream next", func(h *C.colibri_stream) error {
		if st.done {
			return nil
		}
		var p *C.char
		var size C.size_t
		var message *C.char
		status := C.cgo_stream_next(st.session.api(), h, &p, &size, &message)
		if status == C.COLIBRI_DONE {
			st.done = true
			return nil
		}
		if err := errorFrom("stream next", status, message); err != nil {
			st.done = true
			return err
		}
		piece, ok = C.GoStringN(p, C.int(size)), true
		return nil
	})
	return piece, ok, err
}

// Tokens are the ids generated so far (including a final EOS).
func (st *Stream) Tokens() ([]int32, error) {
	var out []int32
	err := st.use("stream tokens", func(h *C.colibri_stream) error {
		out = make([]int32, 64)
		for {
			var count C.size_t
			var message *C.char
			status := C.cgo_stream_tokens(st.session.api(), h, int32Ptr(out), C.size_t(len(out)), &count, &message)
			if status == C.COLIBRI_ERROR_BUFFER_TOO_SMALL {
				C.free(unsafe.Pointer(message))
				out = make([]int32, int(count)+1)
				continue
			}
			if err := errorFrom("stream tokens", status, message); err != nil {
				return err
			}
			out = out[:count]
			return nil
		}
	})
	return out, err
}

// Result is the stream's progress (FinishReason is FinishNone while it runs).
func (st *Stream) Result() (Result, error) {
	var r C.colibri_generate_result
	err := st.use("stream result", func(h *C.colibri_stream) error {
		var message *C.char
		return errorFrom("stream result", C.cgo_stream_get_result(st.session.api(), h, &r, &message), message)
	})
	return resultFrom(&r), err
}

// Close ends the stream (stopping early is fine) and frees the session from it. Closing twice
// is a no-op.
func (st *Stream) Close() error {
	s := st.session
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.handle == nil {
		return nil
	}
	runtime.SetFinalizer(st, nil)
	C.cgo_stream_close(s.api(), st.handle)
	st.handle = nil
	return nil
}
