package colibri

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Option configures Open: which library to use and the colibri_model_options fields.
type Option func(*openConfig)

type openConfig struct {
	libraryPath string
	library     *Library
	set         []func(*C.colibri_model_options)
	err         error // the first option with a value out of range
}

// withCount is withField for a uint32_t field from an int, refused (by Open) when it would wrap.
func withCount(what string, v int, f func(*C.colibri_model_options, C.uint32_t)) Option {
	return func(c *openConfig) {
		n, err := u32("open", what, v)
		if err != nil {
			if c.err == nil {
				c.err = err
			}
			return
		}
		c.set = append(c.set, func(o *C.colibri_model_options) { f(o, n) })
	}
}

// WithLibrary loads libcolibri from path instead of DefaultLibrary.
func WithLibrary(path string) Option { return func(c *openConfig) { c.libraryPath = path } }

// WithLoadedLibrary uses a library returned by Load.
func WithLoadedLibrary(lib *Library) Option { return func(c *openConfig) { c.library = lib } }

func withField(f func(*C.colibri_model_options)) Option {
	return func(c *openConfig) { c.set = append(c.set, f) }
}

// WithThreads sets the threads used to verify the image and the default for sessions
// (0 = every CPU the process may run on).
func WithThreads(n int) Option {
	return withCount("WithThreads", n, func(o *C.colibri_model_options, v C.uint32_t) { o.threads = v })
}

// WithVerifyChecksums checks every tensor's checksum at open (reads every byte).
func WithVerifyChecksums() Option {
	return withField(func(o *C.colibri_model_options) { o.verify_checksums = 1 })
}

// WithPopulate maps the image with MAP_POPULATE (every page faulted in at open).
func WithPopulate() Option { return withField(func(o *C.colibri_model_options) { o.populate = 1 }) }

// WithLockMemory mlock-s the whole image (a refusal is a StatusIO error).
func WithLockMemory() Option {
	return withField(func(o *C.colibri_model_options) { o.lock_memory = 1 })
}

// WithWarmUp reads every weight page once at open.
func WithWarmUp() Option { return withField(func(o *C.colibri_model_options) { o.warm_up = 1 }) }

// WithLoadIntoMemory copies the image into private huge-page memory at open and serves the
// weights from that copy instead of the file mapping: a few percent faster decode, for a read
// of the whole file at open and the image's size in memory no other process shares.
func WithLoadIntoMemory() Option {
	return withField(func(o *C.colibri_model_options) { o.load_into_memory = 1 })
}

// Advice is a COLIBRI_ADVICE_* madvise hint for the mapped image.
type Advice uint32

// Paging advice values.
const (
	AdviceNormal     Advice = C.COLIBRI_ADVICE_NORMAL
	AdviceSequential Advice = C.COLIBRI_ADVICE_SEQUENTIAL
	AdviceWillNeed   Advice = C.COLIBRI_ADVICE_WILLNEED
	AdviceRandom     Advice = C.COLIBRI_ADVICE_RANDOM
	AdviceHugePage   Advice = C.COLIBRI_ADVICE_HUGEPAGE
)

// WithAdvice sets how the kernel should page the mapped image.
func WithAdvice(a Advice) Option {
	return withField(func(o *C.colibri_model_options) { o.advice = C.uint32_t(a) })
}

// Policy values shared by pinning (PinOff/PinOn), the non-finite guard and NUMA placement;
// 0 (the *Default constants) always means "the default": for the model the library's, for a
// session the model's.
const (
	PinDefault = C.COLIBRI_PIN_DEFAULT
	PinOff     = C.COLIBRI_PIN_OFF
	PinOn      = C.COLIBRI_PIN_ON

	NonFiniteDefault = C.COLIBRI_NON_FINITE_DEFAULT
	NonFiniteError   = C.COLIBRI_NON_FINITE_ERROR
	NonFiniteZero    = C.COLIBRI_NON_FINITE_ZERO

	NUMADefault    = C.COLIBRI_NUMA_DEFAULT
	NUMAOff        = C.COLIBRI_NUMA_OFF
	NUMABind       = C.COLIBRI_NUMA_BIND
	NUMAInterleave = C.COLIBRI_NUMA_INTERLEAVE
)

