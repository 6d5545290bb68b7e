package colibri

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// EngineOptions configures NewEngine (colibri_engine_options). Zero fields take the library's
// defaults.
type EngineOptions struct {
	MaxSequences       int    // requests running at once (0: 8)
	ContextLength      int    // tokens per request, prompt + output (0: min(max_position_embeddings, 4096))
	StepTokens         int    // tokens per scheduler step (0: 256; at least MaxSequences)
	BlockTokens        int    // positions per KV block (0: 16)
	QueueCapacity      int    // requests that may wait for a slot (0: 64; use NoQueue for none)
	KVBudgetBytes      uint64 // the KV pool (0: MaxSequences whole contexts)
	DisablePrefixCache bool   // do not reuse cached prefix blocks of earlier requests
	// Threads, PinThreads, NonFinitePolicy, KVDType, ForceScalar, Seed (the default of requests
	// whose sampler seed is SeedFromSession), NUMAPolicy, NUMANode, MaxISA. The sizing fields
	// (ContextLength, MaxSequences, MaxBatchTokens, MaxLogitRows) are ignored.
	Session SessionOptions
}

// NoQueue as EngineOptions.QueueCapacity: no request waits; Submit is busy unless a slot is free.
const NoQueue = -1

// Engine serves many concurrent requests on one model with continuous batching
// (colibri_engine): every scheduler step runs one forward pass over all running requests, so
// each active expert is read once per step for all of them. Full KV blocks of finished
// requests stay cached: a request that repeats a cached prefix (the next chat turn) prefills
// only the rest. Submit, Stats and every Request method are safe for concurrent use.
type Engine struct {
	model  *Model
	mu     sync.RWMutex // read: calls using handle; write: Close
	handle *C.colibri_engine
}

// NewEngine creates an engine on the model and starts its scheduler thread.
func (m *Model) NewEngine(opts EngineOptions) (*Engine, error) {
	var eo C.colibri_engine_options
	var message *C.char
	if err := errorFrom("new engine", C.cgo_engine_options_init(m.lib.api, &eo, &message), message); err != nil {
		return nil, err
	}
	var bad error
	setIf := func(dst *C.uint32_t, what string, v int) {
		if v != 0 && bad == nil {
			*dst, bad = u32("new engine", what, v)
		}
	}
	setIf(&eo.max_sequences, "MaxSequences", opts.MaxSequences)
	setIf(&eo.context_length, "ContextLength", opts.ContextLength)
	setIf(&eo.step_tokens, "StepTokens", opts.StepTokens)
	setIf(&eo.block_tokens, "BlockTokens", opts.BlockTokens)
	if opts.QueueCapacity == NoQueue {
		eo.queue_capacity = 0
	} else {
		setIf(&eo.queue_capacity, "QueueCapacity", opts.QueueCapacity)
	}
	if opts.KVBudgetBytes != 0 {
		eo.kv_budget_bytes = C.uint64_t(opts.KVBudgetBytes)
	}
	if opts.DisablePrefixCache {
		eo.prefix_cache = 0
	}
	so, err := sessionOptionsFrom(m, "new engine", opts.Session)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.open || m.handle == nil {
		return nil, ErrClosed
	}
	var handle *C.colibri_engine
	message = nil
	if err := errorFrom("new engine", C.cgo_engine_create(m.lib.api, m.handle, &eo, &so, &handle, &message), message); err != nil {
		return nil, err
	}
	atomic.AddInt64(&m.sessions, 1) // the engine keeps the model's handle usable (tokenizing prompts)
	e := &Engine{model: m, handle: handle}
	runtime.SetFinalizer(e, (*Engine).Close)
	return e, nil
}

// Close stops the engine: unfinished requests end with FinishCancelled; their Request values
// stay readable and must still be closed. Closing twice is a no-op. Close waits for calls on
// the engine (Submit, Stats) to return.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.handle == nil {
		return nil
	}
	runtime.SetFinalizer(e, nil)
	C.cgo_engine_free(e.model.lib.api, e.handle)
	e.handle = nil
	m := e.model
	m.mu.Lock()
	atomic.AddInt64(&m.sessions, -1)
	m.releaseLocked()
	m.mu.Unlock()
	return nil
}

func (e *Engine) use(fn func(h *C.colibri_engine) error) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.handle == nil {
		return ErrClosed
	}
	err := fn(e.handle)
	runtime.KeepAlive(e)
	return err
}

