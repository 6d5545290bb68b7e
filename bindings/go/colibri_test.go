package colibri

// The binding's test. The ctest wrapper (bindings/CMakeLists.txt) passes the paths:
//
//	COLIBRI_LIB         the built libcolibri.so.1
//	COLIBRI_MODEL_TOOL  the built colibri-model (converts the oracle fixture)
//	COLIBRI_ORACLE_DIR  tests/fixtures/oracle/mixtral_gqa (default: found from this directory)
//
// Without COLIBRI_LIB / COLIBRI_MODEL_TOOL the tests that need the library are skipped.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

type oracle struct {
	PromptText string  `json:"prompt_text"`
	InputIDs   []int32 `json:"input_ids"`
	Greedy     []int32 `json:"greedy_tokens"`
}

var (
	fixture struct {
		lib    string
		image  string
		tmp    string
		oracle oracle
		skip   string
	}
)

func TestMain(m *testing.M) {
	code := func() int {
		tmp, err := os.MkdirTemp(os.Getenv("COLIBRI_TEST_TMPDIR"), "colibri-go-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		fixture.tmp = tmp
		if err := setUp(); err != nil {
			fmt.Fprintln(os.Stderr, "setup:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func setUp() error {
	fixture.lib = os.Getenv("COLIBRI_LIB")
	tool := os.Getenv("COLIBRI_MODEL_TOOL")
	if fixture.lib == "" || tool == "" {
		fixture.skip = "COLIBRI_LIB and COLIBRI_MODEL_TOOL are not set (run through ctest: bindings/CMakeLists.txt)"
		return nil
	}
	dir := os.Getenv("COLIBRI_ORACLE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "tests", "fixtures", "oracle", "mixtral_gqa")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "oracle.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &fixture.oracle); err != nil {
		return err
	}
	fixture.image = filepath.Join(fixture.tmp, "mixtral_gqa.colibri")
	out, err := exec.Command(tool, "convert", dir, "-o", fixture.image, "--force").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s convert: %v\n%s", tool, err, out)
	}
	return nil
}

func openModel(t *testing.T) *Model {
	t.Helper()
	if fixture.skip != "" {
		t.Skip(fixture.skip)
	}
	m, err := Open(fixture.image, WithLibrary(fixture.lib), WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newSession(t *testing.T, m *Model) *Session {
	t.Helper()
	s, err := m.NewSession(SessionOptions{ContextLength: 64, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func greedyOptions() GenerateOptions {
	sampler := GreedySampler()
	return GenerateOptions{MaxTokens: len(fixture.oracle.Greedy), IgnoreEOS: true, Sampler: &sampler}
}

func argmax(row []float32) int32 {
	best := 0
	for i := range row {
		if row[i] > row[best] {
			best = i
		}
	}
	return int32(best)
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBundledHeaderIsCurrent(t *testing.T) {
	upstream, err := os.ReadFile(filepath.Join("..", "..", "capi", "colibri.h"))
	if err != nil {
		t.Skip("not inside the Colibri source tree:", err)
	}
	bundled, err := os.ReadFile("colibri.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(upstream, bundled) {
		t.Fatal("bindings/go/colibri.h differs from capi/colibri.h: run `go generate` in bindings/go (cp ../../capi/colibri.h .)")
	}
}

func TestLoad(t *testing.T) {
	if fixture.skip != "" {
		t.Skip(fixture.skip)
	}
	lib, err := Load(fixture.lib)
	if err != nil {
		t.Fatal(err)
	}
	if lib.ABIVersion() != ABIVersion || lib.Version() == "" {
		t.Fatalf("abi %d version %q", lib.ABIVersion(), lib.Version())
	}
	if again, _ := Load(fixture.lib); again != lib {
		t.Error("loading the same path twice gave two libraries")
	}
	for code := StatusInternal; code <= StatusDone; code++ {
		if got := lib.StatusString(code); got != code.String() {
			t.Errorf("status %d: library %q, Go %q", int32(code), got, code.String())
		}
	}
	_, err = Load("/nonexistent/libcolibri.so.1")
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusIO || !strings.Contains(e.Message, "cannot load") {
		t.Errorf("missing library: %v", err)
	}
	_, err = Load("libm.so.6")
	if !errors.Is(err, StatusUnsupported) || !strings.Contains(err.Error(), "not libcolibri") {
		t.Errorf("libm: %v", err)
	}
}

func TestModelInfoAndTokenizer(t *testing.T) {
	m := openModel(t)
	info := m.Info()
	if info.Family != "mixtral" || info.VocabSize != 512 || info.TopK != 2 || info.ExpertCount != 8 || !info.HasTokenizer {
		t.Fatalf("info: %+v", info)
	}
	if info.SlidingWindow != 0 || info.SlidingLayerCount != 0 || info.AttentionSinks || info.RouterBias ||
		info.ExpertBias || info.ExpertActivation != "silu" || info.SwiGLULimit != 0 {
		t.Fatalf("gpt-oss fields of a Mixtral: %+v", info)
	}
	// Multi-head latent attention's fields: grouped-query attention, no ranks; k and v of 2 KV
	// heads x 16 values per layer in the cache.
	if info.Attention != "gqa" || info.QLoRARank != 0 || info.KVLoRARank != 0 || info.VHeadDim != 0 ||
		info.RopeInterleave || info.MTPLayerCount != 0 || info.KVCacheBytesPerToken != 2*2*2*16*4 ||
		info.AttentionScale != 0.25 {
		t.Fatalf("MLA fields of a Mixtral: %+v", info)
	}
	tensors, err := m.Tensors()
	if err != nil || len(tensors) != info.TensorCount || len(tensors) == 0 || tensors[0].Name == "" {
		t.Fatalf("tensors: %d %v", len(tensors), err)
	}
	meta, err := m.Metadata()
	if err != nil || !json.Valid(meta) {
		t.Fatalf("metadata: %v", err)
	}
	eos, err := m.EOSTokens()
	if err != nil || len(eos) != info.EOSTokenCount || (len(eos) > 0 && eos[0] != info.EOSTokenID) {
		t.Fatalf("eos: %v %v", eos, err)
	}
	// The oracle's input ids are BOS + the prompt text's ids (+ possibly more ids).
	ids, err := m.Tokenize(fixture.oracle.PromptText, AddSpecial)
	if err != nil || len(ids) > len(fixture.oracle.InputIDs) || !equalTokens(ids, fixture.oracle.InputIDs[:len(ids)]) {
		t.Fatalf("tokenize: %v %v, want a prefix of %v", ids, err, fixture.oracle.InputIDs)
	}
	text, err := m.Detokenize(ids, SkipSpecial)
	if err != nil || text != fixture.oracle.PromptText {
		t.Fatalf("detokenize: %q %v", text, err)
	}
	if piece, err := m.TokenText(ids[0]); err != nil || piece == "" {
		t.Fatalf("token text: %q %v", piece, err)
	}
	if _, err := m.Detokenize([]int32{int32(info.VocabSize)}, 0); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("out-of-vocabulary id: %v", err)
	}
}

// Prefill the oracle's input ids, then decode greedily: the expected tokens exactly.
func TestOracleGreedyPrefillDecode(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	if err := s.Prefill(0, fixture.oracle.InputIDs); err != nil {
		t.Fatal(err)
	}
	for i, want := range fixture.oracle.Greedy {
		logits, err := s.Logits(0)
		if err != nil {
			t.Fatal(err)
		}
		if got := argmax(logits); got != want {
			t.Fatalf("greedy token %d: got %d, want %d", i, got, want)
		}
		if err := s.Decode(0, want); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.SequenceLength(0); err != nil || n != len(fixture.oracle.InputIDs)+len(fixture.oracle.Greedy) {
		t.Fatalf("sequence length %d %v", n, err)
	}
	stats, err := s.Stats()
	if err != nil || stats.ForwardCalls == 0 || len(stats.Stages) == 0 || stats.Stages[0].Name != "embedding" {
		t.Fatalf("stats: %+v %v", stats, err)
	}
}

// A model loaded into memory gives the mapped model's logits bit for bit.
func TestLoadIntoMemory(t *testing.T) {
	mapped := openModel(t)
	loaded, err := Open(fixture.image, WithLibrary(fixture.lib), WithThreads(1), WithLoadIntoMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	a, b := newSession(t, mapped), newSession(t, loaded)
	for _, s := range []*Session{a, b} {
		if err := s.Prefill(0, fixture.oracle.InputIDs); err != nil {
			t.Fatal(err)
		}
	}
	la, errA := a.Logits(0)
	lb, errB := b.Logits(0)
	if errA != nil || errB != nil || len(la) == 0 || len(la) != len(lb) {
		t.Fatalf("logits: %d %v, %d %v", len(la), errA, len(lb), errB)
	}
	for i := range la {
		if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
			t.Fatalf("logit %d: mapped %v, loaded %v", i, la[i], lb[i])
		}
	}
}

// MaxISA caps the kernels: the backend is the cap or the CPU's best below it, the scalar cap
// gives ForceScalar's bits, and every level stays within 1e-4 of the others.
// A CUDA session on a machine without a device (module, driver or GPU missing) is refused with
// the library's "no CUDA device: ..." message; with one, it is skipped here (scripts/gpu-check.sh
// tests the device).
func TestDeviceCUDAWithoutDevice(t *testing.T) {
	m := openModel(t)
	s, err := m.NewSession(SessionOptions{ContextLength: 64, Device: DeviceCUDA})
	if err == nil {
		s.Close()
		t.Skip("a CUDA device is present")
	}
	if !strings.Contains(err.Error(), "no CUDA device: ") {
		t.Fatalf("Device CUDA: %v", err)
	}
	if _, err := m.NewSession(SessionOptions{Device: 7}); err == nil || !strings.Contains(err.Error(), "device_kind") {
		t.Fatalf("Device 7: %v", err)
	}
}

func TestMaxISA(t *testing.T) {
	m := openModel(t)
	run := func(opts SessionOptions) (string, []float32) {
		opts.ContextLength = 64
		opts.Threads = 2
		s, err := m.NewSession(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		info, err := s.Info()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Prefill(0, fixture.oracle.InputIDs); err != nil {
			t.Fatal(err)
		}
		logits, err := s.Logits(0)
		if err != nil {
			t.Fatal(err)
		}
		return info.Backend, append([]float32(nil), logits...)
	}
	rank := map[string]uint32{"cpu-scalar": ISAScalar, "cpu-avx2": ISAAVX2, "cpu-avx512": ISAAVX512}
	bestName, best := run(SessionOptions{})
	for _, isa := range []uint32{ISAScalar, ISAAVX2, ISAAVX512} {
		name, logits := run(SessionOptions{MaxISA: isa})
		want := isa
		if rank[bestName] < want {
			want = rank[bestName]
		}
		if rank[name] != want {
			t.Errorf("MaxISA %d: backend %s, want level %d", isa, name, want)
		}
		for i := range logits {
			if d := math.Abs(float64(logits[i] - best[i])); d > 1e-4 {
				t.Fatalf("MaxISA %d: logit %d differs from %s by %g", isa, i, bestName, d)
			}
		}
	}
	scalarName, scalar := run(SessionOptions{MaxISA: ISAScalar})
	forcedName, forced := run(SessionOptions{ForceScalar: true})
	if scalarName != "cpu-scalar" || forcedName != "cpu-scalar" {
		t.Fatalf("backends %s, %s", scalarName, forcedName)
	}
	for i := range scalar {
		if math.Float32bits(scalar[i]) != math.Float32bits(forced[i]) {
			t.Fatalf("logit %d: ISAScalar %v, ForceScalar %v", i, scalar[i], forced[i])
		}
	}
	if _, err := m.NewSession(SessionOptions{MaxISA: 9}); err == nil || !strings.Contains(err.Error(), "max_isa") {
		t.Fatalf("MaxISA 9: %v", err)
	}
}

func streamAll(t *testing.T, s *Session, prompt []int32, opts GenerateOptions) ([]int32, string) {
	t.Helper()
	st, err := s.StreamTokens(prompt, opts)
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	defer st.Close()
	var text strings.Builder
	for {
		piece, ok, err := st.Next()
		if err != nil {
			t.Error(err)
			return nil, ""
		}
		if !ok {
			break
		}
		text.WriteString(piece)
	}
	tokens, err := st.Tokens()
	if err != nil {
		t.Error(err)
	}
	return tokens, text.String()
}

func TestGenerateAndStreamGreedy(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	tokens, streamed := streamAll(t, s, fixture.oracle.InputIDs, greedyOptions())
	if !equalTokens(tokens, fixture.oracle.Greedy) {
		t.Fatalf("stream tokens %v, want %v", tokens, fixture.oracle.Greedy)
	}
	var text strings.Builder
	res, err := s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, greedyOptions(), func(piece string) error {
		text.WriteString(piece)
		return nil
	})
	if err != nil || res.FinishReason != FinishLength || res.GeneratedTokens != len(fixture.oracle.Greedy) ||
		res.PromptTokens != len(fixture.oracle.InputIDs) {
		t.Fatalf("generate: %+v %v", res, err)
	}
	if text.String() != streamed || streamed == "" {
		t.Fatalf("callback text %q, stream text %q", text.String(), streamed)
	}
	want, _ := m.Detokenize(fixture.oracle.Greedy, SkipSpecial)
	if streamed != want {
		t.Errorf("streamed %q, detokenized greedy tokens %q", streamed, want)
	}
	// The text form tokenizes with special tokens.
	ids, _ := m.Tokenize(fixture.oracle.PromptText, AddSpecial)
	res, err = s.Generate(context.Background(), fixture.oracle.PromptText, greedyOptions(), nil)
	if err != nil || res.PromptTokens != len(ids) || ids[0] != fixture.oracle.InputIDs[0] {
		t.Fatalf("generate from text: %+v %v", res, err)
	}
}

func TestCancellation(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	opts := greedyOptions()

	// fn returns an error: the generation stops, the error comes back.
	stop := errors.New("enough")
	pieces := 0
	res, err := s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, opts, func(string) error {
		pieces++
		if pieces == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || pieces != 2 || res.FinishReason != FinishCancelled ||
		res.GeneratedTokens >= len(fixture.oracle.Greedy) {
		t.Fatalf("fn error: %+v %v (pieces %d)", res, err, pieces)
	}

	// The context is cancelled during the generation.
	ctx, cancel := context.WithCancel(context.Background())
	pieces = 0
	res, err = s.GenerateTokens(ctx, fixture.oracle.InputIDs, opts, func(string) error {
		pieces++
		if pieces == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || pieces != 3 || res.FinishReason != FinishCancelled {
		t.Fatalf("ctx cancel: %+v %v (pieces %d)", res, err, pieces)
	}
	// An already cancelled context does nothing.
	if _, err := s.GenerateTokens(ctx, fixture.oracle.InputIDs, opts, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}

	// A stream stopped after two pieces.
	st, err := s.StreamTokens(fixture.oracle.InputIDs, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, ok, err := st.Next(); !ok || err != nil {
			t.Fatalf("next: %v %v", ok, err)
		}
	}
	if r, err := st.Result(); err != nil || r.FinishReason != FinishNone {
		t.Fatalf("running stream: %+v %v", r, err)
	}
	// While the stream is open the session is busy: the library says so.
	if err := s.Prefill(0, fixture.oracle.InputIDs); !errors.Is(err, StatusBadState) {
		t.Fatalf("prefill during a stream: %v", err)
	}
	if tokens, err := st.Tokens(); err != nil || len(tokens) < 2 || len(tokens) >= len(fixture.oracle.Greedy) {
		t.Fatalf("tokens of a stopped stream: %v %v", tokens, err)
	}
	st.Close()
	st.Close()
	if _, _, err := st.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after close: %v", err)
	}
	// The session works again.
	tokens, _ := streamAll(t, s, fixture.oracle.InputIDs, opts)
	if !equalTokens(tokens, fixture.oracle.Greedy) {
		t.Fatalf("after cancellation: %v", tokens)
	}
}

func TestCallbackMisuseAndPanic(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	// The callback must not use its own session: that is refused, not a race.
	var inner error
	_, err := s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, greedyOptions(), func(string) error {
		inner = s.Reset()
		return inner
	})
	if !errors.Is(inner, StatusBadState) || !errors.Is(err, StatusBadState) {
		t.Fatalf("re-entrant call: %v / %v", inner, err)
	}
	// A panic in the callback stops the generation and reaches the caller; the session survives.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, greedyOptions(), func(string) error { panic("boom") })
		t.Fatal("no panic")
	}()
	tokens, _ := streamAll(t, s, fixture.oracle.InputIDs, greedyOptions())
	if !equalTokens(tokens, fixture.oracle.Greedy) {
		t.Fatalf("after a panic: %v", tokens)
	}
	// runtime.Goexit in the callback (what t.FailNow calls) and panic(nil) stop the generation
	// after that piece and end the calling goroutine, without unwinding through the library:
	// the session is not left with an open stream.
	for _, exit := range []func(){runtime.Goexit, func() { panic(nil) }} {
		pieces, returned := 0, false
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, greedyOptions(), func(string) error {
				pieces++
				exit()
				return nil
			})
			returned = true
		}()
		<-done
		if pieces != 1 || returned {
			t.Fatalf("after exiting the callback: %d pieces, GenerateTokens returned: %v", pieces, returned)
		}
		tokens, _ := streamAll(t, s, fixture.oracle.InputIDs, greedyOptions())
		if !equalTokens(tokens, fixture.oracle.Greedy) {
			t.Fatalf("after exiting the callback: %v", tokens)
		}
	}
}

// Counts and indices are C uint32_t: a Go int that would wrap is refused, never truncated
// (sequence 1<<32 must not become sequence 0).
func TestOutOfRangeInts(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	if err := s.Prefill(0, fixture.oracle.InputIDs); err != nil {
		t.Fatal(err)
	}
	before, _ := s.SequenceLength(0)
	for name, err := range map[string]error{
		"Decode(1<<32)":        s.Decode(1<<32, fixture.oracle.InputIDs[0]),
		"Decode(-1)":           s.Decode(-1, fixture.oracle.InputIDs[0]),
		"Batch Sequence 1<<32": s.Batch([]BatchEntry{{Sequence: 1 << 32, Position: -1, Token: 1}}),
		"Batch Position 1<<32": s.Batch([]BatchEntry{{Position: 1 << 32, Token: 1}}),
		"ResetSequence(1<<32)": s.ResetSequence(1 << 32),
		"MaxTokens -1": func() error {
			_, err := s.GenerateTokens(context.Background(), fixture.oracle.InputIDs, GenerateOptions{MaxTokens: -1}, nil)
			return err
		}(),
		"Sampler.TopK -1": func() error {
			_, err := s.StreamTokens(fixture.oracle.InputIDs, GenerateOptions{MaxTokens: 4, Sampler: &SamplerOptions{TopK: -1}})
			return err
		}(),
		"ContextLength 1<<32+8": func() error { _, err := m.NewSession(SessionOptions{ContextLength: 1<<32 + 8}); return err }(),
		"WithThreads(-1)":       func() error { _, err := Open(fixture.image, WithLibrary(fixture.lib), WithThreads(-1)); return err }(),
	} {
		if !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after, _ := s.SequenceLength(0); after != before {
		t.Fatalf("sequence 0 changed from %d to %d tokens", before, after)
	}
}

func TestBrokenFiles(t *testing.T) {
	if fixture.skip != "" {
		t.Skip(fixture.skip)
	}
	var messages []string
	var mu sync.Mutex
	lib, err := Load(fixture.lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.SetLogHandler(LogDebug, func(level LogLevel, message string) {
		mu.Lock()
		messages = append(messages, message)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	defer lib.SetLogHandler(LogOff, nil)

	path := filepath.Join(fixture.tmp, "broken.colibri")
	gguf := make([]byte, 64)
	copy(gguf, []byte{'G', 'G', 'U', 'F', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2})
	if err := os.WriteFile(path, gguf, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path, WithLoadedLibrary(lib))
	var e *Error
	if m != nil || !errors.As(err, &e) || e.Status != StatusNotAnImage || !strings.Contains(e.Message, "GGUF") ||
		!errors.Is(err, StatusNotAnImage) || e.Op != "open" {
		t.Fatalf("GGUF file: %v", err)
	}
	t.Logf("broken file: %v", err)

	// A truncated image.
	raw, err := os.ReadFile(fixture.image)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(fixture.tmp, "truncated.colibri")
	if err := os.WriteFile(truncated, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(truncated, WithLoadedLibrary(lib)); !errors.Is(err, StatusCorrupt) {
		t.Fatalf("truncated image: %v", err)
	}
	if _, err := Open(filepath.Join(fixture.tmp, "missing.colibri"), WithLoadedLibrary(lib)); !errors.Is(err, StatusIO) {
		t.Fatalf("missing file: %v", err)
	}
	mu.Lock()
	logged := strings.Join(messages, "\n")
	mu.Unlock()
	if !strings.Contains(logged, "GGUF") {
		t.Errorf("the debug log does not mention the failure: %q", logged)
	}
}

// A log handler that panics ends only its own goroutine: the call that logged returns normally
// (the panic does not unwind through libcolibri's frames).
func TestPanickingLogHandler(t *testing.T) {
	if fixture.skip != "" {
		t.Skip(fixture.skip)
	}
	lib, err := Load(fixture.lib)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := lib.SetLogHandler(LogDebug, func(LogLevel, string) { calls++; panic("log boom") }); err != nil {
		t.Fatal(err)
	}
	defer lib.SetLogHandler(LogOff, nil)
	_, err = Open(filepath.Join(fixture.tmp, "missing-for-log.colibri"), WithLoadedLibrary(lib))
	if !errors.Is(err, StatusIO) || calls == 0 {
		t.Fatalf("open with a panicking log handler: %v (handler called %d times)", err, calls)
	}
}

// Errors are read in the same C call as the failure: many goroutines failing differently at
// once (and moving between OS threads) each get their own message.
func TestErrorsUnderConcurrency(t *testing.T) {
	m := openModel(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if g%2 == 0 {
					_, err := m.Detokenize([]int32{int32(100000 + g)}, 0)
					if !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprint(100000+g)) {
						t.Errorf("goroutine %d: %v", g, err)
						return
					}
				} else if _, err := m.Tokenize("hello", 0); err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// 4 goroutines, 4 sessions, one model: each result equals the sequential one and the oracle's.
func TestConcurrentSessions(t *testing.T) {
	m := openModel(t)
	// Prefixes whose greedy continuations decode cleanly as a stream with this random-weight
	// fixture (some others hit the library's "streaming decode lost its prefix" error on byte-
	// fallback runs that are not valid UTF-8).
	in := fixture.oracle.InputIDs
	prompts := [][]int32{in, in[:7], in[:9], in[:12]}
	opts := greedyOptions()
	generateText := func(s *Session, prompt []int32) string {
		var text strings.Builder
		_, err := s.GenerateTokens(context.Background(), prompt, opts, func(p string) error {
			text.WriteString(p)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		return text.String()
	}
	// Sequential: one session, one prompt after the other; tokens (stream) and text (callback).
	seqTokens := make([][]int32, len(prompts))
	seqTexts := make([]string, len(prompts))
	s := newSession(t, m)
	for i, p := range prompts {
		seqTokens[i], _ = streamAll(t, s, p, opts)
		seqTexts[i] = generateText(s, p)
	}
	if !equalTokens(seqTokens[0], fixture.oracle.Greedy) {
		t.Fatalf("sequential %v, oracle %v", seqTokens[0], fixture.oracle.Greedy)
	}
	// Concurrent: 4 goroutines, each with its own session on the shared model, both forms.
	for round := 0; round < 2; round++ {
		tokens := make([][]int32, len(prompts))
		texts := make([]string, len(prompts))
		var wg sync.WaitGroup
		for i := range prompts {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				s, err := m.NewSession(SessionOptions{ContextLength: 64, Threads: 1})
				if err != nil {
					t.Error(err)
					return
				}
				defer s.Close()
				if (i+round)%2 == 0 {
					tokens[i], _ = streamAll(t, s, prompts[i], opts)
				} else {
					texts[i] = generateText(s, prompts[i])
				}
			}(i)
		}
		wg.Wait()
		for i := range prompts {
			if (i+round)%2 == 0 && !equalTokens(tokens[i], seqTokens[i]) {
				t.Errorf("round %d prompt %d: concurrent %v, sequential %v", round, i, tokens[i], seqTokens[i])
			}
			if (i+round)%2 == 1 && texts[i] != seqTexts[i] {
				t.Errorf("round %d prompt %d: concurrent text %q, sequential %q", round, i, texts[i], seqTexts[i])
			}
		}
	}
}

func TestLifetimes(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Tokenize("x", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("tokenize after close: %v", err)
	}
	if _, err := m.NewSession(SessionOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("session after close: %v", err)
	}
	// The open session keeps the model usable, text prompts included.
	if _, err := s.Generate(context.Background(), fixture.oracle.PromptText, greedyOptions(), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if err := s.Prefill(0, []int32{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("prefill after close: %v", err)
	}
	// Bad options are the library's errors, with its message.
	m2 := openModel(t)
	_, err := m2.NewSession(SessionOptions{MaxSequences: 1 << 20})
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidArgument || !strings.Contains(e.Message, "max_sequences") {
		t.Fatalf("bad session options: %v", err)
	}
}

func TestChatBatchMoE(t *testing.T) {
	m := openModel(t)
	// The chat template (expected text from transformers, tests/fixtures/tokenizer).
	text, err := m.ChatRender([]ChatMessage{{Role: "user", Content: "Hello! Who are you?"}}, ChatOptions{})
	if err != nil || text != "<s>[INST] Hello! Who are you? [/INST]" {
		t.Fatalf("chat: %q %v", text, err)
	}
	if _, err := m.ChatRender([]ChatMessage{{Role: "user", Content: "x"}}, ChatOptions{Template: "{% for %}"}); err == nil {
		t.Fatal("a broken template rendered")
	}

	// Two sequences decoded in one batch: both continue the oracle's greedy path.
	s, err := m.NewSession(SessionOptions{ContextLength: 64, MaxSequences: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := fixture.oracle.Greedy
	for seq := 0; seq < 2; seq++ {
		if err := s.Prefill(seq, fixture.oracle.InputIDs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Batch([]BatchEntry{{Sequence: 0, Position: -1, Token: g[0], WantLogits: true},
		{Sequence: 1, Position: -1, Token: g[0], WantLogits: true}}); err != nil {
		t.Fatal(err)
	}
	for row := 0; row < 2; row++ {
		logits, err := s.Logits(row)
		if err != nil || argmax(logits) != g[1] {
			t.Fatalf("batch row %d: %v", row, err)
		}
	}
	if _, err := s.Logits(2); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("row 2: %v", err)
	}

	// The MoE block of layer 0 on caller data, with the router and with a static routing table.
	info := m.Info()
	hidden := make([]float32, 2*info.HiddenSize)
	for i := range hidden {
		hidden[i] = float32(i%7) * 0.01
	}
	out, err := s.MoELayer(0, hidden, nil, nil)
	if err != nil || len(out) != len(hidden) {
		t.Fatalf("moe layer: %v", err)
	}
	experts := make([]int32, 2*info.TopK)
	weights := make([]float32, 2*info.TopK)
	for i := range experts {
		experts[i], weights[i] = int32(i%info.ExpertCount), 0.5
	}
	if _, err := s.MoELayer(0, hidden, experts, weights); err != nil {
		t.Fatalf("static routes: %v", err)
	}
	experts[0] = int32(info.ExpertCount)
	if _, err := s.MoELayer(0, hidden, experts, weights); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("bad expert id: %v", err)
	}
}