// WithPinThreads sets whether sessions pin their worker threads to CPUs by default.
func WithPinThreads(pin bool) Option {
	return withField(func(o *C.colibri_model_options) {
		o.pin_threads = C.COLIBRI_PIN_OFF
		if pin {
			o.pin_threads = C.COLIBRI_PIN_ON
		}
	})
}

// WithNonFinitePolicy sets what happens when NaN/Inf comes out of a guarded stage of
// the forward pass (NonFiniteError or NonFiniteZero); also the default for sessions.
// A non-finite final norm or logit row is always an error (StatusNonFinite, the
// message naming the stage and position): no token is generated from it.
func WithNonFinitePolicy(policy uint32) Option {
	return withField(func(o *C.colibri_model_options) { o.non_finite_policy = C.uint32_t(policy) })
}

// WithNUMA sets the NUMA placement of the weights (NUMAOff, NUMABind on node, NUMAInterleave);
// also the default for sessions.
func WithNUMA(policy uint32, node int) Option {
	return withCount("WithNUMA node", node, func(o *C.colibri_model_options, v C.uint32_t) {
		o.numa_policy = C.uint32_t(policy)
		o.numa_node = v
	})
}

// Model is an opened image: weights, hyper-parameters and tokenizer. It is immutable and safe
// for concurrent use.
type Model struct {
	lib  *Library
	info ModelInfo

	mu       sync.RWMutex // read: calls using handle; write: closing
	handle   *C.colibri_model
	open     bool  // the user's reference (Close not called yet)
	sessions int64 // open sessions (atomic; changed under the read lock): they keep handle usable after Close
}

// Open opens a .colibri image (colibri_model_open). The library is DefaultLibrary unless
// WithLibrary or WithLoadedLibrary says otherwise.
func Open(path string, opts ...Option) (*Model, error) {
	var cfg openConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	lib := cfg.library
	if lib == nil {
		var err error
		if lib, err = Load(cfg.libraryPath); err != nil {
			return nil, err
		}
	}
	var options C.colibri_model_options
	var message *C.char
	if err := errorFrom("open", C.cgo_model_options_init(lib.api, &options, &message), message); err != nil {
		return nil, err
	}
	for _, set := range cfg.set {
		set(&options)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var handle *C.colibri_model
	message = nil
	if err := errorFrom("open", C.cgo_model_open(lib.api, cpath, &options, &handle, &message), message); err != nil {
		return nil, err
	}
	m := &Model{lib: lib, handle: handle, open: true}
	var info C.colibri_model_info
	message = nil
	if err := errorFrom("model info", C.cgo_model_get_info(lib.api, handle, &info, &message), message); err != nil {
		C.cgo_model_close(lib.api, handle)
		return nil, err
	}
	m.info = modelInfoFrom(&info)
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// Close releases the model. Open sessions keep it usable; its memory is released when the last
// of them is closed. Closing twice is a no-op.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.open {
		return nil
	}
	m.open = false
	runtime.SetFinalizer(m, nil)
	m.releaseLocked()
	return nil
}

func (m *Model) releaseLocked() {
	if !m.open && atomic.LoadInt64(&m.sessions) == 0 && m.handle != nil {
		C.cgo_model_close(m.lib.api, m.handle)
		m.handle = nil
	}
}

// use runs fn with the model's handle under the read lock; public calls (internal=false)
// fail with ErrClosed after Close, sessions' internal calls work until the handle is released.
func (m *Model) use(internal bool, fn func(h *C.colibri_model) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.handle == nil || (!internal && !m.open) {
		return ErrClosed
	}
	err := fn(m.handle)
	runtime.KeepAlive(m)
	return err
}

// Library is the library the model was opened with.
func (m *Model) Library() *Library { return m.lib }