// EngineStats are the engine's counters (colibri_engine_stats), as of the last step.
type EngineStats struct {
	QueueDepth, ActiveSequences                          int
	Submitted, RejectedBusy, Finished, Steps             uint64
	DecodeTokens, PrefillTokens, PrefixHitTokens         uint64
	Preemptions, MaxBatchSequences                       uint64
	BatchHistogram                                       [C.COLIBRI_ENGINE_BATCH_BUCKETS]uint64 // steps by requests per step: 1, 2, 3-4, 5-8, ..., >128
	KVBlockTokens                                        int
	KVBlocks, KVBlocksInUse, KVBlocksCached, KVEvictions uint64
}

// Stats reads the engine's counters.
func (e *Engine) Stats() (EngineStats, error) {
	var st C.colibri_engine_stats
	err := e.use(func(h *C.colibri_engine) error {
		var message *C.char
		return errorFrom("engine stats", C.cgo_engine_get_stats(e.model.lib.api, h, &st, &message), message)
	})
	if err != nil {
		return EngineStats{}, err
	}
	out := EngineStats{QueueDepth: int(st.queue_depth), ActiveSequences: int(st.active_sequences),
		Submitted: uint64(st.submitted_count), RejectedBusy: uint64(st.rejected_busy_count),
		Finished: uint64(st.finished_count), Steps: uint64(st.step_count), DecodeTokens: uint64(st.decode_token_count),
		PrefillTokens: uint64(st.prefill_token_count), PrefixHitTokens: uint64(st.prefix_hit_token_count),
		Preemptions: uint64(st.preemption_count), MaxBatchSequences: uint64(st.max_batch_sequences),
		KVBlockTokens: int(st.kv_block_tokens), KVBlocks: uint64(st.kv_block_count),
		KVBlocksInUse: uint64(st.kv_blocks_in_use), KVBlocksCached: uint64(st.kv_blocks_cached),
		KVEvictions: uint64(st.kv_eviction_count)}
	for i := range out.BatchHistogram {
		out.BatchHistogram[i] = uint64(st.batch_histogram[i])
	}
	return out, nil
}

// RequestOptions configures Submit. The zero value generates up to 256 tokens with the
// library's default sampler (the engine's seed), stopping at the model's EOS ids.
type RequestOptions struct {
	MaxTokens   int             // 0: 256
	IgnoreEOS   bool            // keep going past EOS tokens
	Sampler     *SamplerOptions // nil: the library's defaults
	EOSTokens   []int32         // nil or empty: the model's EOS ids
	StopStrings []string        // text that ends the output (not part of it)
	Timeout     time.Duration   // the request ends with FinishDeadline this long after Submit; 0: none
	// Logprobs records each sampled token's log-probability (Request.Logprobs); TopLogprobs
	// (0..MaxTopLogprobs) also the most likely tokens of each step, and implies Logprobs.
	Logprobs    bool
	TopLogprobs int
}

// MaxTopLogprobs is the most alternatives RequestOptions.TopLogprobs may ask for.
const MaxTopLogprobs = C.COLIBRI_MAX_TOP_LOGPROBS

// TokenLogprob is a token and its log-probability (natural log, <= 0) under the model's raw
// distribution: log_softmax of the logits before the sampler's penalties, temperature and
// truncation (vLLM's default "raw logprobs", OpenAI's logprobs).
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Request is one submitted generation. Its methods are safe for concurrent use: Cancel,
// Result and Tokens do not wait for a Next in progress (Next calls run one at a time).
type Request struct {
	lib    *Library
	mu     sync.RWMutex // read: calls using handle; write: Close
	next   sync.Mutex   // one Next at a time
	handle *C.colibri_request
	done   bool // guarded by next
}

func (r *Request) use(fn func(h *C.colibri_request) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.handle == nil {
		return ErrClosed
	}
	err := fn(r.handle)
	runtime.KeepAlive(r)
	return err
}

// Submit tokenizes prompt (with the tokenizer's special tokens) and queues it. A full queue
// is an *Error with Status StatusBusy (errors.Is(err, StatusBusy)), returned at once.
func (e *Engine) Submit(prompt string, opts RequestOptions) (*Request, error) {
	ids, err := e.model.tokenize(true, prompt, AddSpecial)
	if err != nil {
		return nil, err
	}
	return e.SubmitTokens(ids, opts)
}

// SubmitTokens queues a generation from token ids (see Model.Tokenize and Model.ChatRender).
func (e *Engine) SubmitTokens(prompt []int32, opts RequestOptions) (*Request, error) {
	return e.submit("submit", opts, func(h *C.colibri_engine, r *requestArgs, out **C.colibri_request, message **C.char) C.int32_t {
		status := C.cgo_request_submit(e.model.lib.api, h, int32Ptr(prompt), C.size_t(len(prompt)), &r.args,
			int32Ptr(r.g.eos), C.size_t(len(r.g.eos)), r.g.stops.array, C.size_t(r.g.stops.n), out, message)
		runtime.KeepAlive(prompt)
		return status
	})
}

// SubmitChat renders messages with the model's chat template (chat as for Model.ChatRender),
// tokenizes them as the template expects (special-token text parsed, nothing added) and queues
// the generation: the same request as ChatRender + Tokenize(ParseSpecial) + SubmitTokens, in one
// call. Send the whole history each turn: the cached prefix is not prefilled again.
func (e *Engine) SubmitChat(messages []ChatMessage, chat ChatOptions, opts RequestOptions) (*Request, error) {
	c := newChatArgs(messages, chat)
	defer c.free()
	return e.submit("submit chat", opts, func(h *C.colibri_engine, r *requestArgs, out **C.colibri_request, message **C.char) C.int32_t {
		return C.cgo_request_submit_chat(e.model.lib.api, h, c.roles.array, c.contents.array, c.count, c.addPrompt,
			c.template, c.names.array, c.values.array, C.size_t(c.names.n), &r.args, int32Ptr(r.g.eos),
			C.size_t(len(r.g.eos)), r.g.stops.array, C.size_t(r.g.stops.n), out, message)
	})
}

// requestArgs are RequestOptions in C form: the pointer-free struct and the arrays.
type requestArgs struct {
	args C.cgo_request_args
	g    *generateArgs
}

// submit checks opts, converts them and runs call (a submit function of the shim) on the engine.
func (e *Engine) submit(op string, opts RequestOptions, call func(*C.colibri_engine, *requestArgs, **C.colibri_request, **C.char) C.int32_t) (*Request, error) {
	g, err := newGenerateArgs(op, GenerateOptions{MaxTokens: opts.MaxTokens, IgnoreEOS: opts.IgnoreEOS,
		Sampler: opts.Sampler, EOSTokens: opts.EOSTokens, StopStrings: opts.StopStrings})
	if err != nil {
		return nil, err
	}
	defer g.free()
	if opts.Timeout < 0 {
		return nil, &Error{Op: op, Status: StatusInvalidArgument, Message: "Timeout must not be negative"}
	}
	if opts.TopLogprobs < 0 || opts.TopLogprobs > MaxTopLogprobs {
		return nil, &Error{Op: op, Status: StatusInvalidArgument,
			Message: fmt.Sprintf("TopLogprobs %d is out of range (0..%d)", opts.TopLogprobs, MaxTopLogprobs)}
	}
	r := &requestArgs{g: g, args: C.cgo_request_args{max_tokens: g.args.max_tokens, ignore_eos: g.args.ignore_eos,
		has_sampler: g.args.has_sampler, has_eos: g.args.has_eos, timeout_ns: C.uint64_t(opts.Timeout), sampler: g.args.sampler,
		top_logprobs: C.uint32_t(opts.TopLogprobs)}}
	if opts.Logprobs {
		r.args.logprobs = 1
	}
	var handle *C.colibri_request
	err = e.use(func(h *C.colibri_engine) error {
		var message *C.char
		return errorFrom(op, call(h, r, &handle, &message), message)
	})
	if err != nil {
		return nil, err
	}
	req := &Request{lib: e.model.lib, handle: handle}
	runtime.SetFinalizer(req, (*Request).Close)
	return req, nil
}

// requestPoll is how long one native wait of Next lasts before ctx is looked at again.
const requestPoll = 20 * time.Millisecond

// Next waits for the next piece of text (complete UTF-8). ok is false when the request has
// ended (err nil) or failed (err says why). When ctx is done first the request is cancelled
// and ctx.Err() returned; the pieces already produced can still be read with another ctx.
func (r *Request) Next(ctx context.Context) (piece string, ok bool, err error) {
	r.next.Lock()
	defer r.next.Unlock()
	for !r.done && !ok && err == nil {
		if cerr := ctx.Err(); cerr != nil {
			if cancelErr := r.Cancel(); cancelErr != nil {
				return "", false, cancelErr
			}
			return "", false, cerr
		}
		wait := requestPoll
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) < wait {
			wait = time.Until(deadline)
			if wait < 0 {
				wait = 0
			}
		}
		// One bounded native wait per turn, so that Close is never held up for longer.
		err = r.use(func(h *C.colibri_request) error {
			var p *C.char
			var size C.size_t
			var message *C.char
			status := C.cgo_request_next(r.lib.api, h, C.int64_t(wait), &p, &size, &message)
			switch {
			case status == C.COLIBRI_PENDING:
			case status == C.COLIBRI_DONE:
				r.done = true
			case status < 0:
				r.done = true
				return errorFrom("request next", status, message)
			default:
				piece, ok = C.GoStringN(p, C.int(size)), true
			}
			return nil
		})
	}
	return piece, ok, err
}