// ModelInfo describes a model (colibri_model_info).
type ModelInfo struct {
	FormatVersion        uint32
	Path                 string
	Family               string // "mixtral", "qwen2_moe", "qwen3_moe", "olmoe"
	Architecture         string // e.g. "MixtralForCausalLM"
	FileSizeBytes        uint64
	ParameterCount       uint64
	ActiveParameterCount uint64
	ActiveWeightBytes    uint64 // weight bytes one decode token reads

	VocabSize             int
	HiddenSize            int
	LayerCount            int
	MoELayerCount         int
	HeadCount             int
	KVHeadCount           int
	HeadDim               int
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	ClipQKV               float64
	TieWordEmbeddings     bool
	AttentionBias         bool
	QKNorm                string // "none", "per_head", "full"

	ExpertCount         int
	ExpertFFNSize       int
	TopK                int
	RouterScore         string
	NormTopKProb        bool
	SharedExpertGate    bool
	SharedExpertFFNSize int
	DenseFFNSize        int
	// Sigmoid routers (RouterScore "sigmoid": GLM-4.5, MiniMax-M2) and partial RoPE.
	RotaryDim           int // leading values of each head RoPE rotates (HeadDim unless partial)
	RouterSelectBias    bool
	ExpertGroupCount    int // 1 = no group limit
	ExpertGroupTop      int
	RoutedScalingFactor float64
	TopKNormEpsilon     float64
	RopeScaling         string // "none" or "yarn"
	RopeFactor          float64
	RopeAttentionFactor float64
	// gpt-oss's attention and experts (0 / "silu" for the other families).
	SlidingWindow       int // positions a sliding-window layer attends to (0: none)
	SlidingLayerCount   int
	AttentionSinks      bool
	AttentionOutputBias bool
	RouterBias          bool
	ExpertBias          bool
	ExpertActivation    string // "silu" or "swiglu_clamped"
	SwiGLULimit         float64
	SwiGLUAlpha         float64
	// Multi-head latent attention (DeepSeek-V3, Kimi-K2; "gqa" and zero ranks elsewhere): with
	// "mla", HeadDim is the rotated part of a query head and the cache keeps KVLoRARank +
	// HeadDim values per position and layer.
	Attention            string // "gqa" or "mla"
	QLoRARank            int    // 0: a direct query projection
	KVLoRARank           int
	QKNopeHeadDim        int
	VHeadDim             int
	RopeInterleave       bool
	AttentionScale       float64 // the softmax scale of the scores
	KVCacheBytesPerToken uint64  // one position of an f32 KV cache, all layers (f16: half)
	MTPLayerCount        int     // multi-token-prediction layers of the checkpoint (kept as mtp.<j>.* tensors, never run)

	WeightDType     DType
	WeightGroupSize int
	TensorCount     int

	BOSTokenID      int32 // -1 = none
	EOSTokenID      int32
	PadTokenID      int32
	EOSTokenCount   int
	AddBOSToken     bool
	AddEOSToken     bool
	HasTokenizer    bool
	HasChatTemplate bool
	NUMAReport      string
}