// Piece is one element of Pieces: a piece of text, or the error that ended the request.
type Piece struct {
	Text string
	Err  error
}

// Pieces streams the request's text on a channel that is closed when the request ends. A
// failure (or ctx ending, which cancels the request) arrives as a last Piece with Err set. The
// goroutine behind it exits when the request ends; read the channel to the end.
func (r *Request) Pieces(ctx context.Context) <-chan Piece {
	out := make(chan Piece, 16)
	go func() {
		defer close(out)
		for {
			text, ok, err := r.Next(ctx)
			if err != nil {
				out <- Piece{Err: err}
				return
			}
			if !ok {
				return
			}
			out <- Piece{Text: text}
		}
	}()
	return out
}

// Cancel ends the request at the engine's next step (queued, prefilling or decoding). Safe
// from any goroutine, any time; cancelling twice is fine.
func (r *Request) Cancel() error {
	return r.use(func(h *C.colibri_request) error {
		var message *C.char
		return errorFrom("cancel", C.cgo_request_cancel(r.lib.api, h, &message), message)
	})
}

// RequestResult is a request's progress (colibri_request_result).
type RequestResult struct {
	FinishReason     FinishReason // FinishNone while it runs
	PromptTokens     int
	GeneratedTokens  int // sampled tokens, including a final EOS
	PrefixHitTokens  int // prompt tokens taken from the prefix cache
	Preemptions      int // times it gave its KV blocks back and was recomputed
	QueueTime        time.Duration
	TimeToFirstToken time.Duration
	DecodeTime       time.Duration
}

// Result reads the request's progress.
func (r *Request) Result() (RequestResult, error) {
	var res C.colibri_request_result
	err := r.use(func(h *C.colibri_request) error {
		var message *C.char
		return errorFrom("request result", C.cgo_request_get_result(r.lib.api, h, &res, &message), message)
	})
	if err != nil {
		return RequestResult{}, err
	}
	return RequestResult{FinishReason: FinishReason(res.finish_reason), PromptTokens: int(res.prompt_token_count),
		GeneratedTokens: int(res.generated_token_count), PrefixHitTokens: int(res.prefix_hit_token_count),
		Preemptions: int(res.preemption_count), QueueTime: time.Duration(res.queue_ns),
		TimeToFirstToken: time.Duration(res.time_to_first_token_ns), DecodeTime: time.Duration(res.decode_ns)}, nil
}

// Tokens are the ids generated so far (including a final EOS).
func (r *Request) Tokens() ([]int32, error) {
	out := make([]int32, 64)
	err := r.use(func(h *C.colibri_request) error {
		for {
			var count C.size_t
			var message *C.char
			status := C.cgo_request_tokens(r.lib.api, h, int32Ptr(out), C.size_t(len(out)), &count, &message)
			if status == C.COLIBRI_ERROR_BUFFER_TOO_SMALL {
				C.free(unsafe.Pointer(message))
				out = make([]int32, int(count)+16)
				continue
			}
			if err := errorFrom("request tokens", status, message); err != nil {
				return err
			}
			out = out[:count]
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Logprobs returns generated token index's log-probability and the TopLogprobs most likely
// tokens of that step, most likely first (index counts from 0, below len(Tokens())). A request
// submitted without Logprobs or TopLogprobs gives an *Error with StatusBadState.
func (r *Request) Logprobs(index int) (chosen TokenLogprob, top []TokenLogprob, err error) {
	if index < 0 {
		return chosen, nil, &Error{Op: "request logprobs", Status: StatusInvalidArgument, Message: "index must not be negative"}
	}
	var c C.colibri_token_logprob
	var buf [MaxTopLogprobs]C.colibri_token_logprob
	var count C.size_t
	err = r.use(func(h *C.colibri_request) error {
		var message *C.char
		return errorFrom("request logprobs", C.cgo_request_logprobs(r.lib.api, h, C.size_t(index), &c, &buf[0],
			C.size_t(len(buf)), &count, &message), message)
	})
	if err != nil {
		return chosen, nil, err
	}
	top = make([]TokenLogprob, int(count))
	for i := range top {
		top[i] = TokenLogprob{Token: int32(buf[i].token), Logprob: float32(buf[i].logprob)}
	}
	return TokenLogprob{Token: int32(c.token), Logprob: float32(c.logprob)}, top, nil
}

// Close cancels the request if it is unfinished and frees it. Closing twice is a no-op. A Next
// in progress returns ErrClosed after its current wait (at most 20 ms).
func (r *Request) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handle == nil {
		return nil
	}
	runtime.SetFinalizer(r, nil)
	C.cgo_request_free(r.lib.api, r.handle)
	r.handle = nil
	return nil
}