func modelInfoFrom(i *C.colibri_model_info) ModelInfo {
	return ModelInfo{
		FormatVersion: uint32(i.format_version), Path: C.GoString(i.path), Family: C.GoString(i.family),
		Architecture: C.GoString(i.architecture), FileSizeBytes: uint64(i.file_size_bytes),
		ParameterCount: uint64(i.parameter_count), ActiveParameterCount: uint64(i.active_parameter_count),
		ActiveWeightBytes: uint64(i.active_weight_bytes),
		VocabSize:         int(i.vocab_size), HiddenSize: int(i.hidden_size), LayerCount: int(i.layer_count),
		MoELayerCount: int(i.moe_layer_count), HeadCount: int(i.head_count), KVHeadCount: int(i.kv_head_count),
		HeadDim: int(i.head_dim), MaxPositionEmbeddings: int(i.max_position_embeddings),
		RMSNormEps: float64(i.rms_norm_eps), RopeTheta: float64(i.rope_theta), ClipQKV: float64(i.clip_qkv),
		TieWordEmbeddings: i.tie_word_embeddings != 0, AttentionBias: i.attention_bias != 0,
		QKNorm:      C.GoString(i.qk_norm),
		ExpertCount: int(i.expert_count), ExpertFFNSize: int(i.expert_ffn_size), TopK: int(i.top_k),
		RouterScore: C.GoString(i.router_score), NormTopKProb: i.norm_topk_prob != 0,
		SharedExpertGate: i.shared_expert_gate != 0, SharedExpertFFNSize: int(i.shared_expert_ffn_size),
		DenseFFNSize: int(i.dense_ffn_size),
		RotaryDim:    int(i.rotary_dim), RouterSelectBias: i.router_select_bias != 0,
		ExpertGroupCount: int(i.expert_group_count), ExpertGroupTop: int(i.expert_group_top),
		RoutedScalingFactor: float64(i.routed_scaling_factor), TopKNormEpsilon: float64(i.topk_norm_epsilon),
		RopeScaling: C.GoString(i.rope_scaling), RopeFactor: float64(i.rope_factor),
		RopeAttentionFactor: float64(i.rope_attention_factor),
		SlidingWindow:       int(i.sliding_window), SlidingLayerCount: int(i.sliding_layer_count),
		AttentionSinks: i.attention_sinks != 0, AttentionOutputBias: i.attention_output_bias != 0,
		RouterBias: i.router_bias != 0, ExpertBias: i.expert_bias != 0,
		ExpertActivation: C.GoString(i.expert_activation),
		SwiGLULimit:      float64(i.swiglu_limit), SwiGLUAlpha: float64(i.swiglu_alpha),
		Attention: C.GoString(i.attention), QLoRARank: int(i.q_lora_rank), KVLoRARank: int(i.kv_lora_rank),
		QKNopeHeadDim: int(i.qk_nope_head_dim), VHeadDim: int(i.v_head_dim), RopeInterleave: i.rope_interleave != 0,
		AttentionScale: float64(i.attention_scale), KVCacheBytesPerToken: uint64(i.kv_cache_bytes_per_token),
		MTPLayerCount: int(i.mtp_layer_count),
		WeightDType:   DType(i.weight_dtype), WeightGroupSize: int(i.weight_group_size),
		TensorCount: int(i.tensor_count),
		BOSTokenID:  int32(i.bos_token_id), EOSTokenID: int32(i.eos_token_id), PadTokenID: int32(i.pad_token_id),
		EOSTokenCount: int(i.eos_token_count), AddBOSToken: i.add_bos_token != 0,
		AddEOSToken: i.add_eos_token != 0, HasTokenizer: i.has_tokenizer != 0,
		HasChatTemplate: i.has_chat_template != 0, NUMAReport: C.GoString(i.numa_report),
	}
}

// Info describes the model (read once at Open).
func (m *Model) Info() ModelInfo { return m.info }

// EOSTokens are the model's end-of-sequence ids (generation stops at any of them).
func (m *Model) EOSTokens() ([]int32, error) {
	var ids []int32
	err := m.use(false, func(h *C.colibri_model) error {
		ids = make([]int32, m.info.EOSTokenCount+1)
		for {
			var count C.size_t
			var message *C.char
			status := C.cgo_model_eos_tokens(m.lib.api, h, (*C.int32_t)(unsafe.Pointer(&ids[0])),
				C.size_t(len(ids)), &count, &message)
			if status == C.COLIBRI_ERROR_BUFFER_TOO_SMALL {
				C.free(unsafe.Pointer(message))
				ids = make([]int32, int(count)+1)
				continue
			}
			if err := errorFrom("eos tokens", status, message); err != nil {
				return err
			}
			ids = ids[:count]
			return nil
		}
	})
	return ids, err
}

// Metadata is a copy of the image's metadata JSON.
func (m *Model) Metadata() ([]byte, error) {
	var out []byte
	err := m.use(false, func(h *C.colibri_model) error {
		var json *C.char
		var size C.size_t
		var message *C.char
		if err := errorFrom("metadata", C.cgo_model_metadata(m.lib.api, h, &json, &size, &message), message); err != nil {
			return err
		}
		out = C.GoBytes(unsafe.Pointer(json), C.int(size))
		return nil
	})
	return out, err
}

// MaxTensorRank is the number of entries of TensorInfo.Shape.
const MaxTensorRank = C.COLIBRI_MAX_TENSOR_RANK

// TensorInfo describes one tensor of the image.
type TensorInfo struct {
	Name        string
	DType       DType
	Shape       []uint64 // outermost first
	GroupSize   int      // Q8 group size, 0 otherwise
	OffsetBytes uint64
	SizeBytes   uint64
	Checksum    uint64 // XXH3-64 of the tensor's bytes
}

// Tensors lists the image's tensors in directory order.
func (m *Model) Tensors() ([]TensorInfo, error) {
	var out []TensorInfo
	err := m.use(false, func(h *C.colibri_model) error {
		var count C.size_t
		var message *C.char
		if err := errorFrom("tensors", C.cgo_model_tensor_count(m.lib.api, h, &count, &message), message); err != nil {
			return err
		}
		out = make([]TensorInfo, 0, int(count))
		for i := C.size_t(0); i < count; i++ {
			var t C.colibri_tensor_info
			message = nil
			if err := errorFrom("tensors", C.cgo_model_tensor_info(m.lib.api, h, i, &t, &message), message); err != nil {
				return err
			}
			info := TensorInfo{Name: C.GoString(t.name), DType: DType(t.dtype), GroupSize: int(t.group_size),
				OffsetBytes: uint64(t.offset_bytes), SizeBytes: uint64(t.size_bytes), Checksum: uint64(t.checksum)}
			for d := 0; d < int(t.rank) && d < MaxTensorRank; d++ {
				info.Shape = append(info.Shape, uint64(t.shape[d]))
			}
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// TokenizeFlags are COLIBRI_TOKENIZE_* flags.
type TokenizeFlags uint32

// Tokenizer flags.
const (
	// AddSpecial adds BOS/EOS as the tokenizer's post-processor says.
	AddSpecial TokenizeFlags = C.COLIBRI_TOKENIZE_ADD_SPECIAL
	// ParseSpecial turns special-token text in the input into the special token.
	ParseSpecial TokenizeFlags = C.COLIBRI_TOKENIZE_PARSE_SPECIAL
)

// DetokenizeFlags are COLIBRI_DETOKENIZE_* flags.
type DetokenizeFlags uint32

// SkipSpecial leaves special tokens (BOS, EOS, ...) out of decoded text.
const SkipSpecial DetokenizeFlags = C.COLIBRI_DETOKENIZE_SKIP_SPECIAL

// Tokenize encodes UTF-8 text into token ids.
func (m *Model) Tokenize(text string, flags TokenizeFlags) ([]int32, error) {
	return m.tokenize(false, text, flags)
}

func (m *Model) tokenize(internal bool, text string, flags TokenizeFlags) ([]int32, error) {
	var ids []int32
	err := m.use(internal, func(h *C.colibri_model) error {
		ctext := C.CString(text)
		defer C.free(unsafe.Pointer(ctext))
		ids = make([]int32, len(text)+8)
		for {
			var count C.size_t
			var message *C.char
			status := C.cgo_tokenize(m.lib.api, h, ctext, C.size_t(len(text)), C.uint32_t(flags),
				(*C.int32_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &count, &message)
			if status == C.COLIBRI_ERROR_BUFFER_TOO_SMALL {
				C.free(unsafe.Pointer(message))
				ids = make([]int32, int(count)+1)
				continue
			}
			if err := errorFrom("tokenize", status, message); err != nil {
				return err
			}
			ids = ids[:count]
			return nil
		}
	})
	return ids, err
}

// textCall runs a C function that writes NUL-terminated text into a buffer, growing it as
// the library asks.
func textCall(op string, guess int, call func(buf *C.char, capacity C.size_t, size *C.size_t, message **C.char) C.int32_t) (string, error) {
	buf := make([]byte, guess+1)
	for {
		var size C.size_t
		var message *C.char
		status := call((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &size, &message)
		if status == C.COLIBRI_ERROR_BUFFER_TOO_SMALL {
			C.free(unsafe.Pointer(message))
			buf = make([]byte, int(size)+1)
			continue
		}
		if err := errorFrom(op, status, message); err != nil {
			return "", err
		}
		return string(buf[:size]), nil
	}
}

// Detokenize decodes token ids into text (invalid UTF-8 becomes U+FFFD).
func (m *Model) Detokenize(tokens []int32, flags DetokenizeFlags) (string, error) {
	var text string
	err := m.use(false, func(h *C.colibri_model) error {
		var ptr *C.int32_t
		if len(tokens) > 0 {
			ptr = (*C.int32_t)(unsafe.Pointer(&tokens[0]))
		}
		var err error
		text, err = textCall("detokenize", 8*len(tokens)+16, func(buf *C.char, capacity C.size_t, size *C.size_t, message **C.char) C.int32_t {
			return C.cgo_detokenize(m.lib.api, h, ptr, C.size_t(len(tokens)), C.uint32_t(flags), buf, capacity, size, message)
		})
		return err
	})
	return text, err
}

// TokenText is the vocabulary string of one token, as stored in tokenizer.json.
func (m *Model) TokenText(token int32) (string, error) {
	var text string
	err := m.use(false, func(h *C.colibri_model) error {
		var err error
		text, err = textCall("token text", 32, func(buf *C.char, capacity C.size_t, size *C.size_t, message **C.char) C.int32_t {
			return C.cgo_token_text(m.lib.api, h, C.int32_t(token), buf, capacity, size, message)
		})
		return err
	})
	return text, err
}

// ChatMessage is one message of a conversation.
type ChatMessage struct {
	Role    string // "system", "user", "assistant", ...
	Content string
}

// ChatOptions configures ChatRender. The zero value renders with the model's template and ends
// with the assistant turn's opening.
type ChatOptions struct {
	NoGenerationPrompt bool              // do not end with the assistant turn's opening
	Template           string            // a Jinja template to use instead of the model's ("" = the model's)
	Variables          map[string]string // extra template variables: name -> JSON value text
}

// cStrings is a C array of C strings, freed by free.
type cStrings struct {
	array **C.char
	n     int
}

func newCStrings(values []string) cStrings {
	if len(values) == 0 {
		return cStrings{}
	}
	array := (**C.char)(C.malloc(C.size_t(len(values)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	items := unsafe.Slice(array, len(values))
	for i, v := range values {
		items[i] = C.CString(v)
	}
	return cStrings{array: array, n: len(values)}
}

func (s cStrings) free() {
	if s.array == nil {
		return
	}
	for _, p := range unsafe.Slice(s.array, s.n) {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(s.array))
}

// chatArgs holds a conversation and its options as C strings (free releases them).
type chatArgs struct {
	roles, contents, names, values cStrings
	template                       *C.char
	addPrompt                      C.uint32_t
	count                          C.size_t
}

func newChatArgs(messages []ChatMessage, opts ChatOptions) *chatArgs {
	roles := make([]string, len(messages))
	contents := make([]string, len(messages))
	for i, msg := range messages {
		roles[i], contents[i] = msg.Role, msg.Content
	}
	var names, values []string
	for k, v := range opts.Variables {
		names = append(names, k)
		values = append(values, v)
	}
	c := &chatArgs{roles: newCStrings(roles), contents: newCStrings(contents), names: newCStrings(names),
		values: newCStrings(values), addPrompt: 1, count: C.size_t(len(messages))}
	if opts.Template != "" {
		c.template = C.CString(opts.Template)
	}
	if opts.NoGenerationPrompt {
		c.addPrompt = 0
	}
	return c
}

func (c *chatArgs) free() {
	c.roles.free()
	c.contents.free()
	c.names.free()
	c.values.free()
	if c.template != nil {
		C.free(unsafe.Pointer(c.template))
	}
}

// ChatRender renders messages with the model's chat template (like transformers'
// apply_chat_template with tokenize=False). Tokenize the result with ParseSpecial.
func (m *Model) ChatRender(messages []ChatMessage, opts ChatOptions) (string, error) {
	c := newChatArgs(messages, opts)
	defer c.free()
	var text string
	err := m.use(false, func(h *C.colibri_model) error {
		var err error
		text, err = textCall("chat render", 256, func(buf *C.char, capacity C.size_t, size *C.size_t, message **C.char) C.int32_t {
			return C.cgo_chat_render(m.lib.api, h, c.roles.array, c.contents.array, c.count, c.addPrompt,
				c.template, c.names.array, c.values.array, C.size_t(c.names.n), buf, capacity, size, message)
		})
		return err
	})
	return text, err
}
